"""keras_vit.kernels.jax against the equations in float64 (NumPy), forward and gradient: the
LayerNorm's value and its input, scale and offset gradients (Ba et al. 2016), the
hand-derived formulas of tests/kernels/test_tensorflow.py, not the kernel's own code."""

import numpy as np
import pytest

from tests.kernels.test_tensorflow import layer_norm_np

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
