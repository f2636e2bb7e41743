"""TensorFlow-only forms of elementwise functions for training (bfloat16, float16 and
float32; they pay where XLA is off, and XLA fuses them as it fuses Keras' forms), the
attention core with a hand-written gradient (float32 training), the heads-major bfloat16
attention (`heads_major_attention`), and the fused AdamW update. `keras_vit.kernels.dispatch`
decides where each runs.

Without XLA, TensorFlow runs each elementwise operation of a function and of its gradient as
its own kernel over the whole tensor; on bfloat16 tensors those kernels, not the products,
take most of a small model's training step on CPUs with bfloat16 matrix units
(docs/performance_log.md). The functions here compute in float32 inside one
`tf.custom_gradient` with a hand-written gradient, and return the input's dtype: fewer and
faster kernels, and float32 accuracy. GELU's forward and gradient are each one XLA-compiled
elementwise loop (a small XLA cluster inside the otherwise uncompiled step: 8.8 -> 2.2 ms for
one Ti/16 MLP's GELU forward and backward at batch 16); LayerNorm stays in TensorFlow's
kernels, whose row reductions measured faster than XLA's on CPU (4.1 vs 6.6 ms).
"""

from __future__ import annotations

import math

import tensorflow as tf
from keras import ops

from keras_vit.kernels import tf_checks

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715  # the tanh approximation's coefficient (Hendrycks & Gimpel 2016)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@tf.function(jit_compile=True)
def _gelu_tanh_forward(x):
    z = tf.cast(x, tf.float32)
    t = tf.tanh(z * (_SQRT_2_OVER_PI + (_SQRT_2_OVER_PI * _CUBIC) * (z * z)))
    return tf.cast(0.5 * z * (1.0 + t), x.dtype)


@tf.function(jit_compile=True)
def _gelu_tanh_backward(x, upstream):
    # d/dz: 0.5 (1 + t) + 0.5 z (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 z^2)
    z = tf.cast(x, tf.float32)
    z2 = z * z
    t = tf.tanh(z * (_SQRT_2_OVER_PI + (_SQRT_2_OVER_PI * _CUBIC) * z2))
    slope = _SQRT_2_OVER_PI + (3.0 * _SQRT_2_OVER_PI * _CUBIC) * z2
    local = (0.5 + 0.5 * t) + 0.5 * z * (1.0 - t * t) * slope
    return tf.cast(tf.cast(upstream, tf.float32) * local, x.dtype)


@tf.function(jit_compile=True)
def _gelu_erf_forward(x):
    z = tf.cast(x, tf.float32)
    return tf.cast(z * (0.5 + 0.5 * tf.math.erf(z * _INV_SQRT_2)), x.dtype)


@tf.function(jit_compile=True)
def _gelu_erf_backward(x, upstream):
    # d/dz: Phi(z) + z phi(z)
    z = tf.cast(x, tf.float32)
    cdf = 0.5 + 0.5 * tf.math.erf(z * _INV_SQRT_2)
    local = cdf + z * (_INV_SQRT_2PI * tf.exp(-0.5 * z * z))
    return tf.cast(tf.cast(upstream, tf.float32) * local, x.dtype)


@tf.custom_gradient
def gelu_tanh(x):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed in float32.

    Forward and gradient are each one XLA-compiled elementwise loop (the gradient recomputes
    the tanh from `x` instead of storing it).

    Args:
        x: a floating tensor of any shape.

    Returns:
        The GELU of `x` (tanh form, as `tf.nn.gelu(x, approximate=True)`), in `x.dtype`.
    """
    return _gelu_tanh_forward(x), lambda upstream: _gelu_tanh_backward(x, upstream)


@tf.custom_gradient
def gelu_erf(x):
    """x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))), computed in float32.

    Forward and gradient are each one XLA-compiled elementwise loop.

    Args:
        x: a floating tensor of any shape.

    Returns:
        The exact GELU of `x` (as `tf.nn.gelu(x, approximate=False)`), in `x.dtype`.
    """
    return _gelu_erf_forward(x), lambda upstream: _gelu_erf_backward(x, upstream)


def layer_norm(x, gamma, beta, epsilon):
    """LayerNorm over the last axis, computed in float32, in `x.dtype`.

    Args:
        x: `(..., features)`; gamma, beta: `(features,)` (float32 variables);
        epsilon: added to the variance.

    Returns:
        `(x - mean) / sqrt(var + epsilon) * gamma + beta`, in `x.dtype`.
    """

    @tf.custom_gradient
    def forward(x, gamma, beta):
        z = tf.cast(x, tf.float32)
        mean = tf.reduce_mean(z, axis=-1, keepdims=True)
        centred = z - mean
        rstd = tf.math.rsqrt(tf.reduce_mean(centred * centred, axis=-1, keepdims=True) + epsilon)
        normed = centred * rstd
        y = normed * gamma + beta

        def grad(upstream):
            dy = tf.cast(upstream, tf.float32)
            rows = tf.reshape(dy, (-1, tf.shape(dy)[-1]))
            d_beta = tf.reduce_sum(rows, axis=0)
            d_gamma = tf.reduce_sum(rows * tf.reshape(normed, tf.shape(rows)), axis=0)
            g = dy * gamma
            dx = rstd * (
                g
                - tf.reduce_mean(g, axis=-1, keepdims=True)
                - normed * tf.reduce_mean(g * normed, axis=-1, keepdims=True)
            )
            return tf.cast(dx, x.dtype), d_gamma, d_beta

        return tf.cast(y, x.dtype), grad

    return forward(x, tf.cast(gamma, tf.float32), tf.cast(beta, tf.float32))


def _heads_major(x):
    """`(batch, tokens, heads, head_dim)` <-> `(batch, heads, tokens, head_dim)`."""
    return tf.transpose(x, (0, 2, 1, 3))


def attention(query, key, value, scale):
    """softmax(q k^T scale) v per head (paper eq. 5-7 of appendix A), with a hand-written
    gradient whose products each take their operands as stored (no transposed left operand):
    dV = P^T dC and dK = dS^T q as products of explicitly transposed P and dS.

    Same result, up to rounding, as `keras.ops.dot_product_attention(query, key, value,
    scale=scale)`; the gradient is the textbook one: dP = dC v^T,
    dS = P (dP - rowsum(dP P)), dq = scale dS k, dk = scale dS^T q, dv = P^T dC.
    Measured on the float32 training step at batch 16 (AMD EPYC Zen 3, 2 cores), in one
    process against Keras' op, alternating (median of per-round ratios; median steps): without
    XLA 1.06x at Ti/16 (two runs; 1299 -> 1226 ms, 1272 -> 1232 ms) and 1.11x at S/16 (3947 ->
    3491 ms); under XLA 0.99x and 1.005x, and 0.93x for the default `keras-vit train` model
    (XLA rewrites both gradients its own way), so `keras_vit.kernels.dispatch` uses it
    without XLA only.

    Args:
        query: `(batch, queries, heads, head_dim)`.
        key, value: `(batch, tokens, heads, head_dim)`.
        scale: Python float multiplying the logits (1 / sqrt(head_dim)).

    Returns:
        `(batch, queries, heads, head_dim)`, in the inputs' dtype.
    """

    @tf.custom_gradient
    def forward(query, key, value):
        q, k, v = _heads_major(query) * scale, _heads_major(key), _heads_major(value)
        probs = tf.nn.softmax(tf.matmul(q, k, transpose_b=True), axis=-1)

        def grad(upstream):
            d_context = _heads_major(upstream)
            d_probs = tf.matmul(d_context, v, transpose_b=True)
            d_logits = probs * (d_probs - tf.reduce_sum(d_probs * probs, -1, keepdims=True))
            d_query = tf.matmul(d_logits, k) * scale
            d_key = tf.matmul(tf.transpose(d_logits, (0, 1, 3, 2)), q)
            d_value = tf.matmul(tf.transpose(probs, (0, 1, 3, 2)), d_context)
            return _heads_major(d_query), _heads_major(d_key), _heads_major(d_value)

        return _heads_major(tf.matmul(probs, v)), grad

    return forward(query, key, value)


def _adamw_apply(variables, momentums, velocities, grads, decays, hyper):
    lr, step, beta_1, beta_2, keep_1, keep_2, epsilon, weight_decay = tf.unstack(hyper)
    alpha = lr * tf.sqrt(1.0 - tf.pow(beta_2, step)) / (1.0 - tf.pow(beta_1, step))
    for var, m, v, grad, decay in zip(variables, momentums, velocities, grads, decays, strict=True):
        grad = tf.cast(grad, var.dtype)
        if decay:
            var.assign_sub(var * weight_decay * lr)
        m.assign_add((grad - m) * keep_1)
        v.assign_add((tf.square(grad) - v) * keep_2)
        var.assign_sub(m * alpha / (tf.sqrt(v) + epsilon))


class AdamWUpdate:
    """Every variable's AdamW update as one XLA-compiled program (one cluster, not ~20
    kernels per variable); one instance per optimizer.

    The same arithmetic, in the same order, as `keras.optimizers.AdamW` on TensorFlow:
    decoupled decay `var -= var * weight_decay * lr` first (where `decays` says), then
    `m += (g - m)(1 - beta_1)`, `v += (g^2 - v)(1 - beta_2)`,
    `var -= m * alpha / (sqrt(v) + epsilon)` with
    `alpha = lr * sqrt(1 - beta_2^step) / (1 - beta_1^step)` (Loshchilov & Hutter 2019,
    with Keras' placement of epsilon).

    A traced `tf.function` keeps weak references to the variables it was traced with and
    refuses to run once they are gone, and its traces are shared by every call whose variables
    have the same shapes; so each optimizer owns its program (a module-wide one failed on the
    second model fitted in a process). This plain holder also keeps the program out of the
    functions a SavedModel export collects from the optimizer's attributes.

    Call with:
        variables, momentums, velocities: equal-length lists of float32 `tf.Variable`s.
        grads: the variables' gradients (cast to float32).
        decays: a tuple of Python bools, one per variable: whether it is decayed.
        hyper: `(8,)` float32 tensor: learning rate, step (1-based), beta_1, beta_2,
            1 - beta_1 and 1 - beta_2 (each rounded once from float64, as Keras does),
            epsilon, weight decay.
    """

    def __init__(self):
        self._program = tf.function(_adamw_apply, jit_compile=True)

    def __call__(self, variables, momentums, velocities, grads, decays, hyper):
        self._program(
            list(variables), list(momentums), list(velocities), list(grads), tuple(decays), hyper
        )


def exact_bfloat16_kernels() -> tuple[bool, bool]:
    """(bfloat16 einsum sums in float32, bfloat16 softmax rounds once like float32's) for
    this TensorFlow build's kernels, measured once per process (`keras_vit.kernels.tf_checks`)."""
    return (
        tf_checks.bfloat16_einsum_accumulates_in_float32(),
        tf_checks.bfloat16_softmax_rounds_like_float32(),
    )


def heads_major_attention(layer, queries, tokens, training, self_attention):
    """A `MultiHeadSelfAttention`'s output under bfloat16 on TensorFlow: every product a 2-D
    or heads-major batched matmul, `(batch, q, hidden_dim)`.

    On TensorFlow without XLA (what `keras_vit.runtime.precision_auto.choose_precision` picks for
    bfloat16 on CPU) the 2-D products run with their bias as one fused oneDNN kernel and
    the batched products need no layout copies inside `einsum`; q, k and v come from one
    product when queries and keys are the same tokens (`self_attention`). The scale
    1/sqrt(head_dim) is folded into the query kernel and bias (exact for head_dim 64: a power
    of two); in training the softmax runs on float32 logits, as its gradient needs. Where
    this TensorFlow build's bfloat16 `einsum` rounds its partial sums or its softmax rounds
    each step (oneDNN off, `keras_vit.kernels.tf_checks`), the token products run as batched
    matmuls and the softmax in float32 in inference too. Same weights and, up to rounding,
    the same result as the EinsumDense path. Attention dropout applies to the probabilities.
    """
    scale = 1.0 / math.sqrt(layer.head_dim)
    if self_attention:
        query, key, value = _project_heads_major(
            layer, tokens, (layer.query, layer.key, layer.value), (scale, 1.0, 1.0)
        )
    else:
        (query,) = _project_heads_major(layer, queries, (layer.query,), (scale,))
        key, value = _project_heads_major(layer, tokens, (layer.key, layer.value), (1.0, 1.0))
    einsum_exact, softmax_exact = exact_bfloat16_kernels()
    if einsum_exact:
        logits = ops.einsum("bnth,bnsh->bnts", query, key)
    else:
        logits = ops.matmul(query, ops.swapaxes(key, -1, -2))
    if training or not softmax_exact:
        probs = ops.cast(ops.softmax(ops.cast(logits, "float32"), axis=-1), layer.compute_dtype)
    else:
        # the bfloat16 kernel already accumulates in float32 and rounds once: same bits
        # as the float32 softmax rounded to bfloat16, without the two casts
        probs = ops.softmax(logits, axis=-1)
    probs = layer.attention_dropout(probs, training=training)
    if einsum_exact:
        context = ops.einsum("bnts,bnsh->btnh", probs, value)
    else:
        context = ops.transpose(ops.matmul(probs, value), (0, 2, 1, 3))
    hidden_dim = layer.num_heads * layer.head_dim
    outputs = ops.matmul(
        ops.reshape(context, (-1, hidden_dim)), ops.reshape(layer.out.kernel, (hidden_dim, -1))
    )
    outputs = ops.add(outputs, layer.out.bias)
    return ops.reshape(outputs, (ops.shape(queries)[0], ops.shape(queries)[1], hidden_dim))


def _project_heads_major(layer, tokens, projections, scales):
    """`tokens` `(batch, t, D)` through the EinsumDense `projections` as one 2-D product:
    a list of `(batch, num_heads, t, head_dim)`, output i multiplied by `scales[i]`."""
    hidden_dim = tokens.shape[-1]
    kernels, biases = [], []
    for projection, scale in zip(projections, scales, strict=True):
        kernel = ops.reshape(projection.kernel, (hidden_dim, -1))
        bias = ops.reshape(projection.bias, (-1,))
        if scale != 1.0:
            kernel = kernel * ops.cast(scale, kernel.dtype)
            bias = bias * ops.cast(scale, bias.dtype)
        kernels.append(kernel)
        biases.append(bias)
    kernel, bias = ops.concatenate(kernels, axis=1), ops.concatenate(biases, axis=0)
    x = ops.add(ops.matmul(ops.reshape(tokens, (-1, hidden_dim)), kernel), bias)
    batch, num_tokens = ops.shape(tokens)[0], ops.shape(tokens)[1]
    x = ops.reshape(x, (batch, num_tokens, len(projections), layer.num_heads, layer.head_dim))
    # unstack, not x[i]: the gradient of a slice is a zero-filled copy per output
    return ops.unstack(ops.transpose(x, (2, 0, 3, 1, 4)), num=len(projections), axis=0)
