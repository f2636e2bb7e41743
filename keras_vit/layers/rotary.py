"""Rotary position embeddings (RoPE) of the patch tokens, as DINOv3 defines them.

DINOv3 (Simeoni et al. 2025, arXiv:2508.10104; facebookresearch/dinov3
`RopePositionEmbedding`, timm `RotaryEmbeddingDinoV3` in layers/pos_embed_sincos.py, Hugging
Face `DINOv3ViTRopePositionEmbedding`) rotates each head's queries and keys of the patch tokens
by angles given by the patch's position; the class and storage (register) tokens before them
are not rotated. For a grid of `rows x cols` patches and a head width `h` (a multiple of 4):

- coordinates: patch (i, j) sits at y = 2 (i + 0.5) / rows - 1, x = 2 (j + 0.5) / cols - 1,
  both in (-1, 1) whatever the grid (timm's `normalize_coords="separate"`), so any image size
  works with no table to resize;
- periods: p_k = temperature ** (2 k / (h / 2)), k = 0 .. h/4 - 1 (temperature, DINOv3's
  `base`, 100);
- angles: the h/2 values [2 pi y / p_0 .. 2 pi y / p_{h/4-1}, 2 pi x / p_0 .. 2 pi x / p_{h/4-1}]
  tiled twice to h ("rotate half" layout);
- rotation: x' = x cos(a) + rotate_half(x) sin(a), rotate_half([x1, x2]) = [-x2, x1] over the
  two halves of the head.

DINOv3's training-time coordinate augmentations (shift, jitter, rescale) are off at inference
and are not applied here. Everything runs in float32 and is cast back to the input's dtype.
"""

from __future__ import annotations

import math

import numpy as np
from keras import ops

from keras_vit._validation import check_int, check_positive_number, to_pair

ROPE_TEMPERATURE = 100.0
"""DINOv3's RoPE `base` (timm `rope_temperature=100`, HF `DINOv3ViTConfig.rope_theta`)."""


def check_rope_head_dim(head_dim: int) -> int:
    """`head_dim` if it is a multiple of 4, else a ValueError (RoPE rotates pairs of the two
    axes' halves)."""
    if head_dim % 4:
        raise ValueError(
            "position_embedding='rope' needs a head width (hidden_dim / num_heads) divisible "
            f"by 4. Received: head_dim={head_dim}"
        )
    return head_dim


def check_rope(rope) -> dict | None:
    """A layer's `rope` config, normalised: None, or a dict with `num_prefix_tokens` (tokens
    before the patches, never rotated), `grid_size` `[rows, cols]` (the patch grid the model
    is built for), `patch_size` `[height, width]` in pixels or None (then the grid is fixed;
    with it each call's images give the grid) and `temperature` (default 100).

    Raises:
        ValueError: not a dict, an unknown key, or a bad value (named).
    """
    if rope is None:
        return None
    if not isinstance(rope, dict):
        raise ValueError(f"`rope` must be None or a dict. Received: rope={rope!r}")
    unknown = sorted(set(rope) - {"num_prefix_tokens", "grid_size", "patch_size", "temperature"})
    if unknown:
        raise ValueError(f"`rope` has unknown keys {unknown}. Received: rope={rope!r}")
    prefix = check_int("rope['num_prefix_tokens']", rope.get("num_prefix_tokens", 0))
    if prefix < 0:
        raise ValueError(f"rope['num_prefix_tokens'] must be >= 0. Received: {prefix}")
    if rope.get("grid_size") is None:
        raise ValueError(f"`rope` needs a grid_size. Received: rope={rope!r}")
    patch = rope.get("patch_size")
    return {
        "num_prefix_tokens": prefix,
        "grid_size": list(to_pair("rope['grid_size']", rope["grid_size"])),
        "patch_size": None if patch is None else list(to_pair("rope['patch_size']", patch)),
        "temperature": check_positive_number(
            "rope['temperature']", rope.get("temperature", ROPE_TEMPERATURE)
        ),
    }


def rope_periods(head_dim: int, temperature: float = ROPE_TEMPERATURE) -> np.ndarray:
    """The `(head_dim // 4,)` float32 periods temperature ** (2 k / (head_dim / 2))."""
    check_rope_head_dim(head_dim)
    exponents = 2.0 * np.arange(head_dim // 4, dtype=np.float32) / (head_dim // 2)
    return (np.float32(temperature) ** exponents).astype(np.float32)


def _axis_coordinates(size):
    """(i + 0.5) / size mapped to (-1, 1), float32, `(size,)`; `size` an int or a tensor."""
    steps = ops.cast(ops.arange(size), "float32") + 0.5
    return 2.0 * (steps / ops.cast(size, "float32")) - 1.0


def rope_sin_cos(rows, cols, head_dim: int, temperature: float = ROPE_TEMPERATURE):
    """`(sin, cos)`, each `(rows * cols, head_dim)` float32, for a row-major patch grid.

    `rows` and `cols` may be Python ints or scalar integer tensors (a dynamic image size).
    """
    periods = ops.convert_to_tensor(rope_periods(head_dim, temperature))
    ys, xs = _axis_coordinates(rows), _axis_coordinates(cols)
    count = ops.shape(ys)[0] * ops.shape(xs)[0]
    y = ops.reshape(ops.repeat(ys[:, None], ops.shape(xs)[0], axis=1), (count, 1))
    x = ops.reshape(ops.tile(xs[None, :], (ops.shape(ys)[0], 1)), (count, 1))
    angles = ops.concatenate([2.0 * math.pi * y / periods, 2.0 * math.pi * x / periods], axis=-1)
    angles = ops.concatenate([angles, angles], axis=-1)
    return ops.sin(angles), ops.cos(angles)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return ops.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rotate_tokens(x, sin, cos, num_prefix_tokens: int):
    """RoPE on `x` `(batch, tokens, heads, head_dim)`: the first `num_prefix_tokens` tokens
    unchanged, token `num_prefix_tokens + p` rotated by row p of `sin`/`cos` `(P, head_dim)`.

    `x` may hold fewer tokens than `num_prefix_tokens + P` (the queries of a class-token-only
    block): then only its patch tokens are rotated, by the first rows of the tables.
    Computed in float32; returns `x`'s dtype.
    """
    length = x.shape[1]
    if length is not None and length <= num_prefix_tokens:
        return x
    dtype = x.dtype
    prefix, patches = x[:, :num_prefix_tokens], ops.cast(x[:, num_prefix_tokens:], "float32")
    # The patch count may be unknown until run time (a dynamic image size, or the prefix-only
    # queries of the last block, whose static length a slice loses): cut the tables to it.
    count = ops.shape(patches)[1]
    if not isinstance(count, int) or count != sin.shape[0]:
        sin, cos = sin[:count], cos[:count]
    sin, cos = sin[None, :, None, :], cos[None, :, None, :]
    rotated = ops.cast(patches * cos + _rotate_half(patches) * sin, dtype)
    if not num_prefix_tokens:
        return rotated
    return ops.concatenate([prefix, rotated], axis=1)
