"""keras_vit.kernels.tensorflow against the equations in float64 (NumPy), forward and gradient.

The gradients are checked against hand-derived NumPy formulas of the textbook functions,
not against the kernels' own code: GELU's derivative d/dx [x Phi(x)] and the tanh form's
chain rule, and LayerNorm's input, scale and offset gradients (Ba et al. 2016).
"""

import math

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import erf

from keras_vit.kernels import tensorflow as _tf_kernels

C = math.sqrt(2 / math.pi)
DTYPES = {"float32": 1e-5, "bfloat16": 1.6e-2, "float16": 2e-3}  # relative to the largest value


def gelu_tanh_np(x):
    t = np.tanh(C * (x + 0.044715 * x**3))
    return 0.5 * x * (1 + t), 0.5 * (1 + t) + 0.5 * x * (1 - t**2) * C * (1 + 3 * 0.044715 * x**2)


def gelu_erf_np(x):
    cdf = 0.5 * (1 + erf(x / math.sqrt(2)))
    return x * cdf, cdf + x * np.exp(-0.5 * x**2) / math.sqrt(2 * math.pi)


def layer_norm_np(x, gamma, beta, eps, dy):
    """Output and (dx, dgamma, dbeta) of LayerNorm over the last axis for upstream `dy`."""
    mean = x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    g = dy * gamma
    dx = rstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    axes = tuple(range(x.ndim - 1))
    return xhat * gamma + beta, (dx, (dy * xhat).sum(axes), dy.sum(axes))


def close(actual, expected, dtype):
    actual = np.asarray(tf.cast(actual, tf.float64))
    scale = np.abs(expected).max()
    assert scale > 0.1
    np.testing.assert_allclose(actual, expected, atol=DTYPES[dtype] * scale)


def value_and_grad(fn, x, dy, *more):
    with tf.GradientTape() as tape:
        tape.watch([x, *more])
        y = fn(x, *more)
    return y, tape.gradient(y, [x, *more], output_gradients=dy)


shapes = st.lists(st.integers(1, 9), min_size=1, max_size=3).map(tuple)


@settings(max_examples=12, deadline=None)
@given(
    shape=shapes,
    dtype=st.sampled_from(sorted(DTYPES)),
    form=st.sampled_from(["tanh", "erf"]),
    seed=st.integers(0, 2**16),
)
def test_gelu_value_and_gradient_match_the_equations(shape, dtype, form, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 2, shape)
    dy = rng.normal(0, 1, shape)
    x[(0,) * len(shape)], dy[(0,) * len(shape)] = 2.5, 1.0  # a value the checks can scale by
    fn, reference = {
        "tanh": (_tf_kernels.gelu_tanh, gelu_tanh_np),
        "erf": (_tf_kernels.gelu_erf, gelu_erf_np),
    }[form]
    xt, dyt = tf.constant(x, dtype), tf.constant(dy, dtype)
    x_rounded = np.asarray(tf.cast(xt, tf.float64))  # the input as the kernel sees it
    y, (dx,) = value_and_grad(fn, xt, dyt)
    assert y.dtype == dtype and dx.dtype == dtype
    value, slope = reference(x_rounded)
    close(y, value, dtype)
    close(dx, np.asarray(tf.cast(dyt, tf.float64)) * slope, dtype)


@settings(max_examples=10, deadline=None)
@given(
    rows=st.lists(st.integers(1, 5), min_size=1, max_size=2).map(tuple),
    features=st.integers(2, 40),
    dtype=st.sampled_from(sorted(DTYPES)),
    seed=st.integers(0, 2**16),
)
def test_layer_norm_value_and_gradients_match_the_equations(rows, features, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(1.0, 3.0, (*rows, features))
    gamma, beta = rng.normal(1, 0.5, features), rng.normal(0, 0.5, features)
    dy = rng.normal(0, 1, x.shape)
    xt, dyt = tf.constant(x, dtype), tf.constant(dy, dtype)
    g_t, b_t = tf.constant(gamma, tf.float32), tf.constant(beta, tf.float32)

    def fn(x, gamma, beta):
        return _tf_kernels.layer_norm(x, gamma, beta, 1e-6)

    y, (dx, dgamma, dbeta) = value_and_grad(fn, xt, dyt, g_t, b_t)
    assert y.dtype == dtype and dx.dtype == dtype and dgamma.dtype == "float32"
    x64, dy64 = (np.asarray(tf.cast(v, tf.float64)) for v in (xt, dyt))
    value, (ex_dx, ex_dgamma, ex_dbeta) = layer_norm_np(
        x64, g_t.numpy().astype("f8"), b_t.numpy().astype("f8"), 1e-6, dy64
    )
    close(y, value, dtype)
    close(dgamma, ex_dgamma, "float32")
    close(dbeta, ex_dbeta, "float32")
    if features > 2:  # with two features the input gradient is ~0 by symmetry
        close(dx, ex_dx, dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_kernels_run_inside_a_traced_function(dtype):
    """As in a Keras training step: traced once, gradients through `tf.function`."""
    x = tf.constant(np.linspace(-3, 3, 24).reshape(2, 12), dtype)

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = _tf_kernels.gelu_tanh(_tf_kernels.layer_norm(x, tf.ones(12), tf.zeros(12), 1e-6))
            loss = tf.reduce_sum(tf.cast(y, tf.float32) ** 2)
        return tape.gradient(loss, x)

    traced = np.asarray(tf.cast(tf.function(step)(x), tf.float32))
    eager = np.asarray(tf.cast(step(x), tf.float32))
    assert np.abs(eager).max() > 0.1
    np.testing.assert_array_equal(traced, eager)


def attention_np(q, k, v, scale):
    """softmax(q k^T scale) v per head, float64; inputs `(batch, tokens, heads, head_dim)`."""
    logits = np.einsum("bqnh,bknh->bnqk", q, k) * scale
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("bnqk,bknh->bqnh", probs, v)


def finite_difference_gradients(fn, arrays, dy, step=1e-6):
    """d sum(fn(*arrays) * dy) / d each array, by central differences in float64 (no
    gradient formula involved)."""
    grads = []
    for index, array in enumerate(arrays):
        grad = np.zeros_like(array)
        for position in np.ndindex(array.shape):
            shifted = [a.copy() for a in arrays]
            shifted[index][position] += step
            up = (fn(*shifted) * dy).sum()
            shifted[index][position] -= 2 * step
            grad[position] = (up - (fn(*shifted) * dy).sum()) / (2 * step)
        grads.append(grad)
    return grads


@settings(max_examples=8, deadline=None)
@given(
    batch=st.integers(1, 2),
    queries=st.integers(1, 4),
    tokens=st.integers(1, 5),
    heads=st.integers(1, 2),
    head_dim=st.integers(1, 4),
    compiled=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_attention_value_and_gradients_match_the_equations(
    batch, queries, tokens, heads, head_dim, compiled, seed
):
    """Fewer queries than tokens too (the class-token-only last block); gradients against
    finite differences of the NumPy forward, eagerly and in an XLA-compiled function."""
    rng = np.random.default_rng(seed)
    q = rng.normal(0, 1, (batch, queries, heads, head_dim))
    k, v = (rng.normal(0, 1, (batch, tokens, heads, head_dim)) for _ in range(2))
    dy = rng.normal(0, 1, q.shape)
    v[..., 0, 0] = 2.0  # so the output is 2 there whatever the weights: a scale for the checks
    scale = 1 / math.sqrt(head_dim)

    def fn(q, k, v):
        return _tf_kernels.attention(q, k, v, scale)

    def run(q, k, v, dy):
        return value_and_grad(fn, q, dy, k, v)

    run = tf.function(run, jit_compile=True) if compiled else run
    tensors = [tf.constant(a, tf.float32) for a in (q, k, v)]
    q, k, v = (np.asarray(t, np.float64) for t in tensors)  # as the kernel sees them
    y, grads = run(*tensors, tf.constant(dy, tf.float32))
    close(y, attention_np(q, k, v, scale), "float32")
    expected = finite_difference_gradients(lambda *a: attention_np(*a, scale), [q, k, v], dy)
    for name, actual, wanted in zip("qkv", grads, expected, strict=True):
        if np.abs(wanted).max() > 0.1:  # one token: dq and dk are 0 (softmax of one logit)
            close(actual, wanted, "float32")
        else:
            np.testing.assert_allclose(np.asarray(actual), wanted, atol=1e-5, err_msg=name)
