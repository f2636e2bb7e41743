"""keras_vit.from_checkpoint: the architecture, numerics and preprocessing read from the file."""

from __future__ import annotations

import json

import numpy as np
from safetensors.numpy import save_file

import keras_vit
from keras_vit.checkpoints.base.npz_io import write_npz
from keras_vit.checkpoints.keras_files.model_io import model_input_preprocessing
from tests.checkpoints.random_models import TINY_SIZES, randomise
from tests.checkpoints.torch_state import timm_state
from tests.model.test_hybrid import official_hybrid_shapes
from tests.numpy_reference import hybrid_forward, tiny_official_params, vit_forward

_params = tiny_official_params


def _images(size=32):
    return np.random.default_rng(1).uniform(-1, 1, (2, size, size, 3)).astype("float32")


def test_release_npz_builds_its_architecture_with_release_numerics(tmp_path):
    params = _params(representation_size=16, pooling="gap")
    write_npz(tmp_path / "a.npz", params)
    model = keras_vit.from_checkpoint(tmp_path / "a.npz")
    block = model.get_layer("encoderblock_1")
    assert (block.num_heads, block.gelu_approximate, block.layer_norm_epsilon) == (4, True, 1e-6)
    assert model.get_layer("pre_logits").units == 16
    assert model_input_preprocessing(model) == "[-1,1]"
    x = _images()
    expected = vit_forward(params, x, num_heads=4, pooling="gap")
    assert np.abs(expected).max() > 1e-2
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-4, rtol=0)


def test_num_classes_gives_a_zero_head_for_fine_tuning(tmp_path):
    write_npz(tmp_path / "a.npz", _params(representation_size=16))
    model = keras_vit.from_checkpoint(tmp_path / "a.npz", num_classes=5)
    assert model.output_shape == (None, 5)
    assert "pre_logits" not in [layer.name for layer in model.layers]
    assert not np.any(model.get_layer("head").kernel.numpy())


def test_timm_config_mean_std_is_recorded(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file(timm_state(np.random.default_rng(0)), str(path))
    config = {"model_args": {"num_heads": 4}, "pretrained_cfg": {"mean": [0.485, 0.456, 0.406]}}
    config["pretrained_cfg"]["std"] = [0.229, 0.224, 0.225]
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = keras_vit.from_checkpoint(path)
    assert model_input_preprocessing(model) == "imagenet"
    assert model.get_layer("encoderblock_0").gelu_approximate is False


def test_a_hybrid_file_builds_its_hybrid(tmp_path):
    """An R50-style hybrid from the release's key names (no keras_vit code): the ResNet's
    stages and width, the patch on the feature map and the image size (grid x patch x the
    ResNet's stride of 8 for two stages) come from the file; logits match NumPy."""
    shapes = official_hybrid_shapes(
        (1, 1), hidden=32, mlp=64, heads=4, layers=2, patch=1, tokens=17, classes=10
    )
    rng = np.random.default_rng(9)
    params = {
        key: (rng.normal(0.0, 0.3, shape) + key.endswith("/scale")).astype(np.float32)
        for key, shape in shapes.items()
    }
    write_npz(tmp_path / "hybrid.npz", params)
    model = keras_vit.from_checkpoint(tmp_path / "hybrid.npz")
    assert model.input_shape == (None, 32, 32, 3)
    assert model.get_layer("conv_root").filters == 64
    assert {"block1_unit1", "block2_unit1"} <= {layer.name for layer in model.layers}
    x = _images()
    expected = hybrid_forward(params, x, num_heads=4)
    assert np.abs(expected).max() > 1e-2
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-4, rtol=0)


def _run_hybrid(tmp_path, groups=8):
    """A tiny randomised hybrid with `groups` GroupNorm groups saved as a run's best.npz, its
    config.json beside it as a run writes it (`resolved.model_kwargs`)."""
    kwargs = dict(
        TINY_SIZES,
        num_layers=1,
        resnet_stages=[1],
        resnet_width=32,
        resnet_groups=groups,
        image_size=32,
        patch_size=1,
        num_classes=3,
    )
    model = randomise(keras_vit.HybridViT(**kwargs), seed=2)
    run = tmp_path / "run"
    run.mkdir()
    keras_vit.save_npz(model, run / "best.npz")
    config = {"resolved": {"model_kwargs": kwargs}}
    (run / "config.json").write_text(json.dumps(config))
    return model, run, config


def test_a_runs_hybrid_npz_takes_its_groupnorm_groups_from_the_run(tmp_path):
    """The .npz records no GroupNorm groups: from a run folder the file is read with the
    run's 8, elsewhere with the release's 32 (another model: its outputs differ)."""
    model, run, _ = _run_hybrid(tmp_path)
    x = _images()
    expected = np.asarray(model(x))
    assert np.abs(expected).max() > 1e-2
    loaded = keras_vit.from_checkpoint(run / "best.npz")
    assert loaded.get_layer("gn_root").groups == 8
    np.testing.assert_allclose(np.asarray(loaded(x)), expected, atol=1e-4, rtol=0)
    alone = tmp_path / "alone.npz"
    alone.write_bytes((run / "best.npz").read_bytes())
    elsewhere = keras_vit.from_checkpoint(alone)
    assert elsewhere.get_layer("gn_root").groups == 32
    assert np.abs(np.asarray(elsewhere(x)) - expected).max() > 1e-3
    # A link to the run's file, from another folder, is the run's file.
    link = tmp_path / "link.npz"
    link.symlink_to(run / "best.npz")
    assert keras_vit.from_checkpoint(link).get_layer("gn_root").groups == 8
    # The caller's resnet_groups wins over the run's.
    assert (
        keras_vit.from_checkpoint(run / "best.npz", resnet_groups=4).get_layer("gn_root").groups
        == 4
    )


def test_a_run_config_of_another_resnet_is_not_used(tmp_path):
    _, run, config = _run_hybrid(tmp_path)
    for change in (
        {"resnet_width": 64},
        {"resnet_stages": [2]},
        {"resnet_groups": True},
        {"resnet_groups": 0},
        {"resnet_groups": "8"},
        {"resnet_groups": 5},  # does not divide the width 32
    ):
        kwargs = {**config["resolved"]["model_kwargs"], **change}
        (run / "config.json").write_text(json.dumps({"resolved": {"model_kwargs": kwargs}}))
        assert keras_vit.from_checkpoint(run / "best.npz").get_layer("gn_root").groups == 32
    (run / "config.json").write_text("{not json")
    assert keras_vit.from_checkpoint(run / "best.npz").get_layer("gn_root").groups == 32
