"""Adapting a checkpoint's input convolution to a model with other image channels.

timm's rule (`timm.models._manipulate.adapt_input_conv`, used for `in_chans`): to 1
channel, the kernel's input slices are summed; from 3 to N channels, the RGB kernel is
repeated over the channels and cut to N, then scaled by 3 / N (so a gray image repeated
on every channel gives the same activations). Other conversions are not defined.
"""

from __future__ import annotations

import numpy as np

from keras_vit.spec import layer_names as names

# The input convolutions whose kernel (kh, kw, in, out) takes the image's channels.
INPUT_KERNELS = ("embedding/kernel", f"{names.ROOT_CONV}/kernel")


def input_kernel_key(variables) -> str | None:
    """The model's input convolution: the hybrid's ResNet root, else the patch embedding."""
    for key in reversed(INPUT_KERNELS):
        if key in variables:
            return key
    return None


def channel_mismatch(kernel, variable_shape) -> tuple[int, int] | None:
    """`(file channels, model channels)` when the kernels differ only in their input axis."""
    file_shape, model_shape = tuple(np.shape(kernel)), tuple(variable_shape)
    if len(file_shape) != 4 or len(model_shape) != 4 or file_shape == model_shape:
        return None
    same_rest = file_shape[:2] == model_shape[:2] and file_shape[3] == model_shape[3]
    return (file_shape[2], model_shape[2]) if same_rest else None


def can_adapt(source: int, target: int) -> bool:
    """Whether timm's rule covers `source` -> `target` channels (to 1, or from 3)."""
    return target == 1 or source == 3


def adapt_input_kernel(kernel, target: int) -> np.ndarray:
    """A `(kh, kw, C, D)` kernel for `target` input channels (see the module docstring).

    Raises:
        ValueError: a conversion timm's rule does not define (from C != 3 to target > 1).
    """
    kernel = np.asarray(kernel)
    source = kernel.shape[2]
    if not can_adapt(source, target):
        raise ValueError(
            f"No channel adaptation from {source} to {target} input channels (timm's rule "
            "sums to 1 channel or repeats 3 channels)."
        )
    if target == 1:
        return kernel.sum(axis=2, keepdims=True)
    repeats = -(-target // source)
    tiled = np.tile(kernel, (1, 1, repeats, 1))[:, :, :target]
    return (tiled * (source / target)).astype(kernel.dtype)
