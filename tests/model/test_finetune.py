"""keras_vit.model.finetune: zero head, carried-over body, resized position table (paper 3.2)."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import scipy.ndimage

import keras_vit

ARCH = dict(patch_size=8, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2)


def _randomised(model, seed=0):
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.standard_normal(variable.shape).astype("float32") * 0.1)
    return model


def _weights_by_path(model, exclude=("head", "pre_logits")):
    return {w.path: w.numpy() for w in model.weights if w.path.split("/")[0] not in exclude}


def _sgd_step(model, seed=1):
    model.compile(
        optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    size = model.inputs[0].shape[1:3]
    x = np.random.default_rng(seed).uniform(-1, 1, (4, *size, 3)).astype("float32")
    model.fit(x, np.array([0, 1, 2, 0]), batch_size=4, epochs=1, verbose=0)


def test_zero_head_body_carried_over_and_one_step_moves_the_head():
    source = _randomised(
        keras_vit.ViT(image_size=32, num_classes=21, representation_size=16, **ARCH)
    )
    model = keras_vit.finetune(source, num_classes=3)
    head = model.get_layer("head")
    assert tuple(head.kernel.shape) == (32, 3)  # D x K: pre_logits dropped
    assert not head.kernel.numpy().any() and not head.bias.numpy().any()
    assert "pre_logits" not in [layer.name for layer in model.layers]
    source_body = _weights_by_path(source)
    new_body = _weights_by_path(model)
    assert source_body.keys() == new_body.keys()
    for path, value in source_body.items():
        np.testing.assert_array_equal(new_body[path], value, err_msg=path)
    _sgd_step(model)
    assert head.kernel.numpy().any() and head.bias.numpy().any()
    # the source shares no variables with the fine-tuned model
    for path, value in _weights_by_path(source).items():
        np.testing.assert_array_equal(value, source_body[path])


def test_new_resolution_resizes_the_table_like_the_release():
    source = _randomised(keras_vit.ViT(image_size=32, num_classes=10, **ARCH))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = keras_vit.finetune(source, num_classes=5, image_size=(48, 64))
    table = source.get_layer("posembed_input").pos_embedding.numpy()
    new = model.get_layer("posembed_input").pos_embedding.numpy()
    assert new.shape == (1, 1 + 6 * 8, 32)
    np.testing.assert_array_equal(new[0, 0], table[0, 0])
    grid = table[0, 1:].reshape(4, 4, 32)
    zoomed = scipy.ndimage.zoom(grid, (6 / 4, 8 / 4, 1), order=1)
    np.testing.assert_allclose(new[0, 1:], zoomed.reshape(-1, 32), atol=1e-6)
    messages = [str(w.message) for w in caught if w.category is keras_vit.WeightsWarning]
    assert messages == ["Position embeddings resized: grid 4x4 -> 6x8 (bilinear)."]
    assert model(np.zeros((2, 48, 64, 3), "float32")).shape == (2, 5)


def test_representation_size_kept_or_new():
    source = _randomised(
        keras_vit.ViT(image_size=32, num_classes=10, representation_size=16, **ARCH)
    )
    kept = keras_vit.finetune(source, num_classes=4, representation_size=16)
    np.testing.assert_array_equal(
        kept.get_layer("pre_logits").kernel.numpy(), source.get_layer("pre_logits").kernel.numpy()
    )
    assert tuple(kept.get_layer("head").kernel.shape) == (16, 4)
    fresh = keras_vit.finetune(source, num_classes=4, representation_size=8)
    assert tuple(fresh.get_layer("pre_logits").kernel.shape) == (32, 8)
    assert tuple(fresh.get_layer("head").kernel.shape) == (8, 4)


def test_gap_model_and_feature_model():
    source = _randomised(
        keras_vit.ViT(image_size=32, pooling="gap", include_top=False, **ARCH), seed=3
    )
    model = keras_vit.finetune(source, num_classes=2, image_size=40)
    table = source.get_layer("posembed_input").pos_embedding.numpy()
    new = model.get_layer("posembed_input").pos_embedding.numpy()
    assert new.shape == (1, 25, 32)  # no class-token row for gap
    zoomed = scipy.ndimage.zoom(table[0].reshape(4, 4, 32), (5 / 4, 5 / 4, 1), order=1)
    np.testing.assert_allclose(new[0], zoomed.reshape(-1, 32), atol=1e-6)
    assert model(np.zeros((1, 40, 40, 3), "float32")).shape == (1, 2)


def test_hybrid_model():
    source = _randomised(
        keras_vit.HybridViT(
            image_size=32, resnet_stages=(1,), num_classes=10, **{**ARCH, "patch_size": 1}
        ),
        seed=4,
    )
    model = keras_vit.finetune(source, num_classes=3, image_size=64)
    for name in ("conv_root", "gn_root", "block1_unit1", "embedding", "encoderblock_1"):
        for old, new in zip(
            source.get_layer(name).get_weights(), model.get_layer(name).get_weights(), strict=True
        ):
            np.testing.assert_array_equal(old, new)
    assert model.get_layer("posembed_input").pos_embedding.shape == (1, 1 + 16 * 16, 32)  # stride 4
    assert not model.get_layer("head").kernel.numpy().any()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_classes=0), "num_classes"),
        (dict(num_classes=1), "num_classes=2.*sigmoid"),
        (dict(num_classes=3, representation_size=-1), "representation_size"),
        (dict(num_classes=3, image_size=30), "divisible"),
    ],
)
def test_bad_arguments(kwargs, match):
    source = keras_vit.ViT(image_size=32, num_classes=10, **ARCH)
    with pytest.raises(ValueError, match=match):
        keras_vit.finetune(source, **kwargs)


def test_sequence_model_is_refused():
    source = keras_vit.ViT(image_size=32, include_top=False, return_sequence=True, **ARCH)
    with pytest.raises(ValueError, match="pool"):
        keras_vit.finetune(source, num_classes=3)


def _option_grid():
    """Every pooling x final_norm x representation_size x include_top the builder accepts
    (the class token comes with pooling="token"; map has no pooled norm)."""
    for pooling in ("token", "gap", "map"):
        for final_norm in ("tokens", "pooled"):
            if pooling == "map" and final_norm == "pooled":
                continue
            for representation_size in (None, 8):
                for include_top in (True, False):
                    yield pooling, final_norm, representation_size, include_top


@pytest.mark.parametrize("pooling, final_norm, representation_size, include_top", _option_grid())
def test_the_new_head_sees_the_source_models_features(
    pooling, final_norm, representation_size, include_top
):
    """Kept pre-logits + the source's head weights give the source's logits: so every body
    layer (pooling, MAP head, fc_norm, encoder_norm) is carried over, none dropped."""
    source = _randomised(
        keras_vit.ViT(
            image_size=16,
            num_classes=3,
            pooling=pooling,
            final_norm=final_norm,
            representation_size=representation_size,
            include_top=include_top,
            **ARCH,
        ),
        seed=5,
    )
    model = keras_vit.finetune(source, num_classes=3, representation_size=representation_size)
    rng = np.random.default_rng(6)
    x = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    if include_top:
        model.get_layer("head").set_weights(source.get_layer("head").get_weights())
        expected = source(x).numpy()
    else:  # the source's output is the feature the new head reads
        kernel = rng.standard_normal((representation_size or 32, 3)).astype("float32")
        model.get_layer("head").set_weights([kernel, np.ones(3, "float32")])
        expected = source(x).numpy() @ kernel + 1.0
    assert np.abs(expected).max() > 1e-3
    names = {layer.name for layer in model.layers}
    assert ("fc_norm" in names) == (final_norm == "pooled")
    assert ("MAPHead_0" in names) == (pooling == "map")
    np.testing.assert_allclose(model(x).numpy(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("position_embedding", ["learned", "sincos2d", "none"])
def test_position_embedding_options_are_kept(position_embedding):
    source = _randomised(
        keras_vit.ViT(
            image_size=16,
            num_classes=3,
            pooling="gap",
            final_norm="pooled",
            position_embedding=position_embedding,
            **ARCH,
        ),
        seed=7,
    )
    model = keras_vit.finetune(source, num_classes=3)
    model.get_layer("head").set_weights(source.get_layer("head").get_weights())
    x = np.random.default_rng(8).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    expected = source(x).numpy()
    assert np.abs(expected).max() > 1e-3
    np.testing.assert_allclose(model(x).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_a_distilled_model_gets_both_heads_replaced_by_zero_ones():
    """DeiT: finetune replaces `head` and `head_dist` (zero-initialised, logits
    still their mean), keeps the distillation and register tokens, LayerScale and the body;
    a one-step fit moves both heads."""
    family = dict(distilled=True, num_register_tokens=2, layer_scale_init=0.1)
    source = _randomised(
        keras_vit.ViT(
            image_size=(16, 24), num_classes=7, classifier_activation="softmax", **family, **ARCH
        )
    )
    tuned = keras_vit.finetune(source, 3)
    for name in ("head", "head_dist"):
        assert tuned.get_layer(name).units == 3
        assert not any(np.any(w) for w in tuned.get_layer(name).get_weights())
    assert tuned.get_layer("head_activation").activation is keras.activations.softmax
    body = _weights_by_path(source, exclude=("head", "head_dist"))
    assert _weights_by_path(tuned, exclude=("head", "head_dist")).keys() == body.keys()
    for path, value in _weights_by_path(tuned, exclude=("head", "head_dist")).items():
        np.testing.assert_array_equal(value, body[path])
    x = np.random.default_rng(2).uniform(-1, 1, (2, 16, 24, 3)).astype("float32")
    np.testing.assert_allclose(tuned(x), np.full((2, 3), 1 / 3), atol=1e-6)
    fresh = keras_vit.ViT(image_size=(16, 24), num_classes=3, **family, **ARCH)
    fresh.set_weights(tuned.get_weights())  # the same architecture as a fresh build
    with pytest.raises(ValueError, match="representation_size"):
        keras_vit.finetune(source, 3, representation_size=8)


def test_the_loss_reaches_both_distilled_heads():
    import tensorflow as tf

    source = _randomised(keras_vit.ViT(image_size=16, num_classes=5, distilled=True, **ARCH))
    tuned = keras_vit.finetune(source, 3)
    x = np.random.default_rng(1).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    heads = [tuned.get_layer(name).kernel for name in ("head", "head_dist")]
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tuned(x, training=True) * tf.constant([[1.0, -1.0, 0.5]]))
    for gradient in tape.gradient(loss, heads):
        assert np.abs(gradient.numpy()).max() > 0


@pytest.mark.parametrize(
    "switches",
    [
        dict(distilled=True, distillation_head=False, num_classes=7),
        dict(distilled=True, include_top=False, representation_size=8),
    ],
    ids=["class_head_only", "deit_model_pooler"],
)
def test_a_distillation_token_without_its_head_gets_one_zero_head(switches):
    """HF DeiTForImageClassification (`distillation_head=False`) and HF DeiTModel with its
    pooler (pre_logits dropped): one zero `head` on the class token, the distillation token
    kept; the result is a fresh `distillation_head=False` build, and no pre_logits may be
    put under its head."""
    from keras_vit.checkpoints.base.architecture import Architecture

    source = _randomised(keras_vit.ViT(image_size=(16, 24), **switches, **ARCH))
    tuned = keras_vit.finetune(source, 3)
    layers = {layer.name for layer in tuned.layers}
    assert "dist" in layers and not {"head_dist", "pool_dist", "pre_logits"} & layers
    assert not any(np.any(w) for w in tuned.get_layer("head").get_weights())
    assert Architecture.from_model(tuned).family_kwargs() == {
        "distilled": True,
        "distillation_head": False,
    }
    body = _weights_by_path(source)
    for path, value in _weights_by_path(tuned).items():
        np.testing.assert_array_equal(value, body[path])
    fresh = keras_vit.ViT(
        image_size=(16, 24), num_classes=3, distilled=True, distillation_head=False, **ARCH
    )
    fresh.set_weights(tuned.get_weights())  # the same architecture as a fresh build
    with pytest.raises(ValueError, match="distillation token .* representation_size=None"):
        keras_vit.finetune(source, 3, representation_size=8)
