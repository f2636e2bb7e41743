"""DINOv3's rotary position embedding (keras_vit/layers/rotary.py) and the attention that
applies it, against the NumPy equations of tests/numpy_family_reference.py (`rope_angles`,
`rope_attention`), which share no code with keras_vit."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_vit.layers import MultiHeadSelfAttention
from keras_vit.layers.rotary import check_rope, rope_periods, rope_sin_cos, rotate_tokens
from tests.numpy_family_reference import rope_angles, rope_attention

D, HEADS = 16, 2


@pytest.mark.parametrize("grid", [(1, 1), (2, 3), (5, 2)])
@pytest.mark.parametrize("head_dim", [4, 8, 64])
def test_sin_cos_tables_are_the_dinov3_angles(grid, head_dim):
    sin, cos = rope_sin_cos(*grid, head_dim)
    angles = rope_angles(*grid, head_dim)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(sin), np.sin(angles), atol=2e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(cos), np.cos(angles), atol=2e-6)


def test_periods_grow_from_one_to_below_the_base():
    periods = rope_periods(8, 100.0)
    np.testing.assert_allclose(periods, [1.0, 10.0], rtol=1e-6)  # 100 ** (2k / 4), k = 0, 1


def test_prefix_tokens_are_not_rotated_and_rotation_keeps_norms():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3 + 6, HEADS, 8)).astype("float32")
    sin, cos = rope_sin_cos(2, 3, 8)
    out = keras.ops.convert_to_numpy(rotate_tokens(keras.ops.convert_to_tensor(x), sin, cos, 3))
    np.testing.assert_array_equal(out[:, :3], x[:, :3])
    assert np.abs(out[:, 3:] - x[:, 3:]).max() > 1e-2
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)


def _attention(grid, prefix, qkv_bias="qkv", seed=0, **rope):
    layer = MultiHeadSelfAttention(
        HEADS,
        qkv_bias=qkv_bias,
        rope={"num_prefix_tokens": prefix, "grid_size": grid, **rope},
    )
    tokens = prefix + grid[0] * grid[1]
    layer.build((None, tokens, D))
    rng = np.random.default_rng(seed)
    for variable in layer.weights:
        variable.assign(rng.normal(0, 0.3, variable.shape).astype("float32"))
    return layer


def _numpy_params(layer):
    params = {}
    for name in ("query", "key", "value", "out"):
        sub = getattr(layer, name)
        params[name + "/kernel"] = keras.ops.convert_to_numpy(sub.kernel)
        if sub.bias is not None:
            params[name + "/bias"] = keras.ops.convert_to_numpy(sub.bias)
    return params


@pytest.mark.parametrize("qkv_bias", ["qkv", "qv", "none"])
@pytest.mark.parametrize("grid,prefix", [((2, 3), 1), ((3, 2), 5), ((2, 2), 0)])
def test_attention_with_rope_matches_the_numpy_equations(grid, prefix, qkv_bias):
    layer = _attention(grid, prefix, qkv_bias)
    x = np.random.default_rng(1).normal(size=(2, prefix + grid[0] * grid[1], D))
    got = keras.ops.convert_to_numpy(layer(x.astype("float32")))
    want = rope_attention(x, _numpy_params(layer), "", HEADS, grid, prefix)
    np.testing.assert_allclose(got, want, atol=2e-5)
    probs = keras.ops.convert_to_numpy(layer.attention_probabilities(x.astype("float32")))
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    assert [b in qkv_bias for b in "qkv"] == [
        getattr(layer, n).bias is not None for n in ("query", "key", "value")
    ]


def test_class_token_queries_equal_the_full_attention_rows():
    layer = _attention((2, 3), 2)
    x = np.random.default_rng(2).normal(size=(2, 8, D)).astype("float32")
    full = keras.ops.convert_to_numpy(layer(x))
    first = keras.ops.convert_to_numpy(layer(x, num_queries=1))
    np.testing.assert_allclose(first, full[:, :1], atol=1e-5)


def test_dynamic_grid_comes_from_the_images():
    layer = _attention((2, 2), 1, patch_size=(4, 4))
    x = np.random.default_rng(3).normal(size=(1, 1 + 3 * 5, D)).astype("float32")
    images = np.zeros((1, 12, 20, 3), "float32")
    got = keras.ops.convert_to_numpy(layer(x, images=images))
    want = rope_attention(x.astype(np.float64), _numpy_params(layer), "", HEADS, (3, 5), 1)
    np.testing.assert_allclose(got, want, atol=2e-5)


def test_a_token_count_off_the_fixed_grid_is_refused():
    layer = _attention((2, 3), 1)
    with pytest.raises(ValueError, match="rotates a 2x3 patch grid after 1 prefix"):
        layer(np.zeros((1, 9, D), "float32"))


def test_get_config_round_trip_keeps_rope_and_bias():
    layer = _attention((2, 3), 5, "qv", patch_size=16)
    config = layer.get_config()
    assert config["rope"] == {
        "num_prefix_tokens": 5,
        "grid_size": [2, 3],
        "patch_size": [16, 16],
        "temperature": 100.0,
    }
    clone = MultiHeadSelfAttention.from_config(config)
    assert clone.rope == layer.rope and clone.qkv_bias == "qv"


@pytest.mark.parametrize(
    "rope,message",
    [
        ("yes", "must be None or a dict"),
        ({"grid_size": 2, "base": 10}, "unknown keys"),
        ({"num_prefix_tokens": 1}, "needs a grid_size"),
        ({"grid_size": 2, "num_prefix_tokens": -1}, "must be >= 0"),
        ({"grid_size": 2, "temperature": 0}, "finite number > 0"),
    ],
)
def test_bad_rope_configs_are_refused_by_name(rope, message):
    with pytest.raises(ValueError, match=message):
        check_rope(rope)


def test_head_width_not_divisible_by_four_is_refused():
    layer = MultiHeadSelfAttention(2, rope={"grid_size": 2})
    with pytest.raises(ValueError, match="head_dim=3"):
        layer.build((None, 4, 6))


def test_unknown_qkv_bias_is_refused():
    with pytest.raises(ValueError, match="qkv_bias"):
        MultiHeadSelfAttention(2, qkv_bias="k")
