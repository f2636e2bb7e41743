"""Random PyTorch-layout ViT state dicts (Hugging Face and timm names), written by the tests.

The tensors are drawn directly in each library's own layout ((out, in) linear weights,
(out, in, kh, kw) convolutions, timm's fused qkv), so they share no code with keras_vit's
converters. `timm_forward` is a NumPy forward pass on timm's layout from the equations
(x @ W.T + b), the independent reference for timm files.
"""

from __future__ import annotations

import json
import math

import numpy as np
from safetensors.numpy import save_file

from tests.numpy_reference import gelu, layer_norm, softmax

TINY = dict(image_size=32, patch=8, channels=3, hidden=32, heads=4, mlp=64, layers=2, classes=10)


def _r(rng, *shape, scale=0.2):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def hf_state(rng, *, prefix="vit.", pooler=False, classifier=True, cfg=TINY):
    """A random `ViTForImageClassification` (prefix "vit.") or `ViTModel` (prefix "") dict."""
    d, m, p, c = cfg["hidden"], cfg["mlp"], cfg["patch"], cfg["channels"]
    tokens = 1 + (cfg["image_size"] // p) ** 2
    state = {
        "embeddings.cls_token": _r(rng, 1, 1, d),
        "embeddings.position_embeddings": _r(rng, 1, tokens, d),
        "embeddings.patch_embeddings.projection.weight": _r(rng, d, c, p, p),
        "embeddings.patch_embeddings.projection.bias": _r(rng, d),
        "layernorm.weight": 1 + _r(rng, d),
        "layernorm.bias": _r(rng, d),
    }
    for i in range(cfg["layers"]):
        b = f"encoder.layer.{i}."
        for name in ("layernorm_before", "layernorm_after"):
            state[f"{b}{name}.weight"] = 1 + _r(rng, d)
            state[f"{b}{name}.bias"] = _r(rng, d)
        for name in ("query", "key", "value"):
            state[f"{b}attention.attention.{name}.weight"] = _r(rng, d, d)
            state[f"{b}attention.attention.{name}.bias"] = _r(rng, d)
        state[f"{b}attention.output.dense.weight"] = _r(rng, d, d)
        state[f"{b}attention.output.dense.bias"] = _r(rng, d)
        state[f"{b}intermediate.dense.weight"] = _r(rng, m, d)
        state[f"{b}intermediate.dense.bias"] = _r(rng, m)
        state[f"{b}output.dense.weight"] = _r(rng, d, m)
        state[f"{b}output.dense.bias"] = _r(rng, d)
    if pooler:
        state["pooler.dense.weight"] = _r(rng, d, d)
        state["pooler.dense.bias"] = _r(rng, d)
    state = {prefix + k: v for k, v in state.items()}
    if classifier:
        state["classifier.weight"] = _r(rng, cfg["classes"], d)
        state["classifier.bias"] = _r(rng, cfg["classes"])
    return state


def hf_config(cfg=TINY, *, hidden_act="gelu", layer_norm_eps=1e-6, classifier=True):
    config = {
        "model_type": "vit",
        "architectures": ["ViTForImageClassification" if classifier else "ViTModel"],
        "hidden_size": cfg["hidden"],
        "num_hidden_layers": cfg["layers"],
        "num_attention_heads": cfg["heads"],
        "intermediate_size": cfg["mlp"],
        "hidden_act": hidden_act,
        "layer_norm_eps": layer_norm_eps,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "image_size": cfg["image_size"],
        "patch_size": cfg["patch"],
        "num_channels": cfg["channels"],
        "qkv_bias": True,
    }
    if classifier:
        config["id2label"] = {str(i): str(i) for i in range(cfg["classes"])}
    return config


def write_hf(folder, state, config):
    folder.mkdir(parents=True, exist_ok=True)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def timm_state(rng, *, class_token=True, pre_logits=False, head="head", fc_norm=False, cfg=TINY):
    """A random timm VisionTransformer state dict (fused qkv; `fc_norm=True`: the final
    LayerNorm is `fc_norm`, after pooling, and there is no `norm`)."""
    d, m, p, c = cfg["hidden"], cfg["mlp"], cfg["patch"], cfg["channels"]
    tokens = int(class_token) + (cfg["image_size"] // p) ** 2
    state = {
        "patch_embed.proj.weight": _r(rng, d, c, p, p),
        "patch_embed.proj.bias": _r(rng, d),
        "pos_embed": _r(rng, 1, tokens, d),
        "norm.weight": 1 + _r(rng, d),
        "norm.bias": _r(rng, d),
    }
    if fc_norm:
        state["fc_norm.weight"] = state.pop("norm.weight")
        state["fc_norm.bias"] = state.pop("norm.bias")
    if class_token:
        state["cls_token"] = _r(rng, 1, 1, d)
    for i in range(cfg["layers"]):
        b = f"blocks.{i}."
        for name in ("norm1", "norm2"):
            state[f"{b}{name}.weight"] = 1 + _r(rng, d)
            state[f"{b}{name}.bias"] = _r(rng, d)
        state[b + "attn.qkv.weight"] = _r(rng, 3 * d, d)
        state[b + "attn.qkv.bias"] = _r(rng, 3 * d)
        state[b + "attn.proj.weight"] = _r(rng, d, d)
        state[b + "attn.proj.bias"] = _r(rng, d)
        state[b + "mlp.fc1.weight"] = _r(rng, m, d)
        state[b + "mlp.fc1.bias"] = _r(rng, m)
        state[b + "mlp.fc2.weight"] = _r(rng, d, m)
        state[b + "mlp.fc2.bias"] = _r(rng, d)
    width = d
    if pre_logits:
        state["pre_logits.fc.weight"] = _r(rng, d, d)
        state["pre_logits.fc.bias"] = _r(rng, d)
    if head:
        state[f"{head}.weight"] = _r(rng, cfg["classes"], width)
        state[f"{head}.bias"] = _r(rng, cfg["classes"])
    return state


def _linear(x, state, name):
    return x @ state[name + ".weight"].T + state[name + ".bias"]


def timm_forward(state, images, *, num_heads, eps=1e-6, approximate=False):
    """timm's VisionTransformer.forward in float64 NumPy (class token or GAP, fused qkv;
    `norm` on the tokens, or `fc_norm` on the pooled feature)."""
    s = {k: np.asarray(v, np.float64) for k, v in state.items()}
    x = np.asarray(images, np.float64).transpose(0, 3, 1, 2)  # NCHW like torch
    w = s["patch_embed.proj.weight"]
    d, _, p, _ = w.shape
    b, c, h, wd = x.shape
    patches = x.reshape(b, c, h // p, p, wd // p, p).transpose(0, 2, 4, 1, 3, 5)
    patches = patches.reshape(b, -1, c * p * p)
    x = patches @ w.reshape(d, -1).T + s["patch_embed.proj.bias"]
    if "cls_token" in s:
        x = np.concatenate([np.broadcast_to(s["cls_token"], (b, 1, d)), x], axis=1)
    x = x + s["pos_embed"]
    i = 0
    while f"blocks.{i}.norm1.weight" in s:
        blk = f"blocks.{i}."
        y = layer_norm(x, s[blk + "norm1.weight"], s[blk + "norm1.bias"], eps)
        qkv = _linear(y, s, blk + "attn.qkv").reshape(b, -1, 3, num_heads, d // num_heads)
        q, k, v = qkv.transpose(2, 0, 3, 1, 4)
        a = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(d // num_heads))
        y = (a @ v).transpose(0, 2, 1, 3).reshape(b, -1, d)
        x = x + _linear(y, s, blk + "attn.proj")
        y = layer_norm(x, s[blk + "norm2.weight"], s[blk + "norm2.bias"], eps)
        x = x + _linear(gelu(_linear(y, s, blk + "mlp.fc1"), approximate), s, blk + "mlp.fc2")
        i += 1
    if "norm.weight" in s:
        x = layer_norm(x, s["norm.weight"], s["norm.bias"], eps)
    x = x[:, 0] if "cls_token" in s else x.mean(axis=1)
    if "fc_norm.weight" in s:
        x = layer_norm(x, s["fc_norm.weight"], s["fc_norm.bias"], eps)
    if "pre_logits.fc.weight" in s:
        x = np.tanh(_linear(x, s, "pre_logits.fc"))
    for head in ("head", "head.fc"):
        if head + ".weight" in s:
            return _linear(x, s, head)
    return x
