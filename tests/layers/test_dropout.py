"""Stochastic depth and dropout at the set rate in every dtype policy (binomial test at 5
standard errors; the JAX and PyTorch lanes run the same helper under their backend), and
keras_vit's `Dropout` against Keras' own in float32."""

import keras
import numpy as np
import pytest

from keras_vit.layers import Dropout, TransformerBlock
from keras_vit.layers.dropout import drop_path
from tests.helpers import dropout_rates


@pytest.mark.parametrize("policy", dropout_rates.POLICIES)
def test_every_layer_drops_at_the_set_rate(policy):
    rates = dropout_rates.observed_rates(policy)
    assert rates["compute_dtype"] == keras.DTypePolicy(policy).compute_dtype
    assert dropout_rates.binomial_misses(rates) == {}


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_kept_entries_are_scaled_by_one_over_keep(policy):
    layer = Dropout(0.25, seed=3, dtype=policy)
    out = keras.ops.convert_to_numpy(
        keras.ops.cast(layer(np.ones((4000,), "float32"), training=True), "float32")
    )
    kept = out[out != 0]
    # 1 / 0.75 in the compute dtype: exact in float32, within bfloat16's 2**-8 spacing
    assert np.allclose(kept, 1 / 0.75, rtol=2**-8 if policy != "float32" else 1e-6)
    assert 0.2 < 1 - kept.size / out.size < 0.3


def test_noise_shape_broadcasts_one_draw_and_inference_is_the_identity():
    x = np.random.default_rng(0).standard_normal((64, 5, 3)).astype("float32")
    layer = Dropout(0.5, noise_shape=(None, 1, 3), seed=1)
    out = keras.ops.convert_to_numpy(layer(x, training=True))
    dropped = out == 0
    assert dropped.any() and not dropped.all()
    assert (dropped == dropped[:, :1, :]).all()  # one draw per (sample, channel)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(x, training=False)), x)


def test_drop_path_zeroes_whole_samples():
    x = np.random.default_rng(1).standard_normal((256, 4, 2)).astype("float32")
    out = keras.ops.convert_to_numpy(drop_path(x, 0.5, keras.random.SeedGenerator(2)))
    zeroed = (out == 0).all(axis=(1, 2))
    assert 0 < zeroed.sum() < 256
    np.testing.assert_allclose(out[~zeroed], x[~zeroed] * 2, rtol=1e-6)


def test_the_layers_round_trip_and_the_block_uses_them():
    layer = Dropout(0.3, noise_shape=(None, 1), seed=7, name="d")
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(again) is Dropout
    assert again.get_config() == layer.get_config()
    block = TransformerBlock(num_heads=2, mlp_dim=8, dropout_rate=0.1, attention_dropout_rate=0.1)
    block.build((None, 3, 4))
    for sublayer in (block.dropout, block.mlp.dropout, block.attention.attention_dropout):
        assert type(sublayer) is Dropout
