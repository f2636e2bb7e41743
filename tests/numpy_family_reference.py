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
- quick_gelu (OpenAI CLIP): x * sigmoid(1.702 x).
"""

from __future__ import annotations

import numpy as np

from tests.numpy_reference import gelu, layer_norm, patchify, self_attention

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
    if no_embed_class:
        x = np.concatenate([*prefix, x + params[POSITION]], axis=1)
    else:
        x = np.concatenate([*prefix, x], axis=1) + params[POSITION]
    if "reg" in params:
        reg = np.broadcast_to(params["reg"], (batch, *params["reg"].shape[1:]))
        x = np.concatenate([x[:, : len(prefix)], reg, x[:, len(prefix) :]], axis=1)
    return x


def _block(x, params, i, *, num_heads, eps, kind, approximate):
    p = BLOCK.format(i)
    y = layer_norm(x, params[p + "LayerNorm_0/scale"], params[p + "LayerNorm_0/bias"], eps)
    y = self_attention(y, params, p + "MultiHeadDotProductAttention_1/", num_heads)
    x = x + y * params.get(p + "LayerScale_1/scale", 1.0)
    y = layer_norm(x, params[p + "LayerNorm_2/scale"], params[p + "LayerNorm_2/bias"], eps)
    mlp = p + "MlpBlock_3/"
    h = activation(
        y @ params[mlp + "Dense_0/kernel"] + params[mlp + "Dense_0/bias"], kind, approximate
    )
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
):
    """Logits (the pooled class token, or the mean of the patch tokens for "gap", after
    `pre_logits` when present, without a `head`) in float64."""
    params = {k: np.asarray(v, np.float64) for k, v in params.items()}
    x = _tokens(params, np.asarray(images, np.float64), no_embed_class)
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
        )
        i += 1
    x = layer_norm(
        x, params["Transformer/encoder_norm/scale"], params["Transformer/encoder_norm/bias"], eps
    )
    registers = params["reg"].shape[1] if "reg" in params else 0
    pooled = x[:, 0] if pooling == "token" else x[:, registers:].mean(axis=1)
    if "pre_logits/kernel" in params:
        pooled = np.tanh(pooled @ params["pre_logits/kernel"] + params["pre_logits/bias"])
    if "head/kernel" not in params:
        return pooled
    logits = pooled @ params["head/kernel"] + params["head/bias"]
    if "head_dist/kernel" in params:
        dist = x[:, 1] @ params["head_dist/kernel"] + params["head_dist/bias"]
        logits = (logits + dist) / 2
    return logits
