"""MlpBlock against the equations (paper eq. 3) in float32 and under mixed_bfloat16, where
the tokens go through as one 2-D product (the fused oneDNN path)."""

import math

import numpy as np
import pytest

from keras_vit.layers.mlp import MlpBlock


def numpy_mlp(x, w0, b0, w1, b1):
    """Dense -> GELU (tanh approximation, as the release) -> Dense, in float64."""
    h = x @ w0 + b0
    h = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
    return h @ w1 + b1


@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-5), ("mixed_bfloat16", 3e-2)])
def test_mlp_matches_the_equations(dtype, tolerance):
    rng = np.random.default_rng(0)
    layer = MlpBlock(24, dtype=dtype)
    x = rng.normal(size=(3, 5, 8)).astype("float32")
    layer.build(x.shape)
    weights = [rng.normal(0, 0.5, w.shape).astype("float32") for w in layer.get_weights()]
    layer.set_weights(weights)
    out = np.asarray(layer(x), dtype="float64")
    assert out.shape == (3, 5, 8)
    expected = numpy_mlp(x.astype("float64"), *[w.astype("float64") for w in weights])
    assert np.abs(expected).max() > 0.5
    np.testing.assert_allclose(out, expected, atol=tolerance * np.abs(expected).max())
