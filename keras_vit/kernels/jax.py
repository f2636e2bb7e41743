"""JAX-only forms for training: LayerNorm with a hand-written gradient (`layer_norm`).
`keras_vit.kernels.dispatch` decides where it runs.

Differentiated by JAX, Keras' LayerNorm (mean, variance, rsqrt, scale and shift as separate
`keras.ops`) leaves a backward pass of a dozen elementwise steps per norm, all feeding the
residual stream's gradient. XLA:CPU (jaxlib 0.10) fuses that chain across the blocks and
recomputes it inside each block's fusion instead of storing it: on the default `keras-vit
train` model (4 blocks, width 64, batch 64) the gradient took ~8x the forward pass. The
gradient written out below, the same three reductions per norm that
`keras_vit.kernels.tensorflow.layer_norm` uses on TensorFlow, gives XLA one small fusion per
norm: that model's gradient at batch 64 ~190 -> ~141 ms CPU (docs/performance.md).
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
