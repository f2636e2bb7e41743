"""LearnedTokens: DeiT's distillation token (Touvron et al. 2021, section 5) and register
tokens (Darcet et al. 2024) inserted at `insert_at`, against NumPy concatenation."""

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_vit.layers.learned_tokens import LearnedTokens


@settings(max_examples=8, deadline=None)
@given(
    batch=st.integers(1, 3),
    length=st.integers(0, 5),
    width=st.integers(1, 4),
    num_tokens=st.integers(1, 4),
    data=st.data(),
)
def test_tokens_go_in_at_insert_at(batch, length, width, num_tokens, data):
    insert_at = data.draw(st.integers(0, length))
    rng = np.random.default_rng(length * 31 + width)
    x = rng.normal(size=(batch, length, width)).astype("float32")
    layer = LearnedTokens(num_tokens, insert_at, weight_name="reg")
    layer.build(x.shape)
    learned = rng.normal(size=(1, num_tokens, width)).astype("float32")
    layer.tokens.assign(learned)
    expected = np.concatenate(
        [x[:, :insert_at], np.repeat(learned, batch, axis=0), x[:, insert_at:]], axis=1
    )
    out = np.asarray(layer(x))
    np.testing.assert_array_equal(out, expected)
    assert layer.compute_output_shape(x.shape) == expected.shape


def test_weight_name_shape_and_initializer():
    layer = LearnedTokens(3, 1, weight_name="dist")
    layer.build((None, 4, 256))
    assert layer.tokens.path.endswith("/dist")
    assert layer.tokens.shape == (1, 3, 256)
    values = layer.tokens.numpy()
    # TruncatedNormal(stddev=0.02): cut at two standard deviations, not all equal.
    assert np.abs(values).max() <= 0.04 + 1e-7
    assert 0.005 < values.std() < 0.02


def test_unknown_length_gives_an_unknown_length():
    assert LearnedTokens(2).compute_output_shape((None, None, 4)) == (None, None, 4)


def test_config_round_trip_and_keras_file(tmp_path):
    layer = LearnedTokens(2, 1, weight_name="reg", initializer="zeros")
    config = layer.get_config()
    assert (config["num_tokens"], config["insert_at"], config["weight_name"]) == (2, 1, "reg")
    assert LearnedTokens.from_config(config).get_config() == config
    inputs = keras.Input((3, 4))
    model = keras.Model(inputs, LearnedTokens(2, 1, weight_name="reg", name="reg")(inputs))
    tokens = np.arange(8, dtype="float32").reshape(1, 2, 4)
    model.get_layer("reg").tokens.assign(tokens)
    path = str(tmp_path / "tokens.keras")
    model.save(path)
    x = np.ones((2, 3, 4), "float32")
    np.testing.assert_array_equal(keras.saving.load_model(path)(x), model(x))


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"num_tokens": 0}, "num_tokens=0"),
        ({"num_tokens": True}, "num_tokens=True"),
        ({"insert_at": -1}, "insert_at=-1"),
        ({"insert_at": 1.0}, "insert_at=1.0"),
        ({"insert_at": False}, "insert_at=False"),
    ],
)
def test_bad_arguments_are_refused(kwargs, named):
    with pytest.raises(ValueError, match=named):
        LearnedTokens(**kwargs)


@pytest.mark.parametrize(
    "shape, rule",
    [
        ((None, 4), "batch, num_tokens, hidden_dim"),
        ((None, 4, None), "known hidden_dim"),
        ((None, 1, 4), "insert_at=2"),
    ],
)
def test_bad_input_shapes_are_refused(shape, rule):
    with pytest.raises(ValueError, match=rule):
        LearnedTokens(1, 2).build(shape)
