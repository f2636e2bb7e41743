"""Runs in a fresh process with KERAS_BACKEND=jax and host devices (XLA_FLAGS), started by
tests/runtime/test_model_parallel.py: one training step of a B/16-shaped tiny ViT (the same
blocks, small widths, every weight randomised; or, with "hybrid" first, a tiny hybrid whose
ResNet stem has output widths that a model axis of 2 divides and widths it does not) on one
device and under `keras_vit.runtime.model_parallel.vit_model_parallel` on each batch x model
mesh named on the command line ("1x2": the model axis alone, "2x2": with the FSDP split);
prints one "RESULT {json}" line with the losses, the largest weight difference to one device,
and each variable's sharding and per-device shape."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

TINY_B16 = dict(
    image_size=32, patch_size=16, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=1,
    num_classes=5,
)  # fmt: skip

TINY_HYBRID = dict(
    image_size=16, resnet_stages=(1,), resnet_width=3, resnet_groups=3, patch_size=1,
    hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=1, num_classes=5,
)  # fmt: skip
MODELS = {"vit": TINY_B16, "hybrid": TINY_HYBRID}

# TINY_HYBRID's stem kernels (kh, kw, in, out) on a model axis of 2, written out from their
# output widths (the root and the unit's conv1/conv2: 3; its conv3/conv_proj: 12): sharded by
# output channel where 2 divides it, else replicated (None)
HYBRID_STEM_ON_2 = {
    "conv_root/kernel": None,
    "block1_unit1/conv1/kernel": None,
    "block1_unit1/conv2/kernel": None,
    "block1_unit1/conv3/kernel": (None, None, None, "model"),
    "block1_unit1/conv_proj/kernel": (None, None, None, "model"),
}

# variable path suffix -> the mesh axis of each dimension, written out from the Megatron split
# (heads and MLP units over `model`) and the FSDP split (hidden_dim over `batch`)
SHARDED = {
    "embedding/conv/kernel": (None, None, None, "model"),
    "embedding/conv/bias": ("model",),
    "query/kernel": ("batch", "model", None),
    "key/kernel": ("batch", "model", None),
    "value/kernel": ("batch", "model", None),
    "query/bias": ("model", None),
    "key/bias": ("model", None),
    "value/bias": ("model", None),
    "out/kernel": ("model", None, "batch"),
    "Dense_0/kernel": ("batch", "model"),
    "Dense_0/bias": ("model",),
    "Dense_1/kernel": ("model", "batch"),
}


def expected_axes(path, stem=None):
    """The axes `SHARDED` (or `stem`, a hybrid's stem kernels by path) gives `path` (None:
    replicated); attention and MLP kernels only inside an attention or MLP layer."""
    if stem and path in stem:
        return stem[path]
    for suffix, axes in SHARDED.items():
        inside = "embedding/" in suffix or "MultiHead" in path or "MlpBlock" in path
        if path.endswith(suffix) and inside:
            return axes
    return None


def check_layout(path, layout, batch, model, stem=None):
    """`layout` (the helper's record of a variable) is the one `SHARDED` (and `stem`) gives
    `path`, over every device of the mesh, each device holding its share."""
    axes = expected_axes(path, stem) or (None,) * len(layout["shape"])
    assert layout["devices"] == batch * model, path
    assert layout["spec"] == list(axes), path
    sizes = {"batch": batch, "model": model, None: 1}
    share = [size // sizes[axis] for size, axis in zip(layout["shape"], axes, strict=True)]
    assert layout["device_shapes"] == [share], path


def check_step(result, mesh_name, batch, model, stem=None):
    """The sharded step equals one device within 1e-5, and every variable and its momentum
    slot lives where `SHARDED` (and for a hybrid `stem`, its stem kernels by path) says."""
    sharded = result[mesh_name]
    assert sharded["name"] == f"ModelParallel (batch {batch} x model {model})"
    assert sharded["replicas"] == batch
    assert sharded["loss"] == pytest.approx(result["single_loss"], abs=1e-5)
    assert 0 <= sharded["weight_difference"] < 1e-5
    slots = sharded["slots"]
    for path, layout in sharded["layouts"].items():
        check_layout(path, layout, batch, model, stem)
        (slot,) = [s for s in slots if s.endswith("/" + path.replace("/", "_") + "_momentum")]
        check_layout(path, slots[slot], batch, model, stem)
    specs = [layout["spec"] for layout in sharded["layouts"].values()]
    stem_sharded = sum(axes is not None for axes in (stem or {}).values())
    assert set(stem or ()) <= set(sharded["layouts"])
    # the embedding, the block (q/k/v kernels and biases, out, the MLP's), the stem's share
    assert sum(spec != [None] * len(spec) for spec in specs) == 2 + 10 + stem_sharded


def one_step(distribution, kind="vit") -> dict:
    """One SGD-with-momentum step of the tiny model `kind` ("vit" or "hybrid") under
    `distribution` (None: one device): its loss, the weights after it, and every variable's
    layout."""
    import keras

    import keras_vit

    keras.distribution.set_distribution(distribution)
    keras.utils.set_random_seed(0)
    build = keras_vit.HybridViT if kind == "hybrid" else keras_vit.ViT
    model = build(**MODELS[kind])
    rng = np.random.default_rng(1)  # the head starts at zero: randomise every weight
    model.set_weights([rng.normal(0, 0.3, w.shape).astype("float32") for w in model.weights])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(keras.optimizers.SGD(0.5, momentum=0.9), loss)
    data = np.random.default_rng(2)
    size = MODELS[kind]["image_size"]
    x = data.uniform(-1, 1, (4, size, size, 3)).astype("float32")
    y = data.integers(0, 5, 4)
    value = float(model.train_on_batch(x, y))
    keras.distribution.set_distribution(None)
    return {
        "loss": value,
        "weights": [np.asarray(w) for w in model.get_weights()],
        "layouts": {v.path: layout(v) for v in model.weights},
        "slots": {v.path: layout(v) for v in model.optimizer.variables},
    }


def layout(variable) -> dict:
    """The variable's partition spec (None: one device) and the shape on each device."""
    value = variable.value
    spec = getattr(value.sharding, "spec", None)
    return {
        "spec": None if spec is None else [axis for axis in spec],
        "shape": list(variable.shape),
        "device_shapes": sorted({tuple(shard.data.shape) for shard in value.addressable_shards}),
        "devices": len(value.sharding.device_set),
    }


def cli_run() -> tuple[int, str, dict]:
    """(exit code, stderr, config.json's "resolved" strategy and replicas) of one epoch of
    `keras-vit train --strategy model_parallel` with the recipe's tiny model."""
    import contextlib
    import io
    import os
    import tempfile

    from keras_vit.cli.main import main as keras_vit_main

    run = os.path.join(tempfile.mkdtemp(), "run")
    argv = ["train", "--model", "tiny", "--stem", "patch", "--dataset", "digits"]
    argv += ["--shots-per-class", "10", "--epochs", "1", "--strategy", "model_parallel"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = keras_vit_main([*argv, "--run-dir", run, "--quiet"])
    resolved = {}
    if code == 0:
        with open(os.path.join(run, "config.json")) as file:
            resolved = json.load(file)["resolved"]
    record = {key: resolved.get(key) for key in ("strategy", "num_replicas")}
    return int(code or 0), err.getvalue(), record


def main(meshes, kind="vit") -> dict:
    """`meshes`: "BxM" strings, a batch x model mesh each, compared with one device; "cli"
    adds `cli_run`. `kind`: the tiny model, "vit" (TINY_B16) or "hybrid" (TINY_HYBRID)."""
    import keras

    from keras_vit.runtime import distribute, model_parallel

    devices = keras.distribution.list_devices()
    single = one_step(None, kind)
    out = {"devices": len(devices), "single_loss": single["loss"]}
    for mesh in meshes:
        if mesh == "cli":
            out["cli"] = cli_run()
            continue
        batch, model = (int(size) for size in mesh.split("x"))
        distribution = model_parallel.vit_model_parallel(
            MODELS[kind], devices=devices[: batch * model], model_axis=model
        )
        keras.distribution.set_distribution(distribution)
        sharded = {"replicas": distribute.num_replicas(None)}
        sharded["name"] = distribute.strategy_name(None)
        step = one_step(distribution, kind)
        sharded["loss"] = step["loss"]
        pairs = zip(single["weights"], step["weights"], strict=True)
        sharded["weight_difference"] = max(float(np.max(np.abs(a - b))) for a, b in pairs)
        sharded["layouts"], sharded["slots"] = step["layouts"], step["slots"]
        out[mesh] = sharded
    return out


if __name__ == "__main__":  # [hybrid] MESH...: the tiny hybrid with "hybrid" first
    arguments = sys.argv[1:]
    kind = arguments.pop(0) if arguments[:1] == ["hybrid"] else "vit"
    print("RESULT " + json.dumps(main(arguments, kind)))
