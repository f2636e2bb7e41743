import keras
import numpy as np
import pytest

from keras_vit.layers import AddPositionEmbs


def test_adds_table_row_per_token():
    layer = AddPositionEmbs()
    layer.build((None, 5, 4))
    table = np.arange(20, dtype=np.float32).reshape(1, 5, 4)
    layer.pos_embedding.assign(table)
    tokens = np.ones((2, 5, 4), np.float32)
    np.testing.assert_array_equal(np.asarray(layer(tokens)), tokens + table)


def test_initialiser_is_normal_with_stddev_0_02():
    layer = AddPositionEmbs()
    layer.build((None, 400, 64))
    std = float(np.std(np.asarray(layer.pos_embedding)))
    assert 0.018 < std < 0.022


def test_b11_float16_input_under_mixed_float16():
    """B11: float32 table + float16 activations -> float16 output, no AddV2 dtype error."""
    layer = AddPositionEmbs(dtype="mixed_float16")
    out = layer(keras.ops.ones((2, 17, 32), dtype="float16"))
    assert out.dtype == "float16"
    assert layer.pos_embedding.dtype == "float32"


def test_rejects_other_sequence_length():
    layer = AddPositionEmbs()
    layer(np.zeros((1, 5, 4), np.float32))
    with pytest.raises(ValueError, match="holds 5 positions but received 7 tokens"):
        layer(np.zeros((1, 7, 4), np.float32))
