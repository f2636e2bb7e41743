"""attention_maps and feature_extractor against a NumPy forward pass from the paper's equations.

The reference (written here on top of tests/numpy_reference.py) runs the whole ViT in NumPy
from official-key parameters that were put into the Keras model by explicit layer access,
and records, per block, softmax(q k^T / sqrt(head_dim)) with q, k computed from the block's
own LayerNorm_0 and query/key weights (paper eqs. 2-3, appendix A eqs. 5-8).
"""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.visualize import attention_rollout, feature_extractor, token_grid
from tests.model_helpers import assign_official_params, random_images
from tests.numpy_reference import (
    gelu,
    layer_norm,
    patchify,
    random_official_params,
    self_attention,
    softmax,
)

EPS = 1e-6
TINY = dict(patch_size=8, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2, num_classes=10)


def numpy_encoder(params, images, num_heads, pooling):
    """Per-block attention maps, per-block outputs and the pooled feature, in float64."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    kernel = p["embedding/kernel"]
    patch, d = kernel.shape[0], kernel.shape[-1]
    x = patchify(np.asarray(images, np.float64), patch) @ kernel.reshape(-1, d)
    x = x + p["embedding/bias"]
    if pooling == "token":
        x = np.concatenate([np.broadcast_to(p["cls"], (len(x), 1, d)), x], axis=1)
    x = x + p["Transformer/posembed_input/pos_embedding"]
    maps, outputs = [], []
    i = 0
    while f"Transformer/encoderblock_{i}/LayerNorm_0/scale" in p:
        b = f"Transformer/encoderblock_{i}/"
        a = b + "MultiHeadDotProductAttention_1/"
        y = layer_norm(x, p[b + "LayerNorm_0/scale"], p[b + "LayerNorm_0/bias"], EPS)
        q = np.einsum("btd,dnh->bnth", y, p[a + "query/kernel"]) + p[a + "query/bias"][:, None]
        k = np.einsum("btd,dnh->bnth", y, p[a + "key/kernel"]) + p[a + "key/bias"][:, None]
        maps.append(softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])))
        x = x + self_attention(y, p, a, num_heads)
        y = layer_norm(x, p[b + "LayerNorm_2/scale"], p[b + "LayerNorm_2/bias"], EPS)
        m = b + "MlpBlock_3/"
        h = gelu(y @ p[m + "Dense_0/kernel"] + p[m + "Dense_0/bias"], True)
        x = x + h @ p[m + "Dense_1/kernel"] + p[m + "Dense_1/bias"]
        outputs.append(x)
        i += 1
    final = layer_norm(
        x, p["Transformer/encoder_norm/scale"], p["Transformer/encoder_norm/bias"], EPS
    )
    pooled = final[:, 0] if pooling == "token" else final.mean(axis=1)
    return maps, outputs, pooled


def tiny_model_and_params(image_size, pooling, seed=0):
    """A tiny ViT with random official-layout weights (also for non-square sizes)."""
    rng = np.random.default_rng(seed)
    params = random_official_params(
        rng, image_size=32, channels=3, pooling=pooling, scale=0.3, **TINY
    )
    grid = (image_size[0] // 8) * (image_size[1] // 8) + (pooling == "token")
    params["Transformer/posembed_input/pos_embedding"] = (
        rng.standard_normal((1, grid, 32)).astype(np.float32) * 0.3
    )
    model = keras_vit.ViT(image_size=image_size, pooling=pooling, **TINY)
    assign_official_params(model, params)
    return model, params


CASES = [((32, 32), "token"), ((32, 48), "token"), ((32, 48), "gap")]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0][0]}x{c[0][1]}-{c[1]}")
def case(request):
    size, pooling = request.param
    model, params = tiny_model_and_params(size, pooling)
    images = random_images(np.random.default_rng(1), 3, *size)
    return size, pooling, model, params, images


def test_maps_match_numpy_softmax_qk_from_the_layer_weights(case):
    size, pooling, model, params, images = case
    maps = keras_vit.attention_maps(model, images, batch_size=2)
    expected, _, _ = numpy_encoder(params, images, 4, pooling)
    assert len(maps) == 2
    for got, want in zip(maps, expected, strict=True):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, atol=1e-5)
        # the comparison is meaningful: the attention is far from uniform
        assert np.abs(want - 1 / want.shape[-1]).max() > 0.05


def test_shapes_and_rows_sum_to_one(case):
    size, pooling, model, _, images = case
    patches = (size[0] // 8) * (size[1] // 8)
    tokens = patches + 1 if pooling == "token" else patches
    maps = keras_vit.attention_maps(model, images)
    for layer in maps:
        assert layer.shape == (3, 4, tokens, tokens)
        np.testing.assert_allclose(layer.sum(axis=-1), 1.0, atol=1e-5)
    rollout = attention_rollout(maps, model)
    assert rollout.shape == (3, size[0] // 8, size[1] // 8)


def test_token_grid_is_read_from_the_model(case):
    size, pooling, model, _, _ = case
    grid = token_grid(model)
    assert grid.grid == (size[0] // 8, size[1] // 8)
    assert grid.patch_size == (8, 8)
    assert grid.num_prefix_tokens == (1 if pooling == "token" else 0)


def wrap(vit, image_size):
    """As after fine-tuning with extra layers: [0, 255] input -> rescale -> ViT -> new dense."""
    inputs = keras.Input((*image_size, 3), name="raw")
    x = keras.layers.Rescaling(1 / 127.5, offset=-1.0, name="to_unit_range")(inputs)
    x = vit(x)
    outputs = keras.layers.Dense(3, name="new_head")(keras.layers.Dropout(0.1)(x))
    return keras.Model(inputs, outputs, name="finetuned")


def test_vit_wrapped_inside_another_model(tmp_path):
    vit, params = tiny_model_and_params((32, 48), "token")
    outer = wrap(vit, (32, 48))
    raw = np.random.default_rng(2).uniform(0, 255, (2, 32, 48, 3)).astype(np.float32)
    expected, _, _ = numpy_encoder(params, raw / 127.5 - 1.0, 4, "token")
    maps = keras_vit.attention_maps(outer, raw)
    for got, want in zip(maps, expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert attention_rollout(maps, outer).shape == (2, 4, 6)
    # the same after a .keras round trip of the wrapped model
    path = tmp_path / "finetuned.keras"
    outer.save(path)
    reloaded = keras.saving.load_model(path)
    for got, want in zip(keras_vit.attention_maps(reloaded, raw), expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_vit_inside_a_sequential_model():
    vit, params = tiny_model_and_params((32, 32), "gap")
    outer = keras.Sequential([keras.Input((32, 32, 3)), vit, keras.layers.Dense(3)])
    images = random_images(np.random.default_rng(3), 2, 32, 32)
    expected, _, _ = numpy_encoder(params, images, 4, "gap")
    for got, want in zip(keras_vit.attention_maps(outer, images), expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_model_is_left_unchanged():
    vit, _ = tiny_model_and_params((32, 32), "token")
    images = random_images(np.random.default_rng(4), 2, 32, 32)
    before_config = vit.get_config()
    before_weights = [w.path for w in vit.weights]
    before_values = [w.numpy().copy() for w in vit.weights]
    before_out = keras.ops.convert_to_numpy(vit(images))
    keras_vit.attention_maps(vit, images)
    feature_extractor(vit)
    assert vit.get_config() == before_config
    assert [w.path for w in vit.weights] == before_weights
    for w, value in zip(vit.weights, before_values, strict=True):
        np.testing.assert_array_equal(w.numpy(), value)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(vit(images)), before_out)


def test_hybrid_maps_match_numpy_from_the_embedding_output():
    """Hybrid (ResNet root + ViT): grid read from the feature map, maps from the block weights."""
    if not hasattr(keras_vit, "HybridViT"):
        pytest.skip("keras_vit.HybridViT not available")
    model = keras_vit.HybridViT(
        resnet_stages=(),
        resnet_width=8,
        resnet_groups=4,
        patch_size=4,  # on the stride-4 root feature map (8, 12) -> grid (2, 3), 16 px each
        image_size=(32, 48),
        hidden_dim=32,
        num_heads=4,
        mlp_dim=64,
        num_layers=2,
        num_classes=10,
    )
    grid = token_grid(model)
    assert grid.grid == (2, 3) and grid.patch_size == (16, 16) and grid.num_prefix_tokens == 1
    images = random_images(np.random.default_rng(5), 2, 32, 48)
    maps = keras_vit.attention_maps(model, images)
    assert [m.shape for m in maps] == [(2, 4, 7, 7)] * 2
    # Block 0 in NumPy from the embedding's output and the model's own weights.
    embed = keras.Model(model.inputs[0], model.get_layer("embedding").output)
    tokens = keras.ops.convert_to_numpy(embed(images)).astype(np.float64)
    cls = model.get_layer("cls").cls.numpy()
    x = np.concatenate([np.broadcast_to(cls, (2, 1, 32)), tokens], axis=1)
    x = x + model.get_layer("posembed_input").pos_embedding.numpy()
    block = model.get_layer("encoderblock_0")
    y = layer_norm(x, block.norm_0.gamma.numpy(), block.norm_0.beta.numpy(), EPS)
    att = block.attention
    q = np.einsum("btd,dnh->bnth", y, att.query.kernel.numpy()) + att.query.bias.numpy()[:, None]
    k = np.einsum("btd,dnh->bnth", y, att.key.kernel.numpy()) + att.key.bias.numpy()[:, None]
    np.testing.assert_allclose(
        maps[0], softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(8)), atol=1e-5
    )
    assert attention_rollout(maps, model).shape == (2, 2, 3)


def test_feature_extractor_matches_numpy_block_outputs_and_pooled_feature():
    vit, params = tiny_model_and_params((32, 48), "token")
    outer = wrap(vit, (32, 48))
    raw = np.random.default_rng(6).uniform(0, 255, (2, 32, 48, 3)).astype(np.float32)
    _, outputs, pooled = numpy_encoder(params, raw / 127.5 - 1.0, 4, "token")
    extractor = feature_extractor(outer, layers=[0, "encoderblock_1"])
    assert isinstance(extractor, keras.Model)
    features = {k: keras.ops.convert_to_numpy(v) for k, v in extractor(raw).items()}
    assert sorted(features) == ["encoderblock_0", "encoderblock_1", "pooled"]
    np.testing.assert_allclose(features["encoderblock_0"], outputs[0], atol=1e-4)
    np.testing.assert_allclose(features["encoderblock_1"], outputs[1], atol=1e-4)
    np.testing.assert_allclose(features["pooled"], pooled, atol=1e-4)
    last = feature_extractor(vit, layers=-1)
    assert sorted(last.output) == ["encoderblock_1", "pooled"]


@pytest.mark.parametrize("layers", [2, -3, "encoderblock_7", [0, 1.5], True])
def test_feature_extractor_rejects_unknown_layers(layers):
    vit = keras_vit.ViT(image_size=32, **TINY)
    with pytest.raises(ValueError, match="layers"):
        feature_extractor(vit, layers=layers)


def test_model_without_transformer_blocks_raises():
    inputs = keras.Input((8, 8, 3))
    cnn = keras.Model(inputs, keras.layers.Conv2D(2, 3)(inputs))
    with pytest.raises(ValueError, match="TransformerBlock"):
        keras_vit.attention_maps(cnn, np.zeros((1, 8, 8, 3), np.float32))


def test_one_block_model_maps_and_features_match_numpy():
    """A one-block model: its only block is the class-token-only last block."""
    tiny = {**TINY, "num_layers": 1}
    params = random_official_params(
        np.random.default_rng(9), image_size=32, channels=3, pooling="token", scale=0.3, **tiny
    )
    model = keras_vit.ViT(image_size=32, pooling="token", **tiny)
    assign_official_params(model, params)
    images = random_images(np.random.default_rng(10), 2, 32, 32)
    expected, outputs, pooled = numpy_encoder(params, images, 4, "token")
    maps = keras_vit.attention_maps(model, images)
    assert len(maps) == 1
    np.testing.assert_allclose(maps[0], expected[0], atol=1e-5)
    features = feature_extractor(model)(images)
    features = {k: keras.ops.convert_to_numpy(v) for k, v in features.items()}
    np.testing.assert_allclose(features["encoderblock_0"], outputs[0], atol=1e-4)
    np.testing.assert_allclose(features["pooled"], pooled, atol=1e-4)


def test_feature_extractor_of_a_classifier_saves_loads_and_clones(tmp_path):
    vit, _ = tiny_model_and_params((32, 32), "token")
    extractor = feature_extractor(vit)
    path = str(tmp_path / "extractor.keras")
    extractor.save(path)
    loaded = keras.models.load_model(path)  # safe mode
    images = random_images(np.random.default_rng(11), 2, 32, 32)
    expected = extractor(images)
    for name, values in loaded(images).items():
        np.testing.assert_allclose(values, expected[name], atol=1e-6, err_msg=name)
    clone = keras.models.clone_model(extractor)
    shapes = {name: tuple(values.shape) for name, values in clone(images).items()}
    tokens = (2, 17, 32)
    assert shapes == {"encoderblock_0": tokens, "encoderblock_1": tokens, "pooled": (2, 32)}


def test_rope_maps_and_features_at_a_new_size_equal_a_model_built_there():
    """A dynamic-grid RoPE model (DINOv3's embedding) rotates by each input's grid in its
    maps and features too: at 24x40 they equal those of a model built at 24x40 with the
    same weights (whose grid is fixed), maps are probabilities, and the pooled feature of
    `feature_extractor` is the model's own output."""
    from tests.checkpoints.random_models import randomise

    options = dict(
        TINY,
        include_top=False,
        position_embedding="rope",
        num_register_tokens=2,
        layer_scale_init=0.5,
    )
    dynamic = randomise(keras_vit.ViT(image_size=16, dynamic_image_size=True, **options))
    fixed = keras_vit.ViT(image_size=(24, 40), **options)
    fixed.set_weights(dynamic.get_weights())
    x = random_images(np.random.default_rng(0), 2, 24, 40)
    got, want = keras_vit.attention_maps(dynamic, x), keras_vit.attention_maps(fixed, x)
    for a, b in zip(got, want, strict=True):
        assert a.shape == (2, 4, 1 + 2 + 15, 1 + 2 + 15)
        np.testing.assert_allclose(a, b, atol=1e-6)
        np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-5)
    features = feature_extractor(dynamic)(x)
    reference = feature_extractor(fixed)(x)
    for key in ("encoderblock_1", "pooled"):
        np.testing.assert_allclose(features[key], reference[key], atol=1e-5)
    np.testing.assert_allclose(features["pooled"], dynamic(x), atol=1e-6)
    assert np.abs(np.asarray(features["pooled"])).max() > 1e-2


def test_a_dynamic_rope_block_refuses_to_run_without_the_images():
    model = keras_vit.ViT(image_size=16, dynamic_image_size=True, position_embedding="rope", **TINY)
    block = model.get_layer("encoderblock_0")
    with pytest.raises(ValueError, match="needs the model's input images"):
        block.attention_probabilities(np.zeros((1, 5, 32), "float32"))
