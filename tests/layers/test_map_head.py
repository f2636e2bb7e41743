"""MAPHead against a NumPy forward of big_vision's MAP head (`big_vision/models/vit.py`,
`MAPHead`: probe -> MultiHeadDotProductAttention(probe, x) -> y = LN(x); x + MlpBlock(y) ->
x[:, 0]) with randomised weights, and its config round trip."""

import math

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_vit.layers.map_head import MAPHead


def gelu(h, approximate):
    if approximate:
        return 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
    erf = np.vectorize(math.erf)
    return 0.5 * h * (1 + erf(h / math.sqrt(2)))


def numpy_map_head(tokens, w, num_heads, epsilon, approximate):
    """big_vision's MAP head in float64; `w` maps the big_vision key to its array."""
    batch, _, width = tokens.shape
    head_dim = width // num_heads
    probe = np.broadcast_to(w["probe"], (batch, 1, width))
    att = "MultiHeadDotProductAttention_0/"
    q = np.einsum("btd,dnh->btnh", probe, w[att + "query/kernel"]) + w[att + "query/bias"]
    k = np.einsum("bsd,dnh->bsnh", tokens, w[att + "key/kernel"]) + w[att + "key/bias"]
    v = np.einsum("bsd,dnh->bsnh", tokens, w[att + "value/kernel"]) + w[att + "value/bias"]
    logits = np.einsum("btnh,bsnh->bnts", q / math.sqrt(head_dim), k)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    x = np.einsum("bnts,bsnh->btnh", probs, v)
    x = np.einsum("btnh,nhd->btd", x, w[att + "out/kernel"]) + w[att + "out/bias"]
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + epsilon) * w["LayerNorm_0/gamma"] + w["LayerNorm_0/beta"]
    h = gelu(y @ w["MlpBlock_0/Dense_0/kernel"] + w["MlpBlock_0/Dense_0/bias"], approximate)
    y = h @ w["MlpBlock_0/Dense_1/kernel"] + w["MlpBlock_0/Dense_1/bias"]
    return (x + y)[:, 0]


def randomised(layer, rng):
    """Random weights (the LayerNorm gamma away from 1, biases non-zero), by big_vision key."""
    weights = {}
    for variable in layer.weights:
        key = variable.path.split("/", 1)[1]
        value = rng.normal(0, 0.5, variable.shape).astype("float32")
        variable.assign(value)
        weights[key] = value.astype("float64")
    return weights


@settings(max_examples=6, deadline=None)
@given(
    num_heads=st.sampled_from([1, 2, 4]),
    head_dim=st.integers(1, 4),
    num_tokens=st.integers(2, 6),
    batch=st.integers(1, 3),
    mlp_dim=st.integers(1, 9),
    approximate=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_map_head_matches_big_vision(
    num_heads, head_dim, num_tokens, batch, mlp_dim, approximate, seed
):
    rng = np.random.default_rng(seed)
    width = num_heads * head_dim
    layer = MAPHead(num_heads, mlp_dim, layer_norm_epsilon=1e-5, gelu_approximate=approximate)
    layer.build((None, num_tokens, width))
    weights = randomised(layer, rng)
    assert set(weights) == {
        "probe",
        *(
            f"MultiHeadDotProductAttention_0/{n}/{p}"
            for n in ("query", "key", "value", "out")
            for p in ("kernel", "bias")
        ),
        "LayerNorm_0/gamma",
        "LayerNorm_0/beta",
        *(f"MlpBlock_0/Dense_{i}/{p}" for i in (0, 1) for p in ("kernel", "bias")),
    }
    tokens = rng.normal(size=(batch, num_tokens, width)).astype("float32")
    out = np.asarray(layer(tokens), "float64")
    expected = numpy_map_head(tokens.astype("float64"), weights, num_heads, 1e-5, approximate)
    assert out.shape == (batch, width)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_the_probe_attends_over_every_token():
    """Permuting the tokens leaves the pooled output unchanged (no position in the head), and
    changing any one token changes it."""
    rng = np.random.default_rng(1)
    layer = MAPHead(2, 8)
    layer.build((None, 5, 4))
    randomised(layer, rng)
    tokens = rng.normal(size=(2, 5, 4)).astype("float32")
    out = np.asarray(layer(tokens))
    np.testing.assert_allclose(np.asarray(layer(tokens[:, ::-1])), out, rtol=1e-5, atol=1e-6)
    for i in range(5):
        changed = tokens.copy()
        changed[:, i] += 1.0
        assert not np.allclose(np.asarray(layer(changed)), out, atol=1e-4)


def test_config_round_trip_and_keras_file(tmp_path):
    layer = MAPHead(2, 8, layer_norm_epsilon=1e-5, gelu_approximate=False, name="map")
    config = layer.get_config()
    assert {k: config[k] for k in ("num_heads", "mlp_dim", "layer_norm_epsilon")} == {
        "num_heads": 2,
        "mlp_dim": 8,
        "layer_norm_epsilon": 1e-5,
    }
    assert config["gelu_approximate"] is False
    clone = MAPHead.from_config(config)
    assert clone.get_config() == config
    inputs = keras.Input((5, 4))
    model = keras.Model(inputs, MAPHead(2, 8, name="map")(inputs))
    randomised(model.get_layer("map"), np.random.default_rng(2))
    x = np.random.default_rng(3).normal(size=(2, 5, 4)).astype("float32")
    path = str(tmp_path / "map.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_allclose(reloaded(x), model(x), rtol=1e-6, atol=1e-6)
    assert model.compute_output_shape((2, 5, 4)) == (2, 4)


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"num_heads": 0, "mlp_dim": 8}, "num_heads=0"),
        ({"num_heads": 2, "mlp_dim": 1.5}, "mlp_dim=1.5"),
    ],
)
def test_bad_arguments_are_refused(kwargs, named):
    with pytest.raises(ValueError, match=named):
        MAPHead(**kwargs)


def test_width_not_divisible_by_heads_is_refused():
    with pytest.raises(ValueError, match="hidden_dim=5, num_heads=2"):
        MAPHead(2, 8).build((None, 3, 5))


@pytest.mark.parametrize("approximate", [True, False])
def test_gelu_form_is_the_one_asked_for(approximate):
    """tanh GELU (Flax's `nn.gelu` default) or the exact erf form: the two differ by up to
    ~1e-3 per unit, which a wide MLP with large weights makes visible."""
    rng = np.random.default_rng(4)
    layer = MAPHead(2, 64, gelu_approximate=approximate)
    layer.build((None, 4, 8))
    weights = randomised(layer, rng)
    weights["LayerNorm_0/gamma"] *= 4
    layer.norm.gamma.assign(weights["LayerNorm_0/gamma"].astype("float32"))
    tokens = rng.normal(size=(3, 4, 8)).astype("float32")
    out = np.asarray(layer(tokens), "float64")
    want = numpy_map_head(tokens.astype("float64"), weights, 2, 1e-6, approximate)
    other = numpy_map_head(tokens.astype("float64"), weights, 2, 1e-6, not approximate)
    assert np.abs(want - other).max() > 1e-3
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
