"""big_vision image towers (SigLIP-style: `params/img/...`, MAP-head pooling, bfloat16 arrays)
against a NumPy forward pass written on big_vision's own keys (big_vision/models/vit.py)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

import keras_vit
from keras_vit.checkpoints import read_checkpoint
from tests.numpy_reference import gelu, layer_norm, patchify, softmax

D, HEADS, MLP, LAYERS, PATCH, SIZE, OUT = 32, 4, 64, 2, 8, 32, 16


def _bf16(rng, *shape, scale=0.2):
    return (rng.standard_normal(shape) * scale).astype(ml_dtypes.bfloat16)


def _attention_params(rng, prefix):
    hd = D // HEADS
    out = {}
    for name in ("query", "key", "value"):
        out[f"{prefix}/{name}/kernel"] = _bf16(rng, D, HEADS, hd)
        out[f"{prefix}/{name}/bias"] = _bf16(rng, HEADS, hd)
    out[f"{prefix}/out/kernel"] = _bf16(rng, HEADS, hd, D)
    out[f"{prefix}/out/bias"] = _bf16(rng, D)
    return out


def _mlp_params(rng, prefix):
    return {
        f"{prefix}/Dense_0/kernel": _bf16(rng, D, MLP),
        f"{prefix}/Dense_0/bias": _bf16(rng, MLP),
        f"{prefix}/Dense_1/kernel": _bf16(rng, MLP, D),
        f"{prefix}/Dense_1/bias": _bf16(rng, D),
    }


def _norm(rng, prefix):
    return {f"{prefix}/scale": 1 + _bf16(rng, D), f"{prefix}/bias": _bf16(rng, D)}


def siglip_like_params(rng):
    """Random big_vision two-tower params: the image tower under img/, plus txt/, t, b."""
    img = {
        "embedding/kernel": _bf16(rng, PATCH, PATCH, 3, D),
        "embedding/bias": _bf16(rng, D),
        "pos_embedding": _bf16(rng, 1, (SIZE // PATCH) ** 2, D),
        **_norm(rng, "Transformer/encoder_norm"),
        "MAPHead_0/probe": _bf16(rng, 1, 1, D),
        **_attention_params(rng, "MAPHead_0/MultiHeadDotProductAttention_0"),
        **_norm(rng, "MAPHead_0/LayerNorm_0"),
        **_mlp_params(rng, "MAPHead_0/MlpBlock_0"),
        "head/kernel": _bf16(rng, D, OUT),
        "head/bias": _bf16(rng, OUT),
    }
    for i in range(LAYERS):
        block = f"Transformer/encoderblock_{i}"
        img.update(_norm(rng, f"{block}/LayerNorm_0"))
        img.update(_attention_params(rng, f"{block}/MultiHeadDotProductAttention_0"))
        img.update(_norm(rng, f"{block}/LayerNorm_1"))
        img.update(_mlp_params(rng, f"{block}/MlpBlock_0"))
    params = {f"params/img/{k}": v for k, v in img.items()}
    params["params/txt/Embed_0/embedding"] = _bf16(rng, 8, D)
    params["params/t"] = _bf16(rng, 1)
    params["params/b"] = _bf16(rng, 1)
    return params


def _mha(q_in, kv_in, p, prefix):
    hd = D // HEADS
    q = np.einsum("btd,dnh->bnth", q_in, p[prefix + "/query/kernel"])
    q = q + p[prefix + "/query/bias"][None, :, None]
    k = np.einsum("btd,dnh->bnth", kv_in, p[prefix + "/key/kernel"])
    k = k + p[prefix + "/key/bias"][None, :, None]
    v = np.einsum("btd,dnh->bnth", kv_in, p[prefix + "/value/kernel"])
    v = v + p[prefix + "/value/bias"][None, :, None]
    weights = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd))
    context = weights @ v
    return np.einsum("bnth,nhd->btd", context, p[prefix + "/out/kernel"]) + p[prefix + "/out/bias"]


def _mlp(x, p, prefix):
    h = gelu(x @ p[prefix + "/Dense_0/kernel"] + p[prefix + "/Dense_0/bias"], True)
    return h @ p[prefix + "/Dense_1/kernel"] + p[prefix + "/Dense_1/bias"]


def big_vision_forward(params, images):
    """big_vision's `_Model.__call__` with pool_type="map" (no class token), in float64."""
    p = {k[len("params/img/") :]: np.asarray(v, np.float64) for k, v in params.items()}
    p = {k: v for k, v in p.items() if not k.startswith("params/")}

    def ln(x, prefix):
        return layer_norm(x, p[prefix + "/scale"], p[prefix + "/bias"], 1e-6)

    kernel = p["embedding/kernel"]
    x = patchify(np.asarray(images, np.float64), PATCH) @ kernel.reshape(-1, D)
    x = x + p["embedding/bias"] + p["pos_embedding"]
    for i in range(LAYERS):
        block = f"Transformer/encoderblock_{i}"
        y = ln(x, block + "/LayerNorm_0")
        x = x + _mha(y, y, p, block + "/MultiHeadDotProductAttention_0")
        x = x + _mlp(ln(x, block + "/LayerNorm_1"), p, block + "/MlpBlock_0")
    x = ln(x, "Transformer/encoder_norm")
    probe = np.broadcast_to(p["MAPHead_0/probe"], (x.shape[0], 1, D))
    y = _mha(probe, x, p, "MAPHead_0/MultiHeadDotProductAttention_0")
    y = y + _mlp(ln(y, "MAPHead_0/LayerNorm_0"), p, "MAPHead_0/MlpBlock_0")
    return y[:, 0] @ p["head/kernel"] + p["head/bias"]


def test_siglip_style_tower_with_map_head_and_bfloat16(tmp_path):
    params = siglip_like_params(np.random.default_rng(0))
    path = tmp_path / "siglip_like.npz"
    np.savez(path, **params)
    contents = read_checkpoint(path)
    assert all(a.dtype == np.float32 for a in contents.arrays.values())
    assert "MAPHead_0/probe" in contents.arrays and "cls" not in contents.arrays
    model = keras_vit.from_checkpoint(path)
    assert model.get_layer("MAPHead_0").num_heads == HEADS
    x = np.random.default_rng(1).uniform(-1, 1, (2, SIZE, SIZE, 3)).astype("float32")
    expected = big_vision_forward(params, x)
    assert np.std(expected) > 1e-2
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-4, rtol=0)
    model.save(tmp_path / "m.keras")
    back = keras_vit.from_checkpoint(tmp_path / "m.keras")
    np.testing.assert_array_equal(back.predict(x, verbose=0), model.predict(x, verbose=0))


def _scanned(params):
    """The same file with big_vision's `scan=True` layout: one `Transformer/encoderblock/`
    entry per sub-layer, the blocks stacked on a leading axis (SigLIP 2's released files)."""
    block = "params/img/Transformer/encoderblock_"
    out = {k: v for k, v in params.items() if not k.startswith(block)}
    for key in [k for k in params if k.startswith(block + "0/")]:
        rest = key[len(block + "0/") :]
        stacked = np.stack([params[f"{block}{i}/{rest}"] for i in range(LAYERS)])
        out[f"params/img/Transformer/encoderblock/{rest}"] = stacked
    return out


def test_a_scanned_siglip2_tower_reads_as_the_tanh_gelu_tower(tmp_path):
    """big_vision's SigLIP and SigLIP 2 towers (So400m/14, So400m/16, g-opt/16 included) run
    Flax's `nn.gelu`, the tanh form: read from a scanned two-tower file, the model equals
    big_vision's forward, and its blocks and MAP head take the tanh GELU."""
    params = siglip_like_params(np.random.default_rng(2))
    path = tmp_path / "siglip2_scanned.npz"
    np.savez(path, **_scanned(params))
    model = keras_vit.from_checkpoint(path)
    assert model.get_layer("encoderblock_0").gelu_approximate is True
    assert model.get_layer("MAPHead_0").gelu_approximate is True
    x = np.random.default_rng(3).uniform(-1, 1, (2, SIZE, SIZE, 3)).astype("float32")
    expected = big_vision_forward(params, x)
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-4, rtol=0)
