"""Resizing a learned position table to another patch grid (paper section 3.2, appendix B.1.1).

The NumPy side of `keras_vit.layers.position_embedding` ("learned" tables); public as
`keras_vit.resize_position_embeddings`.

"We perform 2D interpolation of the pre-trained position embeddings, according to their
location in the original image" (paper section 3.2). The grid part of the table (every row
after the prefix tokens) is reshaped row-major to `(rows, cols, D)`, resized, and flattened
back; prefix rows (the class token) are kept bit for bit. Done once, in NumPy, outside any
graph, so the resized model compiles under XLA and runs on TPU with static shapes.
"""

from __future__ import annotations

import math
import numbers
from typing import Literal

import numpy as np

from keras_vit._validation import check_choice, to_pair
from keras_vit.spec.resize_methods import RESIZE_METHODS

# facebookresearch/dinov2 vision_transformer.py `interpolate_pos_encoding`: the released
# DINOv2 models (without registers) resize with `scale_factor=(new + 0.1) / old`
# (`interpolate_offset=0.1`, "to avoid floating point error") and no antialiasing.
DINOV2_OFFSET = 0.1

# Keys' cubic convolution parameter used by PIL, tf.image.resize and timm's antialiased
# bicubic resize (Keys 1981); PyTorch's plain bicubic (and OpenCV's) use -0.75.
_KEYS_A = -0.5
_TORCH_A = -0.75


def _linear_weights_corner_aligned(old: int, new: int) -> np.ndarray:
    """(new, old) matrix of linear interpolation with aligned corners.

    Output sample i sits at input coordinate i * (old - 1) / (new - 1), as in
    `scipy.ndimage.zoom(..., order=1)` (grid_mode=False) which the JAX release uses; a single
    output sample sits at coordinate 0.
    """
    step = (old - 1) / (new - 1) if new > 1 else 0.0
    coords = np.arange(new, dtype=np.float64) * step
    low = np.clip(np.floor(coords).astype(np.int64), 0, old - 1)
    high = np.minimum(low + 1, old - 1)
    frac = coords - low
    weights = np.zeros((new, old), np.float64)
    rows = np.arange(new)
    np.add.at(weights, (rows, low), 1.0 - frac)
    np.add.at(weights, (rows, high), frac)
    return weights


def _keys_cubic(x: np.ndarray, a: float = _KEYS_A) -> np.ndarray:
    """Keys' cubic convolution kernel with parameter `a` (support [-2, 2])."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x <= 1, near, np.where(x < 2, far, 0.0))


def _cubic_weights_half_pixel(old: int, new: int) -> np.ndarray:
    """(new, old) matrix of antialiased bicubic resampling with half-pixel centres.

    Output sample i sits at input coordinate (i + 0.5) * old / new - 0.5. When shrinking the
    kernel is stretched by old / new (antialiasing). Taps outside the input are dropped and
    the remaining weights renormalised, as PIL, `tf.image.resize(antialias=True)` and timm
    (`F.interpolate(mode="bicubic", antialias=True)`) do.
    """
    scale = old / new
    support = max(scale, 1.0)
    centres = (np.arange(new, dtype=np.float64) + 0.5) * scale - 0.5
    taps = np.arange(old, dtype=np.float64)
    weights = _keys_cubic((taps[None, :] - centres[:, None]) / support)
    return weights / weights.sum(axis=1, keepdims=True)


def _cubic_weights_torch(old: int, new: int, offset: float = 0.0) -> np.ndarray:
    """(new, old) matrix of PyTorch's `F.interpolate(mode="bicubic", align_corners=False)`
    without antialiasing (what Hugging Face's `interpolate_pos_encoding` calls).

    Output sample i sits at input coordinate (i + 0.5) * old / (new + offset) - 0.5 (offset
    0 when the output size is given; DINOv2's 0.1 when PyTorch is given the scale factor
    (new + 0.1) / old, whose inverse it then uses for the coordinates); its four taps
    floor(x) - 1 ... floor(x) + 2 get Keys weights with a = -0.75 (the same kernel at any
    scale, no stretching when shrinking), taps outside the input are clamped to the border
    row (their weights added there).
    """
    centres = (np.arange(new, dtype=np.float64) + 0.5) * (old / (new + offset)) - 0.5
    first = np.floor(centres).astype(np.int64)
    weights = np.zeros((new, old), np.float64)
    rows = np.arange(new)
    for offset in (-1, 0, 1, 2):
        taps = first + offset
        np.add.at(
            weights,
            (rows, np.clip(taps, 0, old - 1)),
            _keys_cubic(taps - centres, _TORCH_A),
        )
    return weights


def _linear_weights_antialias(old: int, new: int) -> np.ndarray:
    """(new, old) matrix of PyTorch's `F.interpolate(mode="bilinear", align_corners=False,
    antialias=True)` (`upsample_bilinear2d_aa`, PIL's triangle filter), what transformers'
    `Siglip2VisionEmbeddings.resize_positional_embeddings` runs.

    Output sample i sits at input coordinate (i + 0.5) * old / new - 0.5; tap j gets the
    triangle max(0, 1 - |j - centre| / support) with support max(old / new, 1) (the filter
    stretched when shrinking, plain linear when enlarging); taps outside the input are
    dropped and the row renormalised to sum 1.
    """
    scale = old / new
    support = max(scale, 1.0)
    centres = (np.arange(new, dtype=np.float64) + 0.5) * scale - 0.5
    taps = np.arange(old, dtype=np.float64)
    weights = np.maximum(0.0, 1.0 - np.abs(taps[None, :] - centres[:, None]) / support)
    return weights / weights.sum(axis=1, keepdims=True)


def _axis_weights(old: int, new: int, method: str) -> np.ndarray:
    if old == new:
        return np.eye(new, dtype=np.float64)
    if method == "bilinear":
        return _linear_weights_corner_aligned(old, new)
    if method == "bilinear_antialias":
        return _linear_weights_antialias(old, new)
    if method == "torch_bicubic":
        return _cubic_weights_torch(old, new)
    if method == "dinov2":
        return _cubic_weights_torch(old, new, DINOV2_OFFSET)
    return _cubic_weights_half_pixel(old, new)


def resize_grid(grid: np.ndarray, new_grid, method: str = "bilinear") -> np.ndarray:
    """Resizes a `(rows, cols, channels)` array to `(new_rows, new_cols, channels)`.

    Separable: `W_rows @ grid @ W_cols^T` per channel, computed in float64.
    """
    rows = _axis_weights(grid.shape[0], new_grid[0], method)
    cols = _axis_weights(grid.shape[1], new_grid[1], method)
    return np.einsum("ir,rcd,jc->ijd", rows, grid.astype(np.float64), cols, optimize=True)


def square_grid(num_grid_tokens: int) -> tuple[int, int]:
    """The (g, g) grid of a table with `num_grid_tokens` = g * g rows.

    Raises:
        ValueError: if `num_grid_tokens` is not a perfect square.
    """
    side = math.isqrt(num_grid_tokens)
    if side * side != num_grid_tokens:
        raise ValueError(
            f"A position table with {num_grid_tokens} grid rows is not a square grid; pass "
            "its (rows, cols) grid explicitly."
        )
    return side, side


def resize_position_embeddings(
    table,
    old_grid,
    new_grid,
    num_prefix_tokens: int,
    method: Literal[
        "bilinear", "bicubic", "torch_bicubic", "dinov2", "bilinear_antialias"
    ] = "bilinear",
) -> np.ndarray:
    """Resizes a ViT position table from one patch grid to another.

    Source: the JAX release's `load_pretrained` (vit_jax/checkpoint.py, scipy.ndimage.zoom),
    timm's `resample_abs_pos_embed` for the bicubic option, and transformers'
    `ViTEmbeddings.interpolate_pos_encoding` (modeling_vit.py) for "torch_bicubic", and
    `Siglip2VisionEmbeddings.resize_positional_embeddings` (modeling_siglip2.py) for
    "bilinear_antialias".

    DINOv2 files, by source: timm's `resample_abs_pos_embed` (bicubic, antialias=True) and
    transformers' `Dinov2WithRegistersEmbeddings.interpolate_pos_encoding` (bicubic,
    antialias=True, output size given) are "bicubic"; transformers' `Dinov2Embeddings`
    (v5: bicubic, no antialias, output size given) is "torch_bicubic"; the original
    facebookresearch/dinov2 models without registers (and transformers' Dinov2 before it
    moved to the output size) pass the scale factor (new + 0.1) / old with no antialias:
    "dinov2". "dinov2" moves each sample by up to ~0.1 * old / new of a row from
    "torch_bicubic"; an unchanged grid is copied, as the
    original returns its table then.

    Args:
        table: `(1, num_prefix_tokens + rows * cols, hidden_dim)` or
            `(num_prefix_tokens + rows * cols, hidden_dim)`, any real dtype; grid rows in
            row-major order.
        old_grid: int or (rows, cols) of `table`.
        new_grid: int or (rows, cols) wanted; non-square both ways.
        num_prefix_tokens: rows before the grid (1 with a class token, 0 for "gap" models).
            Take it from the model config, never from the row count.
        method: "bilinear" (default): corner-aligned linear interpolation, identical to the
            release's `scipy.ndimage.zoom(order=1)`; "bicubic": half-pixel Keys cubic
            (a = -0.5) with antialiasing when shrinking, as timm; "torch_bicubic": PyTorch's
            plain `F.interpolate(mode="bicubic", align_corners=False)` (a = -0.75, no
            antialiasing, border taps clamped), as Hugging Face's `interpolate_pos_encoding`;
            "dinov2": "torch_bicubic" with the released DINOv2's 0.1 offset in the scale
            factor (see above); "bilinear_antialias": PyTorch's `F.interpolate(
            mode="bilinear", align_corners=False, antialias=True)` (half-pixel triangle
            filter, stretched by old / new when shrinking), as SigLIP 2's NaFlex tower
            (`Siglip2VisionModel`) resizes its table for each image's grid.

    Returns:
        A float32 NumPy array of the input's rank with `num_prefix_tokens + new_rows *
        new_cols` rows. Prefix rows are copied unchanged; an identity resize returns an exact
        copy. Interpolation runs in float64 whatever the Keras dtype policy.

    Raises:
        ValueError: a table that is not rank 2 or 3 (with batch 1), a row count that does not
            equal `num_prefix_tokens + rows * cols`, a bad grid, prefix count or method.
    """
    method = check_choice("method", method, RESIZE_METHODS)
    old_grid = to_pair("old_grid", old_grid)
    new_grid = to_pair("new_grid", new_grid)
    if (
        isinstance(num_prefix_tokens, bool)
        or not isinstance(num_prefix_tokens, numbers.Integral)
        or num_prefix_tokens < 0
    ):
        raise ValueError(
            f"`num_prefix_tokens` must be an int >= 0. Received: {num_prefix_tokens!r}"
        )
    array = np.asarray(table)
    if array.ndim == 3 and array.shape[0] == 1:
        rows = array[0]
    elif array.ndim == 2:
        rows = array
    else:
        raise ValueError(
            "The position table must have shape (1, num_tokens, hidden_dim) or "
            f"(num_tokens, hidden_dim). Received: shape={array.shape}"
        )
    expected = num_prefix_tokens + old_grid[0] * old_grid[1]
    if rows.shape[0] != expected:
        raise ValueError(
            f"The position table has {rows.shape[0]} rows but old_grid={old_grid} with "
            f"num_prefix_tokens={num_prefix_tokens} needs {expected}."
        )
    num_prefix_tokens = int(num_prefix_tokens)
    prefix = rows[:num_prefix_tokens].astype(np.float32)
    grid = rows[num_prefix_tokens:].reshape(old_grid[0], old_grid[1], rows.shape[1])
    if old_grid == new_grid:
        resized = grid.astype(np.float32)
    else:
        resized = resize_grid(grid, new_grid, method).astype(np.float32)
    out = np.concatenate([prefix, resized.reshape(-1, rows.shape[1])], axis=0)
    return out[None] if array.ndim == 3 else out
