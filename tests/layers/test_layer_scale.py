"""LayerScale (CaiT, Touvron et al. 2021, section 2): output = gamma * x per channel, gamma
initialised to `init_value`; config round trip; bad init values refused."""

import re

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_vit.layers.layer_scale import LayerScale, check_layer_scale_init


@settings(max_examples=8, deadline=None)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    init_value=st.floats(1e-6, 10.0),
    seed=st.integers(0, 2**16),
)
def test_output_is_gamma_times_x(shape, init_value, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype("float32")
    layer = LayerScale(init_value)
    layer.build(x.shape)
    np.testing.assert_array_equal(layer.scale.numpy(), np.full(shape[-1], init_value, "float32"))
    np.testing.assert_allclose(layer(x), x * np.float32(init_value), rtol=1e-6)
    gamma = rng.normal(size=shape[-1]).astype("float32")
    layer.scale.assign(gamma)
    np.testing.assert_allclose(layer(x), x * gamma, rtol=1e-6)


def test_the_scale_is_float32_and_the_output_keeps_the_input_dtype():
    layer = LayerScale(0.5, dtype="mixed_bfloat16")
    x = np.arange(6, dtype="float32").reshape(2, 3)
    out = layer(keras.ops.cast(x, "bfloat16"))
    assert layer.scale.dtype == "float32"
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(keras.ops.cast(out, "float32")), x / 2)


def test_config_round_trip_and_keras_file(tmp_path):
    layer = LayerScale(1e-4, name="ls")
    config = layer.get_config()
    assert config["init_value"] == 1e-4
    assert LayerScale.from_config(config).get_config() == config
    inputs = keras.Input((3, 4))
    model = keras.Model(inputs, LayerScale(1e-4, name="ls")(inputs))
    model.get_layer("ls").scale.assign(np.array([1.0, -2.0, 3.0, 0.5], "float32"))
    path = str(tmp_path / "ls.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(reloaded.get_layer("ls").scale.numpy(), [1.0, -2.0, 3.0, 0.5])
    assert reloaded.get_layer("ls").init_value == 1e-4


@pytest.mark.parametrize("value", [0, 0.0, -1e-5, True, "1e-5", None, float("nan"), float("inf")])
def test_bad_init_is_refused(value):
    with pytest.raises(
        ValueError, match=r"positive number.*layer_scale_init=" + re.escape(repr(value))
    ):
        LayerScale(value)
    with pytest.raises(ValueError, match="layer_scale_init"):
        check_layer_scale_init(value)


def test_good_init_is_a_float():
    assert check_layer_scale_init(1) == 1.0 and isinstance(check_layer_scale_init(1), float)


def test_unknown_last_axis_is_refused():
    with pytest.raises(ValueError, match="known last axis"):
        LayerScale().build((None, 3, None))
