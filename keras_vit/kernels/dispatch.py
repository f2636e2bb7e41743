"""The one place that picks a kernel for keras_vit's layers (backend, dtype policy, device,
compiler); the layers in `keras_vit.layers` use `keras.ops` and call here, and no backend
test is left inside them.

Attention (`MultiHeadSelfAttention`): each layer stores its kernel when it is built, in
`layer.attention_kernel` (as timm's `Attention.fused_attn` and Keras' `MultiHeadAttention`'s
`flash_attention` do), from `attention_kernel(compute_dtype)`:

- `"fused"`: `keras.ops.dot_product_attention(q, k, v, scale=...)` with
  `flash_attention=None`, so the backend picks its fused kernel where it has one (cuDNN flash
  attention on JAX GPUs, splash attention on TPUs, `scaled_dot_product_attention` on
  PyTorch; plain XLA or eager ops elsewhere). Every backend but TensorFlow, under float32 and
  bfloat16 (and TensorFlow float32 where a GPU is visible). In float32 training on JAX's CPU
  backend it is `keras_vit.kernels.jax.attention` (the same values, a hand-written gradient).
- `"tensorflow"`: TensorFlow without a GPU, float32 or bfloat16: the CPU forms measured
  faster there (`keras_vit.kernels.tensorflow`): under bfloat16 the heads-major products
  tuned for oneDNN (`heads_major_attention`); in float32 training without XLA the attention
  core with a hand-written gradient; otherwise Keras' op.
- `"explicit"`: float16: logits and softmax in float32 (q k^T easily exceeds float16's
  65504), `einsum` + softmax + `einsum`.

Per call, a fused kernel cannot apply dropout to the attention weights: in training with
`attention_dropout_rate > 0` every kernel falls back to the explicit probabilities. Whether
TensorFlow code is traced for XLA is known only when it is traced (a layer built once may be
traced both ways), so that one condition is read per call.

The block's LayerNorm in training on JAX goes through `keras_vit.kernels.jax` (a
hand-written gradient: JAX's own gradient of Keras' LayerNorm is a chain XLA:CPU recomputes
across the blocks), and so does the attention core in float32 training on JAX's CPU backend:
the default `keras-vit train` step 190 -> 158 ms CPU with the LayerNorm, 129 ms with both
(2-core AMD EPYC; docs/performance.md).

The block's LayerNorm and GELU, in training on TensorFlow, go through `keras_vit.kernels.
tensorflow` (float32 inside one custom gradient each, GELU as XLA-compiled elementwise
loops): without XLA, TensorFlow runs every elementwise operation of Keras' LayerNorm and GELU
and of their gradients as its own kernel, and those kernels, not the products, set much of a
small model's training step (docs/performance_log.md). Measured on the Ti/16 training step at
batch 16: bfloat16 on CPUs with bfloat16 matrix units 1.3x, float32 without XLA 1.26x (Intel
Xeon without bfloat16 units, 981 -> 781 ms); under XLA, which fuses Keras' forms itself, no
change (1121 vs 1112 ms). In inference and on other backends the Keras layers and activations
run as they are (in inference TensorFlow fuses Keras' GELU into the product's oneDNN kernel,
which the custom gradient would prevent).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os

import keras
from keras import ops

EXPLICIT = "explicit"
FUSED = "fused"
TENSORFLOW = "tensorflow"
ATTENTION_KERNELS = (EXPLICIT, FUSED, TENSORFLOW)
XLA_CPU_MEMORY_SCHEDULE = "--xla_cpu_enable_concurrency_optimized_scheduler=false"

logger = logging.getLogger(__name__)

_PORTABLE = {"depth": 0}  # > 0 inside `portable_kernels()`


def _on_tensorflow() -> bool:
    return keras.backend.backend() == "tensorflow"


def attention_kernel(compute_dtype: str) -> str:
    """The attention kernel for a layer computing in `compute_dtype`, decided at build time:
    `"explicit"` (float16), `"tensorflow"` (TensorFlow, float32 or bfloat16, no GPU visible;
    bfloat16 also with one), or `"fused"` (everything else). See the module docstring."""
    if compute_dtype == "float16":
        return EXPLICIT
    if _on_tensorflow() and compute_dtype in ("bfloat16", "float32"):
        from keras_vit.kernels import tf_checks

        if compute_dtype == "bfloat16" or not tf_checks.gpu_visible():
            return TENSORFLOW
    return FUSED


def _jaxlib_knows_the_flag() -> bool:
    """XLA aborts the process on an XLA_FLAGS option it does not know: the flag is added only
    with jaxlib >= 0.10, where it was verified (0.10.2)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major, minor = (int(part) for part in version("jaxlib").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (0, 10)


def prefer_memory_schedule(remat: bool = True) -> bool:
    """For `remat` (nothing when `remat` is False): on Keras' JAX backend, adds
    `XLA_CPU_MEMORY_SCHEDULE` to the `XLA_FLAGS` environment variable, unless `XLA_FLAGS`
    already sets that option (the user's choice stands). Returns True when it added it.

    XLA:CPU's default concurrency-optimised scheduler moves the recomputation `keras.remat`
    (`jax.checkpoint`) asks for back beside the forward pass, so remat saves nothing on CPU;
    with the flag XLA schedules for memory. Measured on a B/16 training step at 384 px, batch
    8, JAX 0.10.2 on a 2-core Xeon: 8,517 MiB of XLA temporaries with fused attention and
    remat under the default scheduler, 2,503 MiB with the flag; peak RSS 10,283 -> 4,205 MiB,
    the step no slower. The option names only the CPU compiler, so GPUs and TPUs are
    unaffected. XLA reads `XLA_FLAGS` once, at a process's first XLA computation: the flag
    takes effect when remat is asked for before anything has run on JAX: the builders and
    `keras-vit train/finetune --remat` ask first; loading a remat `.keras` file, or
    `finetune(remat=True)` and `keras-vit finetune` of a remat source without `--remat`, ask
    too late: set `XLA_FLAGS` before starting Python there. Added only with jaxlib >= 0.10.
    """
    if not remat or keras.backend.backend() != "jax" or not _jaxlib_knows_the_flag():
        return False
    flags = os.environ.get("XLA_FLAGS", "")
    if XLA_CPU_MEMORY_SCHEDULE.split("=")[0] in flags:
        return False
    os.environ["XLA_FLAGS"] = f"{flags} {XLA_CPU_MEMORY_SCHEDULE}".strip()
    logger.debug("remat: XLA_FLAGS += %s (XLA:CPU schedules for memory)", XLA_CPU_MEMORY_SCHEDULE)
    return True


def pads_pools_explicitly() -> bool:
    """True on PyTorch: a "same" max-pool whose input is non-negative (the hybrid's root pool)
    is built as `keras_vit.layers.ZeroPaddedMaxPool` (zero padding, then a "valid" pool; the
    pads follow each input's size). A `.keras` file saved on another backend keeps Keras'
    pool, which `torch.compile` then fails on. Keras' "same" pooling pads by edge
    replication on PyTorch, whose backward torch 2.14's inductor fails to compile under
    `torch.compile` (`--jit-compile`). Elsewhere Keras' own "same" pool stays: the values are
    the same, but the other graph changed the rounding of the default `keras-vit train` on
    TensorFlow (test accuracy 97.7% -> 97.3%, the same seed)."""
    return keras.backend.backend() == "torch"


def check_attention_kernel(kernel) -> str:
    """`kernel` if it is one of `ATTENTION_KERNELS`, else a ValueError naming it."""
    if kernel not in ATTENTION_KERNELS:
        raise ValueError(
            f"`attention_kernel` must be one of {ATTENTION_KERNELS}. Received: {kernel!r}"
        )
    return kernel


def attention(layer, queries, tokens, *, training, self_attention, images=None):
    """`layer`'s attention output `(batch, q, hidden_dim)` for `queries` `(batch, q, D)` over
    `tokens` `(batch, t, D)`, through the kernel `layer.attention_kernel` names.

    `layer` is a built `keras_vit.layers.MultiHeadSelfAttention`; `self_attention` says that
    `queries` is `tokens` (q, k and v may then come from one product). Its rotary position
    embedding (`layer.rotate`, `images` for a dynamic grid) applies to q and k after their
    projections; such a layer, or one without all three q/k/v biases, keeps the EinsumDense
    projections."""
    kernel = check_attention_kernel(layer.attention_kernel)
    plain = layer.rope is None and layer.qkv_bias == "qkv"
    if (
        kernel == TENSORFLOW
        and layer.compute_dtype == "bfloat16"
        and plain
        and not layer.quantized()
    ):
        from keras_vit.kernels import tensorflow

        return tensorflow.heads_major_attention(layer, queries, tokens, training, self_attention)
    query, key, value = layer.query(queries), layer.key(tokens), layer.value(tokens)
    query, key = layer.rotate(query, key, tokens, images)
    dropout = bool(training) and layer.attention_dropout_rate > 0
    if kernel == EXPLICIT or dropout:
        context = layer.explicit_context(query, key, value, training=training)
    else:
        scale = 1.0 / math.sqrt(layer.head_dim)
        dtype = layer.compute_dtype
        context = _scaled_dot_product(query, key, value, scale, kernel, dtype, training=training)
    return layer.out(context)


def _scaled_dot_product(query, key, value, scale, kernel, compute_dtype, *, training):
    """softmax(q k^T scale) v, `(batch, q, heads, head_dim)`: Keras' op, or in float32
    training on JAX's CPU backend `keras_vit.kernels.jax.attention`, or in float32 training
    on TensorFlow without XLA `keras_vit.kernels.tensorflow.attention` (the same values, a
    gradient whose products take no transposed left operand). The float32 training
    step with it, in one process against Keras' op: without XLA 1.06x (Ti/16), 1.11x (S/16),
    1.05x (the default `keras-vit train` model); under XLA, which rewrites both gradients
    itself, 0.99x (Ti/16), 1.005x (S/16) and 0.93x (the default model): so XLA keeps Keras'
    op, and so does a process that sees a GPU (decided at build: `attention_kernel`)."""
    if (
        kernel == TENSORFLOW
        and compute_dtype == "float32"
        and _fast(compute_dtype, training=training)
    ):
        from keras_vit.kernels import tensorflow, tf_checks

        if not tf_checks.tracing_for_xla():
            return tensorflow.attention(query, key, value, scale)
    if kernel == FUSED and compute_dtype == "float32" and training is True and _on_jax_cpu():
        from keras_vit.kernels import jax as jax_kernels

        return jax_kernels.attention(query, key, value, scale)
    return fused_attention(query, key, value, scale)


def _on_jax_cpu() -> bool:
    if keras.backend.backend() != "jax":
        return False
    import jax

    return jax.default_backend() == "cpu"


def fused_attention(query, key, value, scale):
    """`keras.ops.dot_product_attention(query, key, value, scale=scale)` with
    `flash_attention=None`: the backend uses its fused kernel where the inputs allow one
    (cuDNN flash attention on JAX GPUs, splash attention on TPUs, PyTorch's
    `scaled_dot_product_attention`), its own einsum-softmax-einsum elsewhere.

    query `(batch, q, heads, head_dim)`; key, value `(batch, t, heads, head_dim)` (q <= t:
    the class-token-only last block passes fewer queries than keys). Returns
    `(batch, q, heads, head_dim)`."""
    return ops.dot_product_attention(query, key, value, scale=scale, flash_attention=None)


def _fast(dtype, training) -> bool:
    return (
        training is True  # a Python bool in Keras steps; a tensor keeps the Keras path
        and _on_tensorflow()
        and dtype in ("bfloat16", "float16", "float32")
    )


def layer_norm(layer, x, *, training):
    """`layer(x)` for a built `keras.layers.LayerNormalization` over the last axis: in
    training on TensorFlow `keras_vit.kernels.tensorflow.layer_norm`, on JAX
    `keras_vit.kernels.jax.layer_norm` (the same values, a hand-written gradient); Keras'
    layer otherwise (inference, other backends, a norm without scale or offset)."""
    last = (-1, [-1], [len(x.shape) - 1])
    if layer.axis not in last or layer.gamma is None or layer.beta is None:
        return layer(x)
    if _fast(layer.compute_dtype, training=training):
        from keras_vit.kernels import tensorflow

        return tensorflow.layer_norm(x, layer.gamma, layer.beta, layer.epsilon)
    if training is True and keras.backend.backend() == "jax":
        from keras_vit.kernels import jax as jax_kernels

        y = jax_kernels.layer_norm(x, layer.gamma.value, layer.beta.value, layer.epsilon)
        return ops.cast(y, layer.compute_dtype)
    return layer(x)


@contextlib.contextmanager
def portable_kernels():
    """Inside this context, models traced for another runtime (ONNX, LiteRT, OpenVINO) get
    kernels every converter takes: the exact GELU as `x / 2 (1 + erf(x / sqrt(2)))` through
    `keras.ops.erf` (TensorFlow's `Erf`), not Keras' `gelu`, which TensorFlow lowers with
    `Erfc`, an op tf2onnx does not convert. The values are the same GELU."""
    _PORTABLE["depth"] += 1
    try:
        yield
    finally:
        _PORTABLE["depth"] -= 1


def gelu(x, approximate, compute_dtype, *, training):
    """`keras.activations.gelu(x, approximate)` (tanh form when `approximate`)."""
    if _PORTABLE["depth"] and not approximate:
        half = ops.cast(0.5, x.dtype)
        return (
            half * x * (ops.cast(1.0, x.dtype) + ops.erf(x * ops.cast(1 / math.sqrt(2), x.dtype)))
        )
    if not _fast(compute_dtype, training=training):
        return keras.activations.gelu(x, approximate=approximate)
    from keras_vit.kernels import tensorflow

    return tensorflow.gelu_tanh(x) if approximate else tensorflow.gelu_erf(x)


def graph_assertions() -> bool:
    """True where the backend checks shapes inside the traced graph (TensorFlow, whose
    relaxed traces see sizes as None); JAX traces with concrete sizes instead."""
    return _on_tensorflow()


def assert_divisible(images, patch_size):
    """`keras_vit.kernels.tf_checks.assert_divisible` (TensorFlow only: `graph_assertions`)."""
    from keras_vit.kernels import tf_checks

    return tf_checks.assert_divisible(images, patch_size)


def assert_image_size(images, image_size, channels):
    """`keras_vit.kernels.tf_checks.assert_image_size` (TensorFlow only: `graph_assertions`)."""
    from keras_vit.kernels import tf_checks

    return tf_checks.assert_image_size(images, image_size, channels)
