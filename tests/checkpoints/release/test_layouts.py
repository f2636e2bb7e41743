"""Real-file layouts: `opt/target/`, big_vision `params/` (plain and scanned), GroupNorm
(1, 1, 1, C). Each file is derived in the test from plain official arrays, and the loaded
model must match the NumPy reference on the plain arrays."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints import load_weights, save_npz
from tests.numpy_reference import random_official_params, vit_forward

ARCH = dict(patch_size=8, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2)
BV_NAMES = {  # release sub-layer name -> big_vision's (numbered from 0 per type)
    "LayerNorm_0": "LayerNorm_0",
    "MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0",
    "LayerNorm_2": "LayerNorm_1",
    "MlpBlock_3": "MlpBlock_0",
}


def _plain(pooling="token", seed=0):
    rng = np.random.default_rng(seed)
    params = random_official_params(
        rng, image_size=32, channels=3, num_classes=10, pooling=pooling, **ARCH
    )
    if pooling == "token":
        # big_vision adds the table before the class token: equivalent to a zero class row
        params["Transformer/posembed_input/pos_embedding"][:, 0] = 0.0
    return params


def _big_vision(params, scanned=False):
    out = {}
    blocks = {}
    for key, value in params.items():
        if key == "Transformer/posembed_input/pos_embedding":
            has_cls = "cls" in params
            out["params/pos_embedding"] = value[:, 1:] if has_cls else value
        elif key.startswith("Transformer/encoderblock_"):
            block, sub, rest = key[len("Transformer/") :].split("/", 2)
            index = int(block.split("_")[1])
            name = f"{BV_NAMES[sub]}/{rest}"
            if scanned:
                blocks.setdefault(name, {})[index] = value
            else:
                out[f"params/Transformer/{block}/{name}"] = value
        else:
            out["params/" + key] = value
    for name, per_layer in blocks.items():
        stacked = np.stack([per_layer[i] for i in sorted(per_layer)])
        out[f"params/Transformer/encoderblock/{name}"] = stacked
    return out


def _check(tmp_path, arrays, reference, pooling="token"):
    path = tmp_path / "file.npz"
    np.savez(path, **arrays)
    model = keras_vit.ViT(image_size=32, num_classes=10, pooling=pooling, **ARCH)
    report = load_weights(model, path)
    x = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    expected = vit_forward(reference, x, num_heads=4, pooling=pooling)
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-4)
    return report


def test_opt_target_prefix(tmp_path, caplog):
    params = _plain()
    with caplog.at_level(logging.INFO, logger="keras_vit"):
        report = _check(tmp_path, {"opt/target/" + k: v for k, v in params.items()}, params)
    assert report.layout_steps == ["stripped the prefix 'opt/target/' from 40 keys"]
    assert any("opt/target/" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("pooling", ["token", "gap"])
def test_big_vision_params_layout(tmp_path, pooling):
    params = _plain(pooling)
    report = _check(tmp_path, _big_vision(params), params, pooling)
    assert any("big_vision" in step for step in report.layout_steps)
    assert any("pos_embedding" in step for step in report.layout_steps)


def test_big_vision_scanned_layout(tmp_path):
    params = _plain(seed=2)
    arrays = _big_vision(params, scanned=True)
    assert arrays["params/Transformer/encoderblock/LayerNorm_0/scale"].shape == (2, 32)
    report = _check(tmp_path, arrays, params)
    assert any("unstacked" in step for step in report.layout_steps)


def test_group_norm_arrays_stored_as_1_1_1_c(tmp_path):
    """Old hybrid files store GroupNorm scale/bias as (1, 1, 1, C): they load as (C,)."""
    kwargs = dict(image_size=32, resnet_stages=(1,), num_classes=10, **ARCH)
    kwargs["patch_size"] = 1
    source = keras_vit.HybridViT(**kwargs)
    rng = np.random.default_rng(9)
    for variable in source.weights:
        variable.assign(rng.standard_normal(variable.shape).astype("float32") * 0.1)
    save_npz(source, tmp_path / "plain.npz")
    with np.load(tmp_path / "plain.npz", allow_pickle=False) as saved:
        arrays = {k: saved[k] for k in saved.files}
    gn_keys = [k for k in arrays if "/gn" in k or k.startswith("gn_root")]
    assert "block1/unit1/gn_proj/scale" in gn_keys and "gn_root/bias" in gn_keys
    old_style = {
        "opt/target/" + k: (v.reshape(1, 1, 1, -1) if k in gn_keys else v)
        for k, v in arrays.items()
    }
    np.savez(tmp_path / "old.npz", **old_style)
    target = keras_vit.HybridViT(**kwargs)
    report = load_weights(target, tmp_path / "old.npz")
    assert any("GroupNorm" in step for step in report.layout_steps)
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(source.predict(x, verbose=0), target.predict(x, verbose=0))
