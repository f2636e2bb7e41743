"""Where a block trains on TensorFlow, its LayerNorms and GELU go through
`keras_vit._tf_kernels` (float32 inside one custom gradient each, GELU as XLA-compiled
elementwise loops): without XLA, TensorFlow runs every elementwise operation of Keras'
LayerNorm and GELU and of their gradients as its own kernel, and those kernels, not the
products, set much of a small model's training step (docs/performance.md). Measured on the
Ti/16 training step at batch 16: bfloat16 on CPUs with bfloat16 matrix units 1.3x, float32
without XLA 1.26x (Intel Xeon without bfloat16 units, 981 -> 781 ms); under XLA, which fuses
Keras' forms itself, no change (1121 vs 1112 ms). In inference and on other backends the Keras
layers and activations run as they are (in inference TensorFlow fuses Keras' GELU into the
product's oneDNN kernel, which the custom gradient would prevent).
"""

from __future__ import annotations

import keras


def _fast(dtype, training) -> bool:
    return (
        training is True  # a Python bool in Keras steps; a tensor keeps the Keras path
        and keras.backend.backend() == "tensorflow"
        and dtype in ("bfloat16", "float16", "float32")
    )


def layer_norm(layer, x, *, training):
    """`layer(x)` for a built `keras.layers.LayerNormalization` over the last axis."""
    last = (-1, [-1], [len(x.shape) - 1])
    if not _fast(layer.compute_dtype, training=training) or layer.axis not in last:
        return layer(x)
    from keras_vit import _tf_kernels

    return _tf_kernels.layer_norm(x, layer.gamma, layer.beta, layer.epsilon)


def gelu(x, approximate, compute_dtype, *, training):
    """`keras.activations.gelu(x, approximate)` (tanh form when `approximate`)."""
    if not _fast(compute_dtype, training=training):
        return keras.activations.gelu(x, approximate=approximate)
    from keras_vit import _tf_kernels

    return _tf_kernels.gelu_tanh(x) if approximate else _tf_kernels.gelu_erf(x)


def attention(query, key, value, scale, compute_dtype, *, training):
    """`keras.ops.dot_product_attention(query, key, value, scale=scale)`; in float32 training
    on TensorFlow without XLA `keras_vit._tf_kernels.attention` (the same values, a gradient
    whose products take no transposed left operand). The float32 training step with it, in
    one process against Keras' op: without XLA 1.06x (Ti/16), 1.11x (S/16), 1.05x (the
    default `keras-vit train` model); under XLA, which rewrites both gradients itself, 0.99x
    (Ti/16), 1.005x (S/16) and 0.93x (the default model): so XLA keeps Keras' op, and so
    does a process that sees a GPU (not measured there: cuBLAS takes transposed operands as
    they are, and the kernel's explicit transposes would be extra copies)."""
    if _fast(compute_dtype, training=training) and compute_dtype == "float32":
        from keras_vit import _tf_checks, _tf_kernels

        if not (_tf_checks.tracing_for_xla() or _tf_checks.gpu_visible()):
            return _tf_kernels.attention(query, key, value, scale)
    return keras.ops.dot_product_attention(query, key, value, scale=scale)
