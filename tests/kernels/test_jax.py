"""keras_vit.kernels.jax against the equations in float64 (NumPy), forward and gradient: the
LayerNorm's value and its input, scale and offset gradients (Ba et al. 2016, the
hand-derived formulas of tests/kernels/test_tensorflow.py), and the attention core's value
and gradients (the NumPy forward and its finite differences), not the kernels' own code."""

import numpy as np
import pytest

from tests.kernels.test_tensorflow import attention_np, finite_difference_gradients, layer_norm_np

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from keras_vit.kernels import jax as jax_kernels  # noqa: E402

TOLERANCE = {"float32": 1e-5, "bfloat16": 1.6e-2}  # relative to the largest value


def close(actual, expected, dtype):
    actual = np.asarray(jnp.asarray(actual, jnp.float32), dtype="f8")
    scale = np.abs(expected).max()
    assert scale > 0.1
    np.testing.assert_allclose(actual, expected, atol=TOLERANCE[dtype] * scale)


@jax.jit  # traced and compiled, as in a training step
def value_and_grads(x, gamma, beta, dy):
    y, pullback = jax.vjp(lambda *a: jax_kernels.layer_norm(*a, 1e-6), x, gamma, beta)
    return y, pullback(dy)


@pytest.mark.parametrize(
    "shape, dtype, seed",
    [((3, 7, 16), "float32", 0), ((5, 33), "bfloat16", 1)],
)
def test_layer_norm_value_and_gradients_match_the_equations(shape, dtype, seed):
    *rows, features = shape
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(1.0, 3.0, (*rows, features)), dtype)
    gamma = jnp.asarray(rng.normal(1, 0.5, features), jnp.float32)
    beta = jnp.asarray(rng.normal(0, 0.5, features), jnp.float32)
    dy = jnp.asarray(rng.normal(0, 1, x.shape), dtype)
    y, (dx, dgamma, dbeta) = value_and_grads(x, gamma, beta, dy)
    assert y.dtype == dtype and dx.dtype == dtype and dgamma.dtype == jnp.float32
    x64, dy64 = (np.asarray(jnp.asarray(v, jnp.float32), dtype="f8") for v in (x, dy))
    value, (ex_dx, ex_dgamma, ex_dbeta) = layer_norm_np(
        x64, np.asarray(gamma, "f8"), np.asarray(beta, "f8"), 1e-6, dy64
    )
    close(y, value, dtype)
    close(dx, ex_dx, dtype)
    close(dgamma, ex_dgamma, "float32")
    close(dbeta, ex_dbeta, "float32")


@jax.jit
def attention_and_grads(q, k, v, dy):
    y, pullback = jax.vjp(lambda *a: jax_kernels.attention(*a, 0.5), q, k, v)
    return y, pullback(dy)


@pytest.mark.parametrize("queries, tokens", [(3, 3), (1, 4)])
def test_attention_value_and_gradients_match_the_equations(queries, tokens):
    """Fewer queries than tokens too (the class-token-only last block); 2 heads of 4, so
    the scale is 1 / sqrt(4)."""
    rng = np.random.default_rng(queries)
    q = rng.normal(0, 1, (2, queries, 2, 4))
    k, v = (rng.normal(0, 1, (2, tokens, 2, 4)) for _ in range(2))
    dy = rng.normal(0, 1, q.shape)
    v[..., 0, 0] = 2.0  # so the output is 2 there whatever the weights: a scale for the checks
    arrays = [jnp.asarray(a, jnp.float32) for a in (q, k, v)]
    q, k, v = (np.asarray(a, "f8") for a in arrays)  # as the kernel sees them
    y, grads = attention_and_grads(*arrays, jnp.asarray(dy, jnp.float32))
    close(y, attention_np(q, k, v, 0.5), "float32")
    expected = finite_difference_gradients(lambda *a: attention_np(*a, 0.5), [q, k, v], dy)
    for actual, wanted in zip(grads, expected, strict=True):
        close(actual, wanted, "float32")
