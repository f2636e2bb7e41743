"""A NumPy ViT forward pass written from the paper's equations (arXiv:2010.11929, eqs. 1-4).

It is the independent reference for the Keras layers and for checkpoint loading: parameters
are given as a dict keyed by the OFFICIAL checkpoint names (vit_facts.md section 3), so it
shares no code or naming logic with keras_vit.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import erf

BLOCK = "Transformer/encoderblock_{}/"


def layer_norm(x, scale, bias, epsilon):
    """LayerNorm over the last axis with biased variance."""
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * scale + bias


def gelu(x, approximate):
    """GELU: tanh approximation (JAX release) or exact erf form."""
    if approximate:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def patchify(images, patch):
    """(B, H, W, C) -> (B, H/P * W/P, P*P*C), patches in row-major order."""
    b, h, w, c = images.shape
    x = images.reshape(b, h // patch, patch, w // patch, patch, c)
    return x.transpose(0, 1, 3, 2, 4, 5).reshape(b, (h // patch) * (w // patch), patch * patch * c)


def self_attention(x, params, prefix, num_heads):
    """Multi-head self-attention, eq. (5)-(8) of appendix A, with flat (D, D) projections."""
    b, t, d = x.shape
    hd = d // num_heads

    def project(name):
        kernel = params[prefix + name + "/kernel"].reshape(d, d)
        bias = params[prefix + name + "/bias"].reshape(d)
        return (x @ kernel + bias).reshape(b, t, num_heads, hd).transpose(0, 2, 1, 3)

    q, k, v = project("query"), project("key"), project("value")
    weights = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd))  # (b, heads, t, t)
    context = (weights @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
    out_kernel = params[prefix + "out/kernel"].reshape(d, d)
    return context @ out_kernel + params[prefix + "out/bias"]


def vit_forward(
    params, images, *, num_heads, pooling="token", layer_norm_epsilon=1e-6, gelu_approximate=True
):
    """Logits (or the pooled feature when there is no `head`) of a ViT, in float64."""
    images = np.asarray(images, np.float64)
    params = {k: np.asarray(v, np.float64) for k, v in params.items()}
    kernel = params["embedding/kernel"]
    patch, d = kernel.shape[0], kernel.shape[-1]
    x = patchify(images, patch) @ kernel.reshape(-1, d) + params["embedding/bias"]
    if pooling == "token":
        cls = np.broadcast_to(params["cls"], (x.shape[0], 1, d))
        x = np.concatenate([cls, x], axis=1)
    x = x + params["Transformer/posembed_input/pos_embedding"]
    eps = layer_norm_epsilon
    i = 0
    while BLOCK.format(i) + "LayerNorm_0/scale" in params:
        p = BLOCK.format(i)
        y = layer_norm(x, params[p + "LayerNorm_0/scale"], params[p + "LayerNorm_0/bias"], eps)
        x = x + self_attention(y, params, p + "MultiHeadDotProductAttention_1/", num_heads)
        y = layer_norm(x, params[p + "LayerNorm_2/scale"], params[p + "LayerNorm_2/bias"], eps)
        mlp = p + "MlpBlock_3/"
        h = gelu(
            y @ params[mlp + "Dense_0/kernel"] + params[mlp + "Dense_0/bias"], gelu_approximate
        )
        x = x + h @ params[mlp + "Dense_1/kernel"] + params[mlp + "Dense_1/bias"]
        i += 1
    x = layer_norm(
        x, params["Transformer/encoder_norm/scale"], params["Transformer/encoder_norm/bias"], eps
    )
    pooled = x[:, 0] if pooling == "token" else x.mean(axis=1)
    if "pre_logits/kernel" in params:
        pooled = np.tanh(pooled @ params["pre_logits/kernel"] + params["pre_logits/bias"])
    if "head/kernel" in params:
        return pooled @ params["head/kernel"] + params["head/bias"]
    return pooled


def random_official_params(
    rng,
    *,
    image_size,
    patch_size,
    channels,
    hidden_dim,
    num_heads,
    mlp_dim,
    num_layers,
    num_classes,
    pooling="token",
    representation_size=None,
    scale=0.2,
):
    """Random arrays under the official key names and shapes (vit_facts.md section 3)."""
    d, hd = hidden_dim, hidden_dim // num_heads
    grid = (image_size // patch_size) ** 2

    def r(*shape):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    params = {
        "embedding/kernel": r(patch_size, patch_size, channels, d),
        "embedding/bias": r(d),
        "Transformer/posembed_input/pos_embedding": r(1, grid + (pooling == "token"), d),
        "Transformer/encoder_norm/scale": 1 + r(d),
        "Transformer/encoder_norm/bias": r(d),
    }
    if pooling == "token":
        params["cls"] = r(1, 1, d)
    for i in range(num_layers):
        p = BLOCK.format(i)
        for ln in ("LayerNorm_0", "LayerNorm_2"):
            params[f"{p}{ln}/scale"] = 1 + r(d)
            params[f"{p}{ln}/bias"] = r(d)
        a = p + "MultiHeadDotProductAttention_1/"
        for name in ("query", "key", "value"):
            params[f"{a}{name}/kernel"] = r(d, num_heads, hd)
            params[f"{a}{name}/bias"] = r(num_heads, hd)
        params[a + "out/kernel"] = r(num_heads, hd, d)
        params[a + "out/bias"] = r(d)
        params[p + "MlpBlock_3/Dense_0/kernel"] = r(d, mlp_dim)
        params[p + "MlpBlock_3/Dense_0/bias"] = r(mlp_dim)
        params[p + "MlpBlock_3/Dense_1/kernel"] = r(mlp_dim, d)
        params[p + "MlpBlock_3/Dense_1/bias"] = r(d)
    width = d
    if representation_size is not None:
        params["pre_logits/kernel"] = r(d, representation_size)
        params["pre_logits/bias"] = r(representation_size)
        width = representation_size
    params["head/kernel"] = r(width, num_classes)
    params["head/bias"] = r(num_classes)
    return params
