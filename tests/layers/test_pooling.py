import numpy as np
import pytest

from keras_vit.layers import TokenPooling


def test_token_takes_position_zero_and_gap_averages():
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(TokenPooling("token")(x)), x[:, 0])
    np.testing.assert_allclose(np.asarray(TokenPooling("gap")(x)), x.mean(1), atol=1e-6)


def test_rejects_unknown_mode():
    with pytest.raises(ValueError, match=r"pooling.*'max'"):
        TokenPooling("max")
