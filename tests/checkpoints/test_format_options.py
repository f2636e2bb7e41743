"""Each format option is read from what the file and its config say, or refused by name:
the class token / no_embed_class, global_pool, non-square grids, 1/3/4-channel
mean/std, and the patch kernel's input channels (timm's `adapt_input_conv` rule)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from safetensors.numpy import save_file

import keras_vit
from keras_vit._warnings import WeightsWarning
from keras_vit.checkpoints import CheckpointError, model_contents, save_npz, write_checkpoint
from keras_vit.checkpoints.base.architecture import Architecture
from keras_vit.checkpoints.loading import load_weights
from tests.checkpoints.random_models import images_for, logits, tiny_vit
from tests.checkpoints.torch_state import TINY, timm_forward, timm_state


@pytest.mark.parametrize("grid", [(3, 5), (14, 16)], ids=["3x5", "14x16"])
def test_timm_non_square_class_token_model_reads_back_the_same(tmp_path, grid):
    """Old rule: 16 (= 1 + 15) and 225 (= 1 + 224) rows are perfect squares, read as
    no_embed_class: the class row became a patch row."""
    model = tiny_vit(grid=grid, patch=8 if grid == (3, 5) else 2)
    path = tmp_path / "m.safetensors"
    write_checkpoint(model_contents(model), path, "timm")
    back = keras_vit.from_checkpoint(path)
    x = images_for(model)
    np.testing.assert_allclose(logits(back, x), logits(model, x), atol=1e-5, rtol=0)


def _timm_file(tmp_path, state, config=None):
    path = tmp_path / "model.safetensors"
    save_file(state, str(path))
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
    return path


def _no_embed_class_state(rng, grid):
    cfg = dict(TINY, image_size=grid[0] * TINY["patch"])
    state = timm_state(rng, cfg=cfg)
    rows = grid[0] * grid[1]
    state["pos_embed"] = rng.normal(0, 0.2, (1, rows, TINY["hidden"])).astype(np.float32)
    return state


def test_timm_no_embed_class_non_square_file_follows_its_config(tmp_path):
    """A DeiT-3 style file (class token without a position row), grid 3x5, told by its
    config; the reference adds a zero class row (the class token gets no position)."""
    state = _no_embed_class_state(np.random.default_rng(0), (3, 5))
    config = {
        "architecture": "deit3_tiny",
        "model_args": {"num_heads": 4, "no_embed_class": True},
        "pretrained_cfg": {"input_size": [3, 24, 40], "mean": [0.5] * 3, "std": [0.5] * 3},
    }
    model = keras_vit.from_checkpoint(_timm_file(tmp_path, state, config))
    assert model.input_shape == (None, 24, 40, 3)
    zero = np.zeros((1, 1, TINY["hidden"]), np.float32)
    reference = dict(state, pos_embed=np.concatenate([zero, state["pos_embed"]], axis=1))
    x = np.random.default_rng(1).uniform(-1, 1, (2, 24, 40, 3)).astype("float32")
    expected = timm_forward(reference, x, num_heads=4)
    np.testing.assert_allclose(logits(model, x), expected, atol=1e-4, rtol=0)


def test_timm_input_size_in_config_settles_no_embed_class(tmp_path):
    state = _no_embed_class_state(np.random.default_rng(0), (4, 4))
    config = {"model_args": {"num_heads": 4}, "pretrained_cfg": {"input_size": [3, 32, 32]}}
    model = keras_vit.from_checkpoint(_timm_file(tmp_path, state, config))
    table = model.get_layer("posembed_input").pos_embedding.numpy()
    assert table.shape == (1, 16, 32) and Architecture.from_model(model).no_embed_class


def test_timm_class_token_with_a_square_row_count_alone_is_ambiguous(tmp_path):
    state = _no_embed_class_state(np.random.default_rng(0), (4, 4))  # 16 rows + cls_token
    path = _timm_file(tmp_path, state)
    with pytest.raises(CheckpointError, match="no_embed_class") as error:
        keras_vit.from_checkpoint(path, num_heads=4)
    assert "no_embed_class=True" in str(error.value) and "no_embed_class=False" in str(error.value)
    model = keras_vit.from_checkpoint(path, num_heads=4, no_embed_class=True)
    assert Architecture.from_model(model).no_embed_class


def test_timm_loading_into_a_model_settles_no_embed_class_by_its_grid(tmp_path):
    """A no_embed_class file loaded into a model whose table has a class row: the class row
    is zero (the class token gets no position), so both compute the same."""
    state = _no_embed_class_state(np.random.default_rng(0), (4, 4))
    model = keras_vit.ViT(**dict(TINY_KW, gelu_approximate=False))
    load_weights(model, _timm_file(tmp_path, state))
    assert not np.any(model.get_layer("posembed_input").pos_embedding.numpy()[0, 0])


TINY_KW = dict(
    image_size=32,
    patch_size=8,
    hidden_dim=32,
    num_heads=4,
    mlp_dim=64,
    num_layers=2,
    num_classes=10,
)


@pytest.mark.parametrize("where", ["top", "model_args"])
def test_timm_global_pool_avg_with_a_class_token_is_refused(tmp_path, where):
    """MAE fine-tuned weights: class token, average pooling over the patch tokens; keras_vit
    has no such pooling, so the file is refused by the option's name (it was read as token
    pooling)."""
    state = timm_state(np.random.default_rng(0), fc_norm=True)
    config = {"model_args": {"num_heads": 4}}
    if where == "top":
        config["global_pool"] = "avg"
    else:
        config["model_args"]["global_pool"] = "avg"
    with pytest.raises(CheckpointError, match="global_pool='avg'"):
        keras_vit.from_checkpoint(_timm_file(tmp_path, state, config))


def test_timm_global_pool_token_without_a_class_token_is_refused(tmp_path):
    state = timm_state(np.random.default_rng(0), class_token=False)
    config = {"global_pool": "token", "model_args": {"num_heads": 4}}
    with pytest.raises(CheckpointError, match="global_pool='token'.*cls_token"):
        keras_vit.from_checkpoint(_timm_file(tmp_path, state, config))


def test_release_npz_of_a_non_square_grid_reads_with_image_size(tmp_path):
    model = tiny_vit(grid=(3, 5))
    save_npz(model, tmp_path / "m.npz")
    back = keras_vit.from_checkpoint(tmp_path / "m.npz", image_size=(24, 40))
    x = images_for(model)
    np.testing.assert_allclose(logits(back, x), logits(model, x), atol=1e-5, rtol=0)
    with pytest.raises(CheckpointError, match=r"3x5.*image_size="):
        keras_vit.from_checkpoint(tmp_path / "m.npz")


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_hf_folder_mean_std_has_one_value_per_channel(tmp_path, channels):
    model = tiny_vit(channels=channels)
    write_checkpoint(model_contents(model), tmp_path / "hf", "hf")
    processor = json.loads((tmp_path / "hf" / "preprocessor_config.json").read_text())
    assert processor["image_mean"] == [0.5] * channels
    assert processor["image_std"] == [0.5] * channels
    back = keras_vit.from_checkpoint(tmp_path / "hf")
    x = images_for(model)
    np.testing.assert_allclose(logits(back, x), logits(model, x), atol=1e-5, rtol=0)


def test_hf_folder_with_mean_std_of_another_length_than_its_channels_is_refused(tmp_path):
    model = tiny_vit(channels=1)
    write_checkpoint(model_contents(model), tmp_path / "hf", "hf")
    path = tmp_path / "hf" / "preprocessor_config.json"
    processor = json.loads(path.read_text())
    path.write_text(json.dumps(dict(processor, image_mean=[0.5] * 3, image_std=[0.5] * 3)))
    with pytest.raises(CheckpointError, match="3 values.*1 channel"):
        keras_vit.from_checkpoint(tmp_path / "hf")


@pytest.mark.parametrize(
    "edit", [{"image_std": None}, {"image_mean": "half"}, {"image_std": [[0.5]]}]
)
def test_hf_folder_with_a_malformed_mean_or_std_is_refused_by_name(tmp_path, edit):
    model = tiny_vit(channels=1)
    write_checkpoint(model_contents(model), tmp_path / "hf", "hf")
    path = tmp_path / "hf" / "preprocessor_config.json"
    processor = {k: v for k, v in json.loads(path.read_text()).items() if k != "image_std"}
    path.write_text(json.dumps({**processor, **edit}))
    name = "std" if "image_std" in edit else "mean"
    rule = f"preprocessor_config.json: Input normalisation image_{name}=.*not a number"
    with pytest.raises(CheckpointError, match=rule):
        keras_vit.from_checkpoint(tmp_path / "hf")


# --- channel adaptation (timm's adapt_input_conv) ---------------------------------------


def _rgb_file(tmp_path, kind):
    source = tiny_vit(seed=3, gelu_approximate=False)
    path = tmp_path / {"npz": "rgb.npz", "timm": "rgb.safetensors", "hf": "rgb_hf"}[kind]
    write_checkpoint(model_contents(source), path, kind)
    return source, path


@pytest.mark.parametrize("kind", ["npz", "timm", "hf"])
def test_rgb_weights_into_a_gray_model_sum_the_kernel(tmp_path, kind):
    """3 -> 1: the kernel's RGB slices are summed, so a gray image g gives the RGB model's
    logits on (g, g, g)."""
    source, path = _rgb_file(tmp_path, kind)
    gray = tiny_vit(channels=1, seed=9, gelu_approximate=False)
    with pytest.warns(WeightsWarning, match=r"3 input channels.*1"):
        load_weights(gray, path, strict=False)
    x = images_for(gray)
    expected = logits(source, np.repeat(x, 3, axis=-1))
    np.testing.assert_allclose(logits(gray, x), expected, atol=1e-5, rtol=0)


def test_rgb_weights_into_a_four_channel_model_repeat_the_kernel_scaled(tmp_path):
    source, path = _rgb_file(tmp_path, "npz")
    model = tiny_vit(channels=4, seed=9, gelu_approximate=False)
    with pytest.warns(WeightsWarning, match=r"3 input channels.*4"):
        load_weights(model, path, strict=False)
    kernel = source.get_layer("embedding").conv.kernel.numpy()
    expected = np.concatenate([kernel, kernel[:, :, :1]], axis=2) * (3 / 4)
    got = model.get_layer("embedding").conv.kernel.numpy()
    np.testing.assert_allclose(got, expected, atol=1e-7, rtol=0)


def test_strict_loading_refuses_other_channels_by_name(tmp_path):
    _, path = _rgb_file(tmp_path, "npz")
    gray = tiny_vit(channels=1, seed=9)
    before = gray.get_layer("embedding").conv.kernel.numpy()
    with pytest.raises(CheckpointError, match="channels"):
        load_weights(gray, path)
    assert np.array_equal(gray.get_layer("embedding").conv.kernel.numpy(), before)


def test_from_checkpoint_with_other_channels_adapts_with_a_warning(tmp_path):
    source, path = _rgb_file(tmp_path, "timm")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gray = keras_vit.from_checkpoint(path, channels=1)
    assert any("3 input channels" in str(w.message) for w in caught)
    x = images_for(gray)
    expected = logits(source, np.repeat(x, 3, axis=-1))
    np.testing.assert_allclose(logits(gray, x), expected, atol=1e-5, rtol=0)


def test_big_vision_files_are_their_own_row_of_the_table(tmp_path):
    from keras_vit.checkpoints import detect_format, read_checkpoint
    from keras_vit.checkpoints.base.npz_io import write_npz

    arrays = model_contents(tiny_vit()).arrays
    write_npz(tmp_path / "bv.npz", {"params/" + key: value for key, value in arrays.items()})
    write_npz(tmp_path / "release.npz", arrays)
    assert detect_format(tmp_path / "bv.npz") == "big_vision"
    assert detect_format(tmp_path / "release.npz") == "npz"
    assert read_checkpoint(tmp_path / "bv.npz").format == "big_vision"
    with pytest.raises(ValueError, match="format must be one of"):
        write_checkpoint(read_checkpoint(tmp_path / "bv.npz"), tmp_path / "x.npz", "big_vision")


@pytest.mark.parametrize("kind", ["npz", "hf", "timm"])
def test_input_scaling_is_kept_or_refused_never_dropped(tmp_path, kind):
    """A model that expects ImageNet's mean/std: every format keeps it (keras_vit's .npz in its
    `keras_vit/metadata` member); none reads back as [-1, 1]."""
    model = tiny_vit(input_preprocessing="imagenet")
    path = tmp_path / {"npz": "m.npz", "hf": "hf", "timm": "m.safetensors"}[kind]
    write_checkpoint(model_contents(model), path, kind)
    back = keras_vit.from_checkpoint(path)
    assert back.get_layer("embedding").input_preprocessing == "imagenet"
