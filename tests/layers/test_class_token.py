import keras
import numpy as np
import pytest

from keras_vit.layers import ClassToken


def test_prepends_zero_initialised_token():
    layer = ClassToken()
    tokens = np.random.default_rng(0).standard_normal((3, 5, 8)).astype(np.float32)
    out = np.asarray(layer(tokens))
    assert out.shape == (3, 6, 8)
    assert tuple(layer.cls.shape) == (1, 1, 8)
    np.testing.assert_array_equal(out[:, 0], 0.0)
    np.testing.assert_array_equal(out[:, 1:], tokens)


def test_learned_token_is_broadcast_over_batch():
    layer = ClassToken()
    layer.build((None, 4, 2))
    layer.cls.assign(np.array([[[1.5, -2.0]]], np.float32))
    out = np.asarray(layer(np.zeros((2, 4, 2), np.float32)))
    np.testing.assert_array_equal(out[:, 0], [[1.5, -2.0], [1.5, -2.0]])


def test_b10_concat_under_mixed_float16():
    """B10: the float32 token meets float16 patches; no ConcatV2 dtype clash."""
    layer = ClassToken(dtype="mixed_float16")
    out = layer(keras.ops.ones((2, 4, 8), dtype="float16"))
    assert out.dtype == "float16"
    assert layer.cls.dtype == "float32"


def test_rejects_rank_2_input():
    with pytest.raises(ValueError, match="num_tokens, hidden_dim"):
        ClassToken()(np.zeros((2, 8), np.float32))
