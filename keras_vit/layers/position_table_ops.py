"""The release's position-table resize as backend ops, for resizing in the forward pass.

Corner-aligned linear interpolation, as `scipy.ndimage.zoom(order=1)` which the JAX release
uses to fine-tune at another resolution (paper section 3.2): output sample i of an axis
sits at input coordinate i * (old - 1) / (new - 1). Written as two (new, old) weight matrices
built from the runtime grid, so the same graph serves any image size (timm's and Hugging
Face's `dynamic_img_size` / `interpolate_pos_encoding` do the same with bicubic weights).
"""

from __future__ import annotations

from keras import ops


def corner_aligned_weights(old: int, new):
    """(new, old) float32 interpolation matrix; `new` may be a symbolic scalar."""
    new_f = ops.cast(new, "float32")
    step = ops.where(new_f > 1, (old - 1) / ops.maximum(new_f - 1, 1.0), 0.0)
    coords = ops.arange(new, dtype="float32") * step
    low = ops.clip(ops.floor(coords), 0, old - 1)
    high = ops.minimum(low + 1, old - 1)
    frac = ops.expand_dims(coords - low, -1)
    low_hot = ops.one_hot(ops.cast(low, "int32"), old, dtype="float32")
    high_hot = ops.one_hot(ops.cast(high, "int32"), old, dtype="float32")
    return low_hot * (1.0 - frac) + high_hot * frac


def resize_table(table, old_grid, new_grid, num_prefix_tokens: int):
    """`(1, prefix + old_rows * old_cols, D)` -> `(1, prefix + new_rows * new_cols, D)`.

    Args:
        table: the float32 position table.
        old_grid: (rows, cols) Python ints of `table`.
        new_grid: (rows, cols), ints or symbolic scalars.
        num_prefix_tokens: rows before the grid (class token), copied unchanged.
    """
    width = table.shape[-1]
    prefix = table[:, :num_prefix_tokens]
    grid = ops.reshape(table[0, num_prefix_tokens:], (old_grid[0], old_grid[1], width))
    rows = corner_aligned_weights(old_grid[0], new_grid[0])
    cols = corner_aligned_weights(old_grid[1], new_grid[1])
    resized = ops.einsum("ih,hwd,jw->ijd", rows, grid, cols)
    resized = ops.reshape(resized, (1, -1, width))
    return ops.concatenate([prefix, resized], axis=1)
