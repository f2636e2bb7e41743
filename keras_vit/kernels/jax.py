"""JAX-only forms for training, each with a hand-written gradient: LayerNorm (`layer_norm`)
and the attention core (`attention`). `keras_vit.kernels.dispatch` decides where they run.

Differentiated by JAX, Keras' LayerNorm (mean, variance, rsqrt, scale and shift as separate
`keras.ops`) leaves a backward pass of a dozen elementwise steps per norm, all feeding the
residual stream's gradient. XLA:CPU (jaxlib 0.10) fuses that chain across the blocks and
recomputes it inside each block's fusion instead of storing it: on the default `keras-vit
train` model (4 blocks, width 64, batch 64) that gradient takes ~8x the forward pass. The
gradient written out here, the same three reductions per norm that
`keras_vit.kernels.tensorflow.layer_norm` uses on TensorFlow, gives XLA one small fusion per
norm. JAX's gradient of its `dot_product_attention` (token-major einsums, softmax) takes
batched products XLA:CPU runs outside its fast library and layout copies; the hand-written
one is five heads-major products. The training step of that model, A/B in one process on a
2-core AMD EPYC: 190 ms CPU with JAX's gradients, 158 with this LayerNorm, 129 with both
(TensorFlow's XLA step: 90; docs/performance.md).
"""

from __future__ import annotations

import functools


def layer_norm(x, gamma, beta, epsilon):
    """LayerNorm over the last axis (Ba et al. 2016), computed in float32, in `x.dtype`, with
    a hand-written gradient.

    Args:
        x: `(..., features)`, any floating dtype; gamma, beta: `(features,)` (float32
            variables); epsilon: added to the variance (a Python float).

    Returns:
        `(x - mean) / sqrt(var + epsilon) * gamma + beta`, in `x.dtype`. The gradients are
        those of this formula: `dx = rstd (g - mean(g) - xhat mean(g xhat))` with
        `g = dy gamma`, `dgamma = sum(dy xhat)`, `dbeta = sum(dy)` over all but the last axis,
        each in its input's dtype.
    """
    import jax.numpy as jnp

    f32 = jnp.float32
    y = _float32_layer_norm()(x.astype(f32), gamma.astype(f32), beta.astype(f32), float(epsilon))
    return y.astype(x.dtype)


@functools.cache
def _float32_layer_norm():
    """The float32 LayerNorm `(x, gamma, beta, epsilon)` as a `jax.custom_vjp` (built at the
    first call: importing this module does not import JAX)."""
    import jax

    def forward(x, gamma, beta, epsilon):
        centred = x - x.mean(axis=-1, keepdims=True)
        rstd = jax.lax.rsqrt((centred * centred).mean(axis=-1, keepdims=True) + epsilon)
        normed = centred * rstd
        return normed * gamma + beta, (normed, rstd, gamma)

    def backward(epsilon, residuals, dy):
        normed, rstd, gamma = residuals
        features = dy.shape[-1]
        rows = dy.reshape(-1, features)
        g = dy * gamma
        dx = rstd * (
            g - g.mean(axis=-1, keepdims=True) - normed * (g * normed).mean(axis=-1, keepdims=True)
        )
        return dx, (rows * normed.reshape(-1, features)).sum(axis=0), rows.sum(axis=0)

    norm = jax.custom_vjp(
        lambda x, gamma, beta, epsilon: forward(x, gamma, beta, epsilon)[0], nondiff_argnums=(3,)
    )
    norm.defvjp(forward, backward)
    return norm


def attention(query, key, value, scale):
    """softmax(q k^T scale) v per head (appendix A, eqs. 5-7), with a hand-written gradient.

    Args:
        query: `(batch, q, heads, head_dim)`; key, value: `(batch, t, heads, head_dim)`
            (float32); scale: a Python float (1 / sqrt(head_dim)).

    Returns:
        `(batch, q, heads, head_dim)`. The gradient stores the attention weights `p` and
        computes `dv = p^T do`, `ds = p (do v^T - rowsum(p do v^T)) scale`, `dq = ds k`,
        `dk = ds^T q`, heads-major: five batched products, where JAX's own gradient of the
        einsum-softmax-einsum takes more products and layout copies.
    """
    import jax.numpy as jnp

    def heads_major(x):
        return jnp.swapaxes(x, 1, 2)

    context = _attention_core()(heads_major(query), heads_major(key), heads_major(value), scale)
    return heads_major(context)


@functools.cache
def _attention_core():
    """The heads-major core `(q, k, v, scale)` as a `jax.custom_vjp` (built at first call)."""
    import jax
    import jax.numpy as jnp

    def forward(q, k, v, scale):
        weights = jax.nn.softmax(jnp.einsum("bhqd,bhkd->bhqk", q, k) * scale, axis=-1)
        return jnp.einsum("bhqk,bhkd->bhqd", weights, v), (q, k, v, weights)

    def backward(scale, residuals, d_context):
        q, k, v, weights = residuals
        d_value = jnp.einsum("bhqk,bhqd->bhkd", weights, d_context)
        d_weights = jnp.einsum("bhqd,bhkd->bhqk", d_context, v)
        rows = jnp.sum(d_weights * weights, axis=-1, keepdims=True)
        d_logits = weights * (d_weights - rows) * scale
        d_query = jnp.einsum("bhqk,bhkd->bhqd", d_logits, k)
        d_key = jnp.einsum("bhqk,bhqd->bhkd", d_logits, q)
        return d_query, d_key, d_value

    core = jax.custom_vjp(lambda q, k, v, scale: forward(q, k, v, scale)[0], nondiff_argnums=(3,))
    core.defvjp(forward, backward)
    return core
