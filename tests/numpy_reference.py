"""A NumPy ViT forward pass written from the paper's equations (arXiv:2010.11929, eqs. 1-4).

It is the independent reference for the Keras layers and for checkpoint loading: parameters
are given as a dict keyed by the OFFICIAL checkpoint names (vit_facts.md section 3), so it
shares no code or naming logic with keras_vit.

The hybrid's ResNet (paper section 3.1; BiT, Kolesnikov et al. 2020, as in the release's
models_resnet.py) is written from its equations too (vit_facts.md section 2): weight-
standardised convolutions with TF "SAME" padding, GroupNorm, bottleneck units, the root.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import erf

from tests.tiny_config import TINY_ARCH

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
    """Logits (or the pooled feature when there is no `head`) of a ViT, in float64.

    The final LayerNorm is `encoder_norm` on the tokens, or `fc_norm` on the pooled feature
    when `params` has `fc_norm/scale` (timm's fc_norm)."""
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
    if "Transformer/encoder_norm/scale" in params:
        x = layer_norm(
            x,
            params["Transformer/encoder_norm/scale"],
            params["Transformer/encoder_norm/bias"],
            eps,
        )
    pooled = x[:, 0] if pooling == "token" else x.mean(axis=1)
    if "fc_norm/scale" in params:
        pooled = layer_norm(pooled, params["fc_norm/scale"], params["fc_norm/bias"], eps)
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
    final_norm="tokens",
):
    """Random arrays under the official key names and shapes (vit_facts.md section 3);
    `final_norm="pooled"` names the final LayerNorm `fc_norm/` (timm's fc_norm)."""
    d, hd = hidden_dim, hidden_dim // num_heads
    grid = (image_size // patch_size) ** 2

    def r(*shape):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    params = {
        "embedding/kernel": r(patch_size, patch_size, channels, d),
        "embedding/bias": r(d),
        "Transformer/posembed_input/pos_embedding": r(1, grid + (pooling == "token"), d),
    }
    norm = "fc_norm/" if final_norm == "pooled" else "Transformer/encoder_norm/"
    params[norm + "scale"] = 1 + r(d)
    params[norm + "bias"] = r(d)
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


def tiny_official_params(seed=0, **overrides):
    """`random_official_params` of the tiny test ViT (`TINY_ARCH`, overridable)."""
    return random_official_params(np.random.default_rng(seed), **{**TINY_ARCH, **overrides})


# ---------------------------------------------------------------- hybrid ResNet (BiT)


def standardize_kernel(w, eps=1e-5):
    """BiT weight standardisation per output channel: (w - mean) / (population std + eps)."""
    mean = w.mean(axis=(0, 1, 2), keepdims=True)
    std = np.sqrt(((w - mean) ** 2).mean(axis=(0, 1, 2), keepdims=True))
    return (w - mean) / (std + eps)


def tf_same_padding(size, kernel, stride):
    """(output size, padding before, padding after) of TF "SAME": the smaller half first."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, total // 2, total - total // 2


def conv2d_same(x, w, stride):
    """Cross-correlation with TF "SAME" padding, by summing shifted strided slices."""
    batch, height, width, _ = x.shape
    kh, kw, _, filters = w.shape
    oh, top, bottom = tf_same_padding(height, kh, stride)
    ow, left, right = tf_same_padding(width, kw, stride)
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    out = np.zeros((batch, oh, ow, filters))
    for i in range(kh):
        for j in range(kw):
            window = xp[:, i : i + stride * oh : stride, j : j + stride * ow : stride, :]
            out += np.einsum("bhwc,co->bhwo", window, w[i, j])
    return out


def max_pool_same(x, size=3, stride=2):
    """Max-pooling with TF "SAME" padding (padded positions never win)."""
    batch, height, width, channels = x.shape
    oh, top, bottom = tf_same_padding(height, size, stride)
    ow, left, right = tf_same_padding(width, size, stride)
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=-np.inf)
    out = np.full((batch, oh, ow, channels), -np.inf)
    for i in range(size):
        for j in range(size):
            out = np.maximum(out, xp[:, i : i + stride * oh : stride, j : j + stride * ow : stride])
    return out


def group_norm(x, groups, scale, bias, eps=1e-6):
    """GroupNorm over (height, width, channels of the group), biased variance."""
    b, h, w, c = x.shape
    g = x.reshape(b, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = g.var(axis=(1, 2, 4), keepdims=True)
    return ((g - mean) / np.sqrt(var + eps)).reshape(b, h, w, c) * scale + bias


def relu(x):
    return np.maximum(x, 0)


def _std_conv_gn(x, params, prefix, conv, norm, groups, stride=1):
    y = conv2d_same(x, standardize_kernel(params[f"{prefix}{conv}/kernel"]), stride)
    return group_norm(y, groups, params[f"{prefix}{norm}/scale"], params[f"{prefix}{norm}/bias"])


def bottleneck_unit(x, params, prefix, stride, groups):
    """BiT's pre-activation-free bottleneck: conv1 1x1, conv2 3x3 (stride), conv3 1x1 (4x),
    each standardised and followed by GroupNorm; projection shortcut conv_proj + gn_proj when
    the file has one; add, ReLU. Keys `prefix + "conv1/kernel"`, `prefix + "gn1/scale"`, ..."""
    residual = x
    if prefix + "conv_proj/kernel" in params:
        residual = _std_conv_gn(x, params, prefix, "conv_proj", "gn_proj", groups, stride)
    y = relu(_std_conv_gn(x, params, prefix, "conv1", "gn1", groups))
    y = relu(_std_conv_gn(y, params, prefix, "conv2", "gn2", groups, stride))
    y = _std_conv_gn(y, params, prefix, "conv3", "gn3", groups)
    return relu(residual + y)


def resnet_forward(params, images, groups=32):
    """The hybrid's feature map: root (7x7/2 conv, GroupNorm, ReLU, 3x3/2 max-pool), then
    block{s}/unit{u} for every stage and unit in the file; stride 2 on the first unit of
    stages 2 and later."""
    x = np.asarray(images, np.float64)
    params = {k: np.asarray(v, np.float64) for k, v in params.items()}
    x = relu(_std_conv_gn(x, params, "", "conv_root", "gn_root", groups, stride=2))
    x = max_pool_same(x)
    stage = 1
    while f"block{stage}/unit1/conv1/kernel" in params:
        unit = 1
        while f"block{stage}/unit{unit}/conv1/kernel" in params:
            stride = 2 if stage > 1 and unit == 1 else 1
            x = bottleneck_unit(x, params, f"block{stage}/unit{unit}/", stride, groups)
            unit += 1
        stage += 1
    return x


def hybrid_forward(params, images, *, num_heads, groups=32, **vit_kwargs):
    """Logits of a ResNet + ViT hybrid: the ViT of `vit_forward` on the ResNet feature map."""
    return vit_forward(
        params, resnet_forward(params, images, groups), num_heads=num_heads, **vit_kwargs
    )
