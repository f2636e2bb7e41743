"""The load path's position-table resizes as backend ops, for resizing in the forward pass.

Each method of `keras_vit.spec.resize_methods` (the names `keras_vit.resize_position_embeddings`
takes) is written as two `(new, old)` weight matrices built from the runtime grid with
`keras.ops` only, so the same graph serves any image size on every backend and equals the
NumPy resize done at load time (`keras_vit.layers.position_resize`):

- "bilinear": corner-aligned linear interpolation, as `scipy.ndimage.zoom(order=1)` which the
  JAX release uses to fine-tune at another resolution (paper section 3.2): output sample i
  sits at input coordinate i * (old - 1) / (new - 1);
- "bicubic": half-pixel Keys cubic (a = -0.5), the kernel stretched by old / new when
  shrinking, taps outside the input dropped and the weights renormalised (timm's
  `resample_abs_pos_embed`, `F.interpolate(mode="bicubic", antialias=True)`);
- "torch_bicubic": PyTorch's `F.interpolate(mode="bicubic", align_corners=False)` without
  antialiasing (a = -0.75, four taps, border taps clamped; Hugging Face's
  `interpolate_pos_encoding`);
- "dinov2": "torch_bicubic" with the original DINOv2's 0.1 offset in the scale factor;
- "bilinear_antialias": half-pixel triangle filter stretched by old / new when shrinking,
  taps outside the input dropped and the weights renormalised (PyTorch's
  `F.interpolate(mode="bilinear", antialias=True)`, SigLIP 2 NaFlex's
  `Siglip2VisionEmbeddings.resize_positional_embeddings`).

An axis whose size does not change is copied (identity weights), as the load path does.
"""

from __future__ import annotations

from keras import ops

from keras_vit.spec.resize_methods import RESIZE_METHODS

# Keys' cubic parameter of PIL / timm (antialiased bicubic) and of PyTorch's plain bicubic.
KEYS_A = -0.5
TORCH_A = -0.75
DINOV2_OFFSET = 0.1  # facebookresearch/dinov2 `interpolate_offset`


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


def keys_cubic(x, a: float):
    """Keys' cubic convolution kernel with parameter `a` (support [-2, 2])."""
    x = ops.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return ops.where(x <= 1, near, ops.where(x < 2, far, ops.zeros_like(x)))


def half_pixel_weights(old: int, new, kernel):
    """(new, old) antialiased resize matrix with half-pixel centres: `kernel` of each tap's
    distance to the output centre, stretched by the downscale factor (at least 1), rows
    normalised."""
    scale = old / ops.cast(new, "float32")
    support = ops.maximum(scale, 1.0)
    centres = (ops.arange(new, dtype="float32") + 0.5) * scale - 0.5
    taps = ops.arange(old, dtype="float32")
    weights = kernel((taps[None, :] - centres[:, None]) / support)
    return weights / ops.sum(weights, axis=1, keepdims=True)


def half_pixel_cubic_weights(old: int, new):
    """(new, old) antialiased bicubic matrix with half-pixel centres (timm's)."""
    return half_pixel_weights(old, new, lambda x: keys_cubic(x, KEYS_A))


def half_pixel_linear_weights(old: int, new):
    """(new, old) antialiased linear matrix with half-pixel centres (SigLIP 2 NaFlex's)."""
    return half_pixel_weights(old, new, lambda x: ops.maximum(1.0 - ops.abs(x), 0.0))


def torch_cubic_weights(old: int, new, offset: float = 0.0):
    """(new, old) matrix of PyTorch's plain bicubic (border taps clamped); `offset` 0.1 is
    DINOv2's scale-factor offset."""
    new_f = ops.cast(new, "float32")
    centres = (ops.arange(new, dtype="float32") + 0.5) * (old / (new_f + offset)) - 0.5
    first = ops.floor(centres)
    weights = 0.0
    for shift in (-1.0, 0.0, 1.0, 2.0):
        taps = first + shift
        index = ops.cast(ops.clip(taps, 0, old - 1), "int32")
        tap_weight = keys_cubic(taps - centres, TORCH_A)
        weights = weights + ops.one_hot(index, old, dtype="float32") * tap_weight[:, None]
    return weights


def axis_weights(old: int, new, method: str):
    """(new, old) float32 resize matrix of one axis by `method`; the identity when the size
    does not change (the load path copies such an axis).

    Raises:
        ValueError: an unknown method.
    """
    if method not in RESIZE_METHODS:
        raise ValueError(f"method must be one of {RESIZE_METHODS}. Received: {method!r}")
    if method == "bilinear":
        return corner_aligned_weights(old, new)  # the identity already when new == old
    if method == "bicubic":
        weights = half_pixel_cubic_weights(old, new)
    elif method == "bilinear_antialias":
        weights = half_pixel_linear_weights(old, new)
    else:
        weights = torch_cubic_weights(old, new, DINOV2_OFFSET if method == "dinov2" else 0.0)
    same = ops.equal(ops.cast(new, "int32"), old)
    eye = ops.one_hot(ops.arange(new, dtype="int32"), old, dtype="float32")
    return ops.where(same, eye, weights)


def resize_table(table, old_grid, new_grid, num_prefix_tokens: int, method: str = "bilinear"):
    """`(1, prefix + old_rows * old_cols, D)` -> `(1, prefix + new_rows * new_cols, D)`.

    Args:
        table: the float32 position table.
        old_grid: (rows, cols) Python ints of `table`.
        new_grid: (rows, cols), ints or symbolic scalars.
        num_prefix_tokens: rows before the grid (class token), copied unchanged.
        method: one of `keras_vit.spec.resize_methods.RESIZE_METHODS` (default "bilinear").

    Raises:
        ValueError: an unknown method.
    """
    width = table.shape[-1]
    prefix = table[:, :num_prefix_tokens]
    grid = ops.reshape(table[0, num_prefix_tokens:], (old_grid[0], old_grid[1], width))
    rows = axis_weights(old_grid[0], new_grid[0], method)
    cols = axis_weights(old_grid[1], new_grid[1], method)
    resized = ops.einsum("ih,hwd,jw->ijd", rows, grid, cols)
    resized = ops.reshape(resized, (1, -1, width))
    return ops.concatenate([prefix, resized], axis=1)
