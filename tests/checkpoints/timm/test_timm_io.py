"""timm `.safetensors` state dicts against a NumPy port of timm's forward pass
(tests/checkpoints/torch_state.py: fused qkv, x @ W.T + b), and the round trips between
formats."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage
from safetensors.numpy import save_file

import keras_vit
from keras_vit.checkpoints import CheckpointError, read_checkpoint, write_checkpoint
from keras_vit.checkpoints.base.npz_io import write_npz
from keras_vit.checkpoints.base.safetensors_io import read_safetensors
from tests.checkpoints.torch_state import TINY, timm_forward, timm_state
from tests.model.test_hybrid import official_hybrid_shapes
from tests.numpy_reference import tiny_official_params


def _images(seed=1, size=32):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


def _write(tmp_path, state, name="model.safetensors"):
    path = tmp_path / name
    save_file(state, str(path))
    return path


@pytest.mark.parametrize(
    "variant",
    [
        dict(class_token=True, head="head"),
        dict(class_token=False, head="head"),
        dict(class_token=True, head="head.fc"),
        dict(class_token=True, pre_logits=True, head="head"),
        dict(class_token=False, fc_norm=True, head="head"),
        dict(class_token=True, fc_norm=True, head="head"),
    ],
    ids=["token", "gap", "head.fc", "pre_logits", "gap-fc_norm", "token-fc_norm"],
)
def test_logits_match_numpy_timm_forward(tmp_path, variant):
    state = timm_state(np.random.default_rng(0), **variant)
    path = _write(tmp_path, state)
    contents = read_checkpoint(path, num_heads=TINY["heads"])
    assert contents.format == "timm" and contents.gelu_approximate is False
    model = keras_vit.from_checkpoint(path, num_heads=TINY["heads"])
    assert model.get_layer("pool").pooling == ("token" if variant["class_token"] else "gap")
    pooled = variant.get("fc_norm", False)
    assert {"fc_norm", "encoder_norm"} & {layer.name for layer in model.layers} == {
        "fc_norm" if pooled else "encoder_norm"
    }
    x = _images()
    got = model.predict(x, verbose=0)
    expected = timm_forward(state, x, num_heads=TINY["heads"])
    assert np.abs(expected).max() > 1e-2
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)


def test_larger_resolution_resizes_the_table(tmp_path):
    state = timm_state(np.random.default_rng(0))
    path = _write(tmp_path, state)
    model = keras_vit.from_checkpoint(path, image_size=48, num_heads=TINY["heads"])
    assert model.get_layer("posembed_input").pos_embedding.shape == (1, 1 + 36, 32)
    grid = state["pos_embed"][0, 1:].reshape(4, 4, 32)
    zoomed = scipy.ndimage.zoom(grid, (6 / 4, 6 / 4, 1), order=1).reshape(1, 36, 32)
    resized = dict(state, pos_embed=np.concatenate([state["pos_embed"][:, :1], zoomed], axis=1))
    x = _images(size=48)
    expected = timm_forward(resized, x, num_heads=TINY["heads"])
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-4, rtol=0)


def test_heads_come_from_a_timm_config_beside_the_file(tmp_path):
    path = _write(tmp_path, timm_state(np.random.default_rng(0)))
    (tmp_path / "config.json").write_text(
        '{"architecture": "vit_tiny", "model_args": {"num_heads": 2}}'
    )
    assert read_checkpoint(path).num_heads == 2


def test_unsupported_timm_features_are_named(tmp_path):
    state = timm_state(np.random.default_rng(0), class_token=False)
    state["blocks.0.attn.q_norm.weight"] = np.ones(8, np.float32)
    with pytest.raises(CheckpointError, match="q/k normalisation"):
        read_checkpoint(_write(tmp_path, state), num_heads=TINY["heads"])


def test_fc_norm_survives_keras_and_timm_round_trips_bit_exact(tmp_path):
    state = timm_state(np.random.default_rng(0), class_token=False, fc_norm=True)
    model = keras_vit.from_checkpoint(_write(tmp_path, state), num_heads=TINY["heads"])
    model.save(tmp_path / "m.keras")
    write_checkpoint(read_checkpoint(tmp_path / "m.keras"), tmp_path / "back.safetensors", "timm")
    back, _ = read_safetensors(tmp_path / "back.safetensors")
    assert sorted(back) == sorted(state)  # fc_norm.*, no norm.*
    for key, value in state.items():
        assert np.array_equal(back[key], value), key
    with pytest.raises(CheckpointError, match="fc_norm"):
        write_checkpoint(read_checkpoint(tmp_path / "m.keras"), tmp_path / "hf", "hf")
    assert not (tmp_path / "hf").exists()


def test_round_trip_npz_hf_timm_npz_is_bit_exact(tmp_path):
    params = tiny_official_params()
    write_npz(tmp_path / "a.npz", params)
    write_checkpoint(read_checkpoint(tmp_path / "a.npz"), tmp_path / "hf", "hf")
    write_checkpoint(read_checkpoint(tmp_path / "hf"), tmp_path / "t.safetensors", "timm")
    timm = read_checkpoint(tmp_path / "t.safetensors")
    assert timm.gelu_approximate is True  # the release's numerics travel in the metadata
    write_checkpoint(timm, tmp_path / "b.npz", "npz")
    with np.load(tmp_path / "b.npz", allow_pickle=False) as back:
        assert sorted(back.files) == sorted(params)
        for key, value in params.items():
            assert back[key].dtype == value.dtype
            assert np.array_equal(back[key], value), key


def test_weights_argument_takes_a_timm_file(tmp_path, tiny_vit_kwargs):
    state = timm_state(np.random.default_rng(0))
    path = _write(tmp_path, state, name="renamed.bin.npz")
    model = keras_vit.ViT(**tiny_vit_kwargs, gelu_approximate=False, weights=str(path))
    x = _images()
    expected = timm_forward(state, x, num_heads=TINY["heads"])
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-4, rtol=0)


def test_timm_hybrid_keys_round_trip_bit_exact(tmp_path):
    """A hybrid built from the release's key names (no keras_vit code) -> timm -> npz."""
    shapes = official_hybrid_shapes(
        (1, 1), hidden=32, mlp=64, heads=4, layers=1, patch=1, tokens=17, classes=10
    )
    rng = np.random.default_rng(5)
    params = {key: rng.normal(0, 0.3, shape).astype(np.float32) for key, shape in shapes.items()}
    write_npz(tmp_path / "hybrid.npz", params)
    write_checkpoint(read_checkpoint(tmp_path / "hybrid.npz"), tmp_path / "h.safetensors", "timm")
    state, _ = read_safetensors(tmp_path / "h.safetensors")
    # timm's names (vision_transformer_hybrid.py over resnetv2.py, preact=False)
    backbone = "patch_embed.backbone."
    assert state[backbone + "stem.conv.weight"].shape == (64, 3, 7, 7)
    assert state[backbone + "stem.norm.weight"].shape == (64,)
    assert state[backbone + "stages.1.blocks.0.downsample.conv.weight"].shape == (512, 256, 1, 1)
    assert state[backbone + "stages.0.blocks.0.norm3.bias"].shape == (256,)
    assert state["patch_embed.proj.weight"].shape == (32, 512, 1, 1)
    write_checkpoint(read_checkpoint(tmp_path / "h.safetensors"), tmp_path / "back.npz", "npz")
    with np.load(tmp_path / "back.npz", allow_pickle=False) as back:
        assert sorted(back.files) == sorted(params)
        for key, value in params.items():
            assert np.array_equal(back[key].reshape(value.shape), value), key
