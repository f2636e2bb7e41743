"""Float weights of a model quantized with `keras.Model.quantize`, for the checkpoint writers.

Every checkpoint format keras_vit writes (the release's `.npz`, timm's and Hugging Face's
safetensors) holds float weights under the float model's keys. After `model.quantize("int8")`
a `Dense` / `EinsumDense` holds an int8 `kernel` and a float `kernel_scale`, and applies
`kernel / kernel_scale` (Keras' abs-max int8 scheme: one scale per output unit, the kernel's
input axes reduced). `float_arrays` writes that dequantized kernel as float32, so the file
reloads into a float model whose outputs equal the quantized model's up to the int8 rounding
of the activations. Every other mode ("int4", "float8", "gptq", "awq", ...) packs or scales
its weights in ways no format holds: it is refused by name.
"""

from __future__ import annotations

import keras
import numpy as np

from keras_vit.checkpoints.base.errors import CheckpointError

DEQUANTIZED_MODES = ("int8",)
SCALE = "kernel_scale"


def _layers_below(layer, seen):
    """`layer` and every Keras layer held in its attributes (lists and dicts too), once."""
    if id(layer) in seen:
        return
    seen.add(id(layer))
    yield layer
    for value in vars(layer).values():
        values = value if isinstance(value, (list, tuple)) else [value]
        if isinstance(value, dict):
            values = list(value.values())
        for item in values:
            if isinstance(item, keras.layers.Layer):
                yield from _layers_below(item, seen)


def quantization_modes(model) -> dict:
    """`{variable path: quantization mode}` of the variables of quantized layers in `model`."""
    modes, seen = {}, set()
    for layer in _layers_below(model, seen):
        mode = getattr(layer, "quantization_mode", None)
        if mode:
            for variable in layer.weights:
                modes[variable.path] = mode
    return modes


def _input_axes(key: str, ndim: int) -> int:
    """How many leading kernel axes the layer contracts: the attention's `out` projection
    `(heads, head_dim, D)` two, every other kernel (`(D, heads, head_dim)`, `(in, out)`) one."""
    return ndim - 1 if key.endswith("/out/kernel") else 1


def dequantized_kernel(key: str, kernel, scale) -> np.ndarray:
    """float32 `kernel / scale` of an int8 kernel, `scale` reshaped to its output axes.

    Raises:
        CheckpointError: a scale whose size is not the kernel's output units (named).
    """
    kernel = np.asarray(kernel)
    scale = np.asarray(scale, np.float32)
    axes = _input_axes(key, kernel.ndim)
    outputs = kernel.shape[axes:]
    if scale.size != int(np.prod(outputs)):
        raise CheckpointError(
            f"Cannot dequantize {key!r}: its int8 kernel {kernel.shape} has {outputs} output "
            f"units but its kernel_scale {scale.shape} {scale.size} values."
        )
    return (kernel.astype(np.float32) / scale.reshape((1,) * axes + outputs)).astype(np.float32)


def float_arrays(model_name: str, arrays: dict, paths: dict, modes: dict) -> dict:
    """`arrays` (`{official key: array}`) with every int8 kernel dequantized and its
    `kernel_scale` dropped.

    Args:
        model_name: for messages.
        arrays: the model's weights by official key (quantized ones as stored).
        paths: `{official key: variable path}`.
        modes: `quantization_modes(model)`.

    Raises:
        CheckpointError: a layer quantized in a mode other than int8, named with the mode.
    """
    quantized = {key: modes[paths[key]] for key in arrays if paths[key] in modes}
    for key, mode in quantized.items():
        if mode not in DEQUANTIZED_MODES:
            layer = key.rsplit("/", 1)[0]
            raise CheckpointError(
                f"Cannot write {model_name!r} as a checkpoint: {layer!r} is quantized "
                f"({mode!r}, keras.Model.quantize), and checkpoint files hold float weights; "
                f"only {DEQUANTIZED_MODES} models are written (dequantized to float32). Write "
                "the float model (before quantize) and quantize it again after loading."
            )
    out = {}
    for key, array in arrays.items():
        if key.endswith("/" + SCALE) and key in quantized:
            continue
        scale_key = key[: -len("kernel")] + SCALE if key.endswith("/kernel") else None
        if key in quantized and scale_key in arrays:
            array = dequantized_kernel(key, array, arrays[scale_key])
        out[key] = np.asarray(array, dtype=np.float32)
    return out
