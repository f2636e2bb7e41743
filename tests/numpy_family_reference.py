"""A NumPy forward pass of the ViT family (DeiT, DeiT III, DINOv2, CLIP towers) from the
equations, keyed by keras_vit's release-style names; it shares no code with keras_vit.

Equations, on top of the ViT's (tests/numpy_reference.py, paper eqs. 1-4):
- distillation token (DeiT, Touvron et al. 2021 section 5): a second learned token after
  the class token; logits = (head(z_0) + head_dist(z_1)) / 2 at inference, or head(z_0)
  alone without head_dist (HF `DeiTForImageClassification`);
- pre-logits (the release's, HF `DeiTPooler`): tanh(dense(z_0)) after pooling;
- register tokens (Darcet et al. 2024): R learned tokens after the class / distillation
  tokens, added after the position embedding (no position), ignored by pooling;
- no_embed_class (timm `_pos_embed`): the position table covers the patches only, the
  class / distillation tokens are prepended after it is added;
- norm_pre (timm, CLIP): a LayerNorm on the sequence before the first block;
- LayerScale (CaiT section 2): x = x + g1 * MSA(LN(x)); x = x + g2 * MLP(LN(x));
- quick_gelu (OpenAI CLIP): x * sigmoid(1.702 x);
- the gated MLP "swiglu" (Shazeer 2020, arXiv:2002.05202; DINOv3 H+ / 7B, timm `SwiGLU`, HF
  `DINOv3ViTGatedMLP`): W_1 (silu(y W_gate + b_gate) * (y W_0 + b_0)) + b_1, silu(z) =
  z / (1 + exp(-z));
- rotary position embedding (DINOv3, Simeoni et al. 2025, arXiv:2508.10104, section 3 and
  its `RopePositionEmbedding`): no position table; in every attention the queries and keys
  of the patch tokens (not the class / register tokens) are rotated: patch (i, j) of a
  rows x cols grid at y = 2 (i + 1/2) / rows - 1, x = 2 (j + 1/2) / cols - 1; frequencies
  base^(-4k/h), k < h/4 (base 100, h the head width); angles 2 pi [y f, x f] repeated twice;
  q' = q cos + [-q2, q1] sin over the head's halves q1, q2;
- attention projections without a bias (DINOv3's key, or all three): a missing bias is 0.
"""

from __future__ import annotations

import numpy as np

from tests.numpy_reference import gelu, layer_norm, patchify, self_attention, softmax

BLOCK = "Transformer/encoderblock_{}/"
POSITION = "Transformer/posembed_input/pos_embedding"


def activation(x, kind, approximate):
    if kind == "quick_gelu":
        return x / (1.0 + np.exp(-1.702 * x))
    return gelu(x, approximate)


def _tokens(params, images, no_embed_class):
    """[cls][dist][registers][patches] with the position embedding."""
    kernel = params["embedding/kernel"]
    patch, d = kernel.shape[0], kernel.shape[-1]
    x = patchify(images, patch) @ kernel.reshape(-1, d) + params["embedding/bias"]
    batch = x.shape[0]
    prefix = [np.broadcast_to(params[k], (batch, 1, d)) for k in ("cls", "dist") if k in params]
    table = params.get(POSITION, 0.0)  # none with a rotary embedding
    if no_embed_class:
        x = np.concatenate([*prefix, x + table], axis=1)
    else:
        x = np.concatenate([*prefix, x], axis=1) + table
    if "reg" in params:
        reg = np.broadcast_to(params["reg"], (batch, *params["reg"].shape[1:]))
        x = np.concatenate([x[:, : len(prefix)], reg, x[:, len(prefix) :]], axis=1)
    return x


def rope_angles(rows, cols, head_dim, base=100.0):
    """`(rows * cols, head_dim)` rotation angles of a row-major grid, float64."""
    freqs = base ** (-4.0 * np.arange(head_dim // 4) / head_dim)
    ys = 2.0 * (np.arange(rows) + 0.5) / rows - 1.0
    xs = 2.0 * (np.arange(cols) + 0.5) / cols - 1.0
    y, x = np.meshgrid(ys, xs, indexing="ij")
    half = np.concatenate(
        [2 * np.pi * y.reshape(-1, 1) * freqs, 2 * np.pi * x.reshape(-1, 1) * freqs], axis=1
    )
    return np.concatenate([half, half], axis=1)


def _rotate(t, angles, prefix):
    """RoPE on `t` (batch, heads, tokens, h): tokens after `prefix` rotated."""
    patches = t[:, :, prefix:]
    h = t.shape[-1] // 2
    turned = np.concatenate([-patches[..., h:], patches[..., :h]], axis=-1)
    rotated = patches * np.cos(angles) + turned * np.sin(angles)
    return np.concatenate([t[:, :, :prefix], rotated], axis=2)


def rope_attention(x, params, prefix, num_heads, grid, num_prefix_tokens):
    """Self-attention with the rotary embedding of a `grid` (rows, cols) on q and k."""
    b, t, d = x.shape
    hd = d // num_heads

    def project(name):
        kernel = params[prefix + name + "/kernel"].reshape(d, d)
        bias = params.get(prefix + name + "/bias", np.zeros(d)).reshape(d)
        return (x @ kernel + bias).reshape(b, t, num_heads, hd).transpose(0, 2, 1, 3)

    angles = rope_angles(*grid, hd)
    q = _rotate(project("query"), angles, num_prefix_tokens)
    k = _rotate(project("key"), angles, num_prefix_tokens)
    weights = softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd))
    context = (weights @ project("value")).transpose(0, 2, 1, 3).reshape(b, t, d)
    return context @ params[prefix + "out/kernel"].reshape(d, d) + params[prefix + "out/bias"]


def _block(x, params, i, *, num_heads, eps, kind, approximate, rope=None):
    p = BLOCK.format(i)
    y = layer_norm(x, params[p + "LayerNorm_0/scale"], params[p + "LayerNorm_0/bias"], eps)
    attention = p + "MultiHeadDotProductAttention_1/"
    if rope is None:
        y = self_attention(y, params, attention, num_heads)
    else:
        y = rope_attention(y, params, attention, num_heads, *rope)
    x = x + y * params.get(p + "LayerScale_1/scale", 1.0)
    y = layer_norm(x, params[p + "LayerNorm_2/scale"], params[p + "LayerNorm_2/bias"], eps)
    mlp = p + "MlpBlock_3/"
    h = y @ params[mlp + "Dense_0/kernel"] + params[mlp + "Dense_0/bias"]
    if kind == "swiglu":
        gate = y @ params[mlp + "Dense_gate/kernel"] + params[mlp + "Dense_gate/bias"]
        h = gate / (1.0 + np.exp(-gate)) * h
    else:
        h = activation(h, kind, approximate)
    y = h @ params[mlp + "Dense_1/kernel"] + params[mlp + "Dense_1/bias"]
    return x + y * params.get(p + "LayerScale_3/scale", 1.0)


def family_forward(
    params,
    images,
    *,
    num_heads,
    pooling="token",
    no_embed_class=False,
    mlp_activation="gelu",
    gelu_approximate=True,
    layer_norm_epsilon=1e-6,
    rope=False,
    pool_patches=False,
):
    """Logits (the pooled class token, or the mean of the patch tokens for "gap", after
    `pre_logits` when present, without a `head`) in float64.

    `rope=True`: DINOv3's rotary embedding of the image's patch grid (no position table).
    `pool_patches=True`: "gap" averages the patch tokens only (after the class token too:
    timm's `global_pool="avg"` of a class-token model)."""
    params = {k: np.asarray(v, np.float64) for k, v in params.items()}
    images = np.asarray(images, np.float64)
    x = _tokens(params, images, no_embed_class)
    patch = params["embedding/kernel"].shape[0]
    prefix = sum(k in params for k in ("cls", "dist")) + (
        params["reg"].shape[1] if "reg" in params else 0
    )
    grid = (images.shape[1] // patch, images.shape[2] // patch)
    rope_args = (grid, prefix) if rope else None
    eps = layer_norm_epsilon
    if "Transformer/norm_pre/scale" in params:
        x = layer_norm(
            x, params["Transformer/norm_pre/scale"], params["Transformer/norm_pre/bias"], eps
        )
    i = 0
    while BLOCK.format(i) + "LayerNorm_0/scale" in params:
        x = _block(
            x,
            params,
            i,
            num_heads=num_heads,
            eps=eps,
            kind=mlp_activation,
            approximate=gelu_approximate,
            rope=rope_args,
        )
        i += 1
    x = layer_norm(
        x, params["Transformer/encoder_norm/scale"], params["Transformer/encoder_norm/bias"], eps
    )
    registers = params["reg"].shape[1] if "reg" in params else 0
    skip = prefix if pool_patches else registers
    pooled = x[:, 0] if pooling == "token" else x[:, skip:].mean(axis=1)
    if "pre_logits/kernel" in params:
        pooled = np.tanh(pooled @ params["pre_logits/kernel"] + params["pre_logits/bias"])
    if "head/kernel" not in params:
        return pooled
    logits = pooled @ params["head/kernel"] + params["head/bias"]
    if "head_dist/kernel" in params:
        dist = x[:, 1] @ params["head_dist/kernel"] + params["head_dist/bias"]
        logits = (logits + dist) / 2
    return logits
