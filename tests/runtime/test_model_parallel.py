"""keras_vit.runtime.model_parallel: which variables its layout map shards (every kernel of
the attention, the MLP and the patch embedding, in the blocks, a MAP head and a hybrid, and a
hybrid's stem kernels where the model axis divides their output channels), the meshes it takes
for every named size and refuses in one line, and (large: a KERAS_BACKEND=jax process with 4
host devices) one training step on a batch 2 x model 2 mesh against one device and `keras-vit
train --strategy model_parallel`, and (large, 2 devices) one step of a hybrid with its stem
sharded against one device. The ViT's step on 2 devices (model axis 2) runs in every run with
the JAX CLI subset (tests/backends/test_jax_cli.py)."""

import json
import os
import subprocess
import sys

import keras
import pytest

import keras_vit
from keras_vit.runtime import distribute, model_parallel
from keras_vit.runtime.model_parallel import ModelParallelError
from keras_vit.spec import configs
from tests.backends.subset import ROOT
from tests.helpers.model_parallel_step import (
    HYBRID_STEM_ON_2,
    SHARDED,
    TINY_HYBRID,
    check_step,
    expected_axes,
)

SMALL = dict(image_size=32, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=1, num_classes=3)


def mesh(batch=2, model=2):
    devices = [f"cpu:{i}" for i in range(batch * model)]
    return keras.distribution.DeviceMesh((batch, model), ("batch", "model"), devices)


@pytest.mark.parametrize(
    "build",
    [
        lambda: keras_vit.ViT(patch_size=8, **SMALL),
        lambda: keras_vit.ViT(patch_size=8, pooling="map", **SMALL),
        lambda: keras_vit.HybridViT(resnet_stages=(1,), patch_size=1, **SMALL),
    ],
    ids=["vit", "map_head", "hybrid"],
)
def test_the_layout_map_shards_every_attention_mlp_and_embedding_kernel(build):
    layout_map = model_parallel.vit_layout_map(mesh())
    model = build()
    sharded = 0
    for variable in model.weights:
        layout = layout_map[variable.path]
        axes = expected_axes(variable.path)
        assert (layout and tuple(layout.axes)) == axes, variable.path
        if layout is not None:
            sharded += 1
            assert len(layout.axes) == len(variable.shape), variable.path
            for size, axis in zip(variable.shape, layout.axes, strict=True):
                assert axis is None or size % 2 == 0, (variable.path, variable.shape)
    attention_layers = 2 if "MAPHead_0/probe" in {v.path for v in model.weights} else 1
    assert sharded == 2 + 10 * attention_layers  # embedding; q/k/v kernels and biases, out, MLP


def test_given_the_architecture_a_hybrids_stem_shards_where_the_model_axis_divides():
    """Stem kernels whose output channels (3) the model axis (2) does not divide stay whole,
    the others (12) split by output channel; the listed rules say the same."""
    model = keras_vit.HybridViT(**TINY_HYBRID)
    layout_map = model_parallel.vit_layout_map(mesh(1, 2), TINY_HYBRID)
    stem = [v for v in model.weights if v.path.startswith(("conv_root", "gn_root", "block"))]
    assert len(stem) == 15  # 5 kernels, 5 GroupNorms' gamma and beta
    for variable in model.weights:
        layout = layout_map[variable.path]
        assert (layout and tuple(layout.axes)) == expected_axes(variable.path, HYBRID_STEM_ON_2)
    rules = dict(model_parallel.layout_rules(TINY_HYBRID, 2))
    listed = [pattern for pattern in rules if "conv" in pattern and "embedding" not in pattern]
    assert listed == [r"(?:.*/)?block1_unit\d+/(?:conv3|conv_proj)/kernel"]
    assert model_parallel.layout_rules(None, 2) == model_parallel.LAYOUT_RULES


@pytest.mark.parametrize("name", [name for name in configs.HYBRID_CONFIGS])
@pytest.mark.parametrize("devices", [2, 4])
def test_every_named_hybrids_stem_kernels_shard_by_output_channel(name, devices):
    """The release's stems (root width 64) split every convolution kernel over the model
    axis; the kernels' output widths: 64, then 64 * 2**(s - 1) and 4x that per stage."""
    stages = configs.HYBRID_CONFIGS[name].resnet_stages
    widths = {"conv_root": 64}
    for stage in range(1, len(stages) + 1):
        for conv, factor in (("conv1", 1), ("conv2", 1), ("conv3", 4), ("conv_proj", 4)):
            widths[f"block{stage}_unit1/{conv}"] = factor * 64 * 2 ** (stage - 1)
    layout_map = model_parallel.vit_layout_map(mesh(1, devices), name)
    for prefix, width in widths.items():
        assert width % devices == 0
        assert tuple(layout_map[f"{prefix}/kernel"].axes) == (None, None, None, "model"), prefix
    assert layout_map["gn_root/gamma"] is None and layout_map["block1_unit1/gn1/beta"] is None


def sharded_shapes(sizes):
    """The global shape and axes of each sharded kernel of a model of `sizes` (see SHARDED)."""
    d, h, m = sizes["hidden_dim"], sizes["num_heads"], sizes["mlp_dim"]
    return [
        ((16, 16, 3, d), SHARDED["embedding/conv/kernel"]),
        ((d, h, d // h), SHARDED["query/kernel"]),
        ((h, d // h, d), SHARDED["out/kernel"]),
        ((d, m), SHARDED["Dense_0/kernel"]),
        ((m, d), SHARDED["Dense_1/kernel"]),
    ]


@pytest.mark.parametrize("name", list(configs.MODEL_CONFIGS))
@pytest.mark.parametrize("devices", [1, 2, 4])
def test_every_named_size_and_hybrid_shards_evenly(name, devices):
    sizes = model_parallel.architecture_sizes(name)
    model = model_parallel.default_model_axis(sizes, devices)
    batch = devices // model
    model_parallel.check_mesh(sizes, batch, model)
    mesh_sizes = {"batch": batch, "model": model, None: 1}
    for shape, axes in sharded_shapes(sizes):
        for size, axis in zip(shape, axes, strict=True):
            assert size % mesh_sizes[axis] == 0, (name, shape, axes)
    # the model axis takes as many devices as the sizes allow: all of them for 4 heads-divisible
    if sizes["num_heads"] % devices == 0:
        assert model == devices


@pytest.mark.parametrize(
    "sizes, batch, model, message",
    [
        ({"num_heads": 12, "hidden_dim": 768, "mlp_dim": 3072}, 1, 8, "divide num_heads=12"),
        ({"num_heads": 4, "hidden_dim": 64, "mlp_dim": 6}, 1, 4, "divide mlp_dim=6"),
        ({"num_heads": 16, "hidden_dim": 1280, "mlp_dim": 5120}, 1, 32, "divide num_heads=16"),
        ({"num_heads": 2, "hidden_dim": 6, "mlp_dim": 8}, 4, 2, "batch axis of 4 devices"),
    ],
)
def test_a_mesh_the_sizes_do_not_divide_is_refused_in_one_line(sizes, batch, model, message):
    with pytest.raises(ModelParallelError) as info:
        model_parallel.check_mesh(sizes, batch, model)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_sizes_come_from_names_configs_and_model_arguments():
    b16 = {"num_heads": 12, "hidden_dim": 768, "mlp_dim": 3072}
    assert model_parallel.architecture_sizes("ViT-B_16") == b16
    assert model_parallel.architecture_sizes(configs.get_hybrid_config("R50+B/16")) == b16
    assert model_parallel.architecture_sizes({**b16, "num_layers": 12}) == b16
    with pytest.raises(ModelParallelError, match="mlp_dim must be a positive int"):
        model_parallel.architecture_sizes({"num_heads": 12, "hidden_dim": 768})


def test_tensorflow_is_refused_in_one_line_naming_the_backend():
    assert keras.backend.backend() == "tensorflow"
    with pytest.raises(ModelParallelError, match="KERAS_BACKEND=jax; the Keras backend is 'ten"):
        model_parallel.vit_model_parallel("B/16")
    with pytest.raises(distribute.StrategyUnavailableError, match="the Keras backend is 'ten"):
        distribute.resolve_strategy("model_parallel")


def one_step_on_jax(device_count, *meshes):
    """The RESULT of tests/helpers/model_parallel_step.py on `device_count` host devices."""
    environment = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={device_count}",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    completed = subprocess.run(
        [sys.executable, "-m", "tests.helpers.model_parallel_step", *meshes],
        capture_output=True, text=True, timeout=1200, env=environment, cwd=ROOT,
    )  # fmt: skip
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    assert completed.returncode == 0 and lines, completed.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.mark.large  # ~30 s of CPU: a fresh JAX process, three compiled steps and a CLI run
def test_fsdp_and_model_axes_on_four_devices_and_the_cli():
    pytest.importorskip("jax")
    result = one_step_on_jax(4, "2x2", "cli")
    assert result["devices"] == 4
    check_step(result, "2x2", 2, 2)
    code, stderr, record = result["cli"]
    assert code == 0, stderr[-3000:]
    assert record["strategy"] == "ModelParallel (batch 1 x model 4)"  # the recipe: 4 heads
    assert record["num_replicas"] == 1


@pytest.mark.large  # ~17 s of CPU: a fresh JAX process and two compiled steps of a hybrid
def test_a_hybrid_with_its_stem_sharded_over_two_devices_steps_as_one_device():
    """A hybrid's ResNet stem on a model axis of 2: the kernels whose output channels 2
    divides split by output channel, the others replicated; the loss and the weights after
    one step within 1e-5 of one device, each kernel and its momentum on its share."""
    pytest.importorskip("jax")
    result = one_step_on_jax(2, "hybrid", "1x2")
    assert result["devices"] == 2
    check_step(result, "1x2", 1, 2, stem=HYBRID_STEM_ON_2)
