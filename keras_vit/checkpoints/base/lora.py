"""LoRA adapters (Keras' `enable_lora`) merged into the kernels the checkpoint writers write.

`keras.layers.Dense.enable_lora(rank, lora_alpha)` and `EinsumDense.enable_lora` freeze the
kernel `W` and add two float32 matrices, `lora_kernel_a` `(*W.shape[:-1], rank)` and
`lora_kernel_b` `(rank, W.shape[-1])`; the layer then applies the kernel

    W + (lora_alpha / rank) * (lora_kernel_a @ lora_kernel_b)

(keras/src/layers/core/dense.py and einsum_dense.py, the `kernel` property; LoRA: Hu et al.
2021, https://arxiv.org/abs/2106.09685). keras_vit's `HeadProjection` (the attention's query,
key, value) has `lora_kernel_a` `(D, rank)` and `lora_kernel_b` `(rank, heads, head_dim)`; the
product over the rank axis (`tensordot(A, B, 1)`) is the kernel's shape either way.
No checkpoint format keras_vit writes has keys for the adapters, so `merged_arrays` writes that
merged kernel under the layer's `kernel` key and drops the two matrices: the file reloads into
a plain model computing the adapted function.
"""

from __future__ import annotations

import keras
import numpy as np

from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.checkpoints.base.quantized import layers_below

LORA_LEAVES = ("lora_kernel_a", "lora_kernel_b")


def lora_layers(layers) -> list:
    """The layers among `layers` whose LoRA adapters are enabled (`layer.lora_enabled`)."""
    return [layer for layer in layers if getattr(layer, "lora_enabled", None)]


def lora_scale(layer) -> float:
    """`lora_alpha / lora_rank` of a LoRA-enabled Keras layer (Keras' scaling)."""
    return float(layer.lora_alpha) / float(layer.lora_rank)


def merged_kernel(kernel, kernel_a, kernel_b, scale: float) -> np.ndarray:
    """float32 `kernel + scale * (kernel_a @ kernel_b)`, the product over `kernel_a`'s last
    axis (rank): `kernel` `(*in_axes, out)` or EinsumDense's `(D, heads, head_dim)`,
    `kernel_a` `(*kernel.shape[:-1], rank)` and `kernel_b` `(rank, kernel.shape[-1])` (Keras'
    shapes), or `(D, rank)` and `(rank, heads, head_dim)` (`HeadProjection`'s).

    Raises:
        CheckpointError: shapes whose product is not the kernel's shape.
    """
    kernel = np.asarray(kernel, np.float64)
    delta = np.tensordot(np.asarray(kernel_a, np.float64), np.asarray(kernel_b, np.float64), 1)
    if delta.shape != kernel.shape:
        raise CheckpointError(
            f"LoRA matrices {np.shape(kernel_a)} @ {np.shape(kernel_b)} give {delta.shape}, "
            f"not the kernel's shape {kernel.shape}."
        )
    return (kernel + scale * delta).astype(np.float32)


def merged_arrays(model_name: str, arrays: dict, paths: dict, layers) -> dict:
    """`arrays` with each LoRA layer's adapters merged into its kernel and their keys dropped.

    Args:
        model_name: for messages.
        arrays: `{official key: float array}` (quantized kernels already dequantized).
        paths: `{official key: variable path}`.
        layers: the model's LoRA-enabled layers (`lora_layers`).

    Returns:
        A new dict in the same key order, without `.../lora_kernel_a` / `.../lora_kernel_b`.

    Raises:
        CheckpointError: a LoRA layer whose kernel or adapters have no official key (named).
    """
    keys = {path: key for key, path in paths.items()}
    out = dict(arrays)
    for layer in layers:
        variables = (layer._kernel, layer.lora_kernel_a, layer.lora_kernel_b)
        named = [keys.get(variable.path) for variable in variables]
        if None in named:
            raise CheckpointError(
                f"Cannot write {model_name!r}: the LoRA layer {layer.path!r} (enable_lora) "
                "has no official kernel key, so its adapters cannot be merged into the file."
            )
        kernel_key, a_key, b_key = named
        out[kernel_key] = merged_kernel(out[kernel_key], out[a_key], out[b_key], lora_scale(layer))
        del out[a_key], out[b_key]
    leftover = [key for key in out if key.rsplit("/", 1)[-1] in LORA_LEAVES]
    if leftover:
        raise CheckpointError(
            f"Cannot write {model_name!r}: LoRA matrices {leftover} belong to no LoRA-enabled "
            "layer, so they cannot be merged into a kernel."
        )
    return out


def merged_weights(layer) -> list:
    """`layer.get_weights()` as a layer without LoRA holds them: the adapters of every
    LoRA-enabled sublayer merged into its kernel (float32, `W + alpha / R * A @ B`) and the
    `lora_kernel_a` / `lora_kernel_b` values left out; the order is the plain layer's."""
    adapted = {sub._kernel.path: sub for sub in lora_layers(layers_below(layer))}
    skipped = {v.path for sub in adapted.values() for v in (sub.lora_kernel_a, sub.lora_kernel_b)}
    values = []
    for variable in layer.weights:
        if variable.path in skipped:
            continue
        value = keras.ops.convert_to_numpy(variable)
        sub = adapted.get(variable.path)
        if sub is not None and not getattr(sub, "quantization_mode", None):
            a, b = (keras.ops.convert_to_numpy(v) for v in (sub.lora_kernel_a, sub.lora_kernel_b))
            value = merged_kernel(value, a, b, lora_scale(sub)).astype(value.dtype)
        values.append(value)
    return values
