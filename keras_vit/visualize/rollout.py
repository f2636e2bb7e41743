"""Attention rollout (Abnar & Zuidema 2020) and mean attention distance (ViT paper fig. 7).

Pure NumPy on the arrays returned by `keras_vit.attention_maps`.
"""

from __future__ import annotations

import numbers

import keras
import numpy as np

from keras_vit._validation import check_choice, to_pair
from keras_vit.visualize.graph import TokenGrid, token_grid

HEAD_FUSIONS = ("mean", "max", "min")


def _stack_maps(maps) -> np.ndarray:
    """Validates a list of `(batch, heads, T, T)` maps; returns `(layers, batch, heads, T, T)`."""
    if isinstance(maps, np.ndarray) and maps.ndim == 4:
        maps = [maps]
    try:
        arrays = [np.asarray(m, dtype=np.float64) for m in maps]
    except TypeError as error:
        raise ValueError(f"`maps` must be a list of arrays. Received: {type(maps)}") from error
    if not arrays:
        raise ValueError("`maps` must hold at least one (batch, heads, T, T) array. Received: []")
    shape = arrays[0].shape
    for i, array in enumerate(arrays):
        if array.ndim != 4 or array.shape[-1] != array.shape[-2] or array.shape != shape:
            raise ValueError(
                "Every attention map must have the same shape (batch, heads, T, T). "
                f"Received: maps[0].shape={shape}, maps[{i}].shape={array.shape}"
            )
    return np.stack(arrays)


def _resolve_grid(grid, num_tokens: int) -> tuple[tuple[int, int], int, bool]:
    """`(grid, num_prefix_tokens, class_token)` from a model, a TokenGrid or an explicit
    (h, w) pair (then the prefix is 0, or 1 class token)."""
    if isinstance(grid, keras.Model):
        grid = token_grid(grid)
    if isinstance(grid, TokenGrid):
        pair, prefix, has_class = grid.grid, grid.num_prefix_tokens, grid.has_class_token
        if prefix + pair[0] * pair[1] != num_tokens:
            raise ValueError(
                f"The maps have T={num_tokens} tokens but the model's grid {pair} and "
                f"{prefix} prefix tokens make {grid.num_tokens}."
            )
        return pair, prefix, has_class
    pair = to_pair("grid", grid)
    prefix = num_tokens - pair[0] * pair[1]
    if prefix not in (0, 1):
        raise ValueError(
            f"The maps have T={num_tokens} tokens but grid={pair} has {pair[0] * pair[1]} "
            "patches; T must be grid_h * grid_w (gap) or 1 + grid_h * grid_w (class token). "
            "For a model with a distillation token or register tokens pass the model."
        )
    return pair, prefix, bool(prefix)


def _patch_flow(matrix, prefix: int, has_class: bool):
    """`(batch, patches)` from `(batch, T, T)`: the class token's row over the patch
    columns, or without a class token the mean of the patch tokens' rows (what "gap"
    pools) over the patch columns. Distillation and register columns are left out."""
    if has_class:
        return matrix[:, 0, prefix:]
    return matrix[:, prefix:, prefix:].mean(axis=1)


def attention_rollout(maps, grid, *, head_fusion: str = "mean", discard_ratio: float = 0.0):
    """Attention rollout: how much each patch flows into the output (Abnar & Zuidema 2020).

    Paper: "Quantifying Attention Flow in Transformers", https://arxiv.org/abs/2005.00928,
    section 3. Per layer l the heads are fused (mean by default) into W_l, the residual
    connection is modelled by adding the identity, rows are renormalised,
    A_l = (W_l + I) / rowsum(W_l + I) (= 0.5 W_l + 0.5 I when rows of W_l sum to 1), and
    the layers are multiplied: R = A_L ... A_2 A_1. Rows of R sum to 1.

    Returned map:
      - class-token models: R[class token, patches], the share of the class token's
        rolled-out attention that lands on each patch (sums to 1 minus the share left on the
        class token itself);
      - gap models (no class token; the output is the token mean): the mean over query tokens
        of R[query, patches], which sums to 1 over the patches.
    Values are not rescaled; for display divide by the maximum.

    Args:
        maps: list of `(batch, heads, T, T)` arrays from `keras_vit.attention_maps`, first
            block first.
        grid: the model (its token grid is read from its layers), a `TokenGrid`, or the
            `(grid_h, grid_w)` patch grid. Not guessed from T, which cannot tell (h, w) from
            (w, h).
        head_fusion: "mean" (default, as in the paper), "max" or "min" over heads.
        discard_ratio: in [0, 1); per image, the fraction of the smallest fused attention
            weights set to 0 before adding the identity (diagonal kept). Default 0 (none).

    Returns:
        float32 array `(batch, grid_h, grid_w)`, patches in row-major order.

    Raises:
        ValueError: maps of different or non-square shapes, an empty list, a grid that does
            not match T, an unknown `head_fusion`, or `discard_ratio` outside [0, 1).
    """
    stacked = _stack_maps(maps)
    check_choice("head_fusion", head_fusion, HEAD_FUSIONS)
    if (
        isinstance(discard_ratio, bool)
        or not isinstance(discard_ratio, numbers.Real)
        or not 0 <= discard_ratio < 1
    ):
        raise ValueError(
            f"`discard_ratio` must be a number in [0, 1). Received: discard_ratio={discard_ratio!r}"
        )
    num_tokens = stacked.shape[-1]
    (grid_h, grid_w), prefix, has_class = _resolve_grid(grid, num_tokens)
    fused = getattr(np, head_fusion)(stacked, axis=2)  # (layers, batch, T, T)
    if discard_ratio > 0:
        fused = _discard_lowest(fused, discard_ratio)
    identity = np.eye(num_tokens)
    augmented = fused + identity
    augmented /= augmented.sum(axis=-1, keepdims=True)
    rollout = augmented[0]
    for layer in augmented[1:]:
        rollout = layer @ rollout
    flow = _patch_flow(rollout, prefix, has_class)
    return flow.reshape(-1, grid_h, grid_w).astype(np.float32)


def block_attention_map(layer_map, grid) -> np.ndarray:
    """One block's attention on the patches, heads averaged (no rollout).

    Args:
        layer_map: `(batch, heads, T, T)` array, one element of `attention_maps(...)`.
        grid: the model, a `TokenGrid` or `(grid_h, grid_w)`.

    Returns:
        float32 `(batch, grid_h, grid_w)`: the class token's attention to each patch, or for
        gap models the mean over queries of the attention to each patch.

    Raises:
        ValueError: a map that is not `(batch, heads, T, T)` or a grid that does not match T.
    """
    stacked = _stack_maps([layer_map])[0]
    (grid_h, grid_w), prefix, has_class = _resolve_grid(grid, stacked.shape[-1])
    flow = _patch_flow(stacked.mean(axis=1), prefix, has_class)
    return flow.reshape(-1, grid_h, grid_w).astype(np.float32)


def _discard_lowest(fused: np.ndarray, ratio: float) -> np.ndarray:
    """Zeroes the `ratio` smallest off-diagonal weights of each `(T, T)` matrix."""
    num_tokens = fused.shape[-1]
    off_diagonal = ~np.eye(num_tokens, dtype=bool)
    values = fused[..., off_diagonal]  # (layers, batch, T*T - T)
    count = int(values.shape[-1] * ratio)
    if count == 0:
        return fused
    ranks = np.argsort(np.argsort(values, axis=-1, kind="stable"), axis=-1)
    values = np.where(ranks < count, 0.0, values)
    out = fused.copy()
    out[..., off_diagonal] = values
    return out


def patch_distances(grid, patch_size) -> np.ndarray:
    """Euclidean distances in pixels between patch centres, `(grid_h*grid_w, grid_h*grid_w)`."""
    grid_h, grid_w = to_pair("grid", grid)
    patch_h, patch_w = to_pair("patch_size", patch_size)
    rows, cols = np.meshgrid(np.arange(grid_h), np.arange(grid_w), indexing="ij")
    y = rows.reshape(-1) * patch_h
    x = cols.reshape(-1) * patch_w
    return np.hypot(y[:, None] - y[None, :], x[:, None] - x[None, :])


def mean_attention_distance(maps, grid, patch_size=None) -> np.ndarray:
    """Mean attention distance in pixels per layer and head (ViT paper section 4.5, fig. 7).

    For each query patch, the distance to every key patch (between patch centres, in input
    pixels) weighted by the attention weight; averaged over query patches and images. The
    class token has no position: it is dropped as a query, and its column is dropped from the
    weights, which are renormalised over the patches (so the result is a weighted average of
    distances, not shrunk by attention paid to the class token).

    Args:
        maps: list of `(batch, heads, T, T)` arrays from `keras_vit.attention_maps`.
        grid: `(grid_h, grid_w)`, a `TokenGrid`, or the model (then `patch_size` defaults to
            the model's pixels per token).
        patch_size: int or `(height, width)` pixels per patch token (for hybrids: the ResNet
            stride times the patch); required unless `grid` is a model or `TokenGrid`.

    Returns:
        float32 array `(layers, heads)` in pixels.

    Raises:
        ValueError: bad maps, a grid that does not match T, or a missing `patch_size`.
    """
    stacked = _stack_maps(maps)
    if isinstance(grid, keras.Model):
        grid = token_grid(grid)
    if patch_size is None:
        if not isinstance(grid, TokenGrid):
            raise ValueError(
                "`patch_size` is required when `grid` is a (grid_h, grid_w) pair. "
                "Received: patch_size=None"
            )
        patch_size = grid.patch_size
    pair, prefix, _ = _resolve_grid(grid, stacked.shape[-1])
    distances = patch_distances(pair, patch_size)
    weights = stacked[..., prefix:, prefix:]
    weights = weights / weights.sum(axis=-1, keepdims=True)
    per_query = (weights * distances).sum(axis=-1)  # (layers, batch, heads, queries)
    return per_query.mean(axis=(1, 3)).astype(np.float32)
