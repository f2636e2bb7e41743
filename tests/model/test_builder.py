"""The ViT-family switches of the builder core: LayerScale, register tokens,
DeiT's distillation token and head (or no head: `distillation_head=False`, HF
DeiTForImageClassification; or HF DeiTModel's pooler as `pre_logits`), no_embed_class,
norm_pre, quick_gelu; patch 14.

Each is compared with an independent NumPy forward pass from the equations
(tests/numpy_family_reference.py) on a tiny model with randomised weights (its heads are
zero-initialised: the outputs are checked not all zero), one switch at a time and drawn in
combination by hypothesis; then the round trips: get_config, `.keras` (safe mode), the
release-style arrays into a fresh model and through `from_checkpoint`'s reading of them,
and the release `.npz` writer's refusal by the option's name.
"""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import keras_vit
from keras_vit.checkpoints import CheckpointError, load_weights, model_contents, write_checkpoint
from keras_vit.checkpoints.base.architecture import Architecture
from keras_vit.checkpoints.base.naming import official_arrays
from keras_vit.checkpoints.from_checkpoint import architecture_kwargs
from tests.checkpoints.random_models import images_for, logits, randomise
from tests.numpy_family_reference import family_forward

TINY = dict(hidden_dim=16, num_heads=2, mlp_dim=32, num_layers=2, num_classes=5)
ONE_SWITCH = {
    "layer_scale": dict(layer_scale_init=0.5),
    "registers": dict(num_register_tokens=3),
    "distilled": dict(distilled=True),
    "class_head_only": dict(distilled=True, distillation_head=False),
    "no_embed_class": dict(no_embed_class=True),
    "norm_pre": dict(norm_pre=True),
    "quick_gelu": dict(mlp_activation="quick_gelu"),
}
ALL_ON = dict(
    layer_scale_init=0.5,
    num_register_tokens=2,
    distilled=True,
    no_embed_class=True,
    norm_pre=True,
    mlp_activation="quick_gelu",
)
# The option of the format table each switch is refused under by the release's .npz.
OPTION = {
    "layer_scale": "layer_scale",
    "registers": "registers",
    "distilled": "distillation",
    "class_head_only": "distillation",
    "no_embed_class": "no_embed_class",
    "norm_pre": "norm_pre",
    "quick_gelu": "mlp_activation",
}


def _model(patch=4, grid=(2, 3), channels=3, seed=0, **switches):
    model = keras_vit.ViT(
        **TINY,
        patch_size=patch,
        image_size=(grid[0] * patch, grid[1] * patch),
        channels=channels,
        **switches,
    )
    return randomise(model, seed=seed)


def _reference(model, images, switches):
    return family_forward(
        official_arrays(model),
        images,
        num_heads=TINY["num_heads"],
        pooling=switches.get("pooling", "token"),
        no_embed_class=switches.get("no_embed_class", False),
        mlp_activation=switches.get("mlp_activation", "gelu"),
    )


def _family_of(switches):
    """`Architecture.family_kwargs()` as it should read a model built with `switches`."""
    expected = {k: v for k, v in switches.items() if k != "pooling"}
    if expected.get("layer_scale_init") is not None:
        expected["layer_scale_init"] = 1e-5  # files hold the gammas, not the initial value
    head = expected.pop("distillation_head", True)  # the one switch whose default is True
    kept = {k: v for k, v in expected.items() if v not in (False, 0, "gelu", None)}
    return kept if head else {**kept, "distillation_head": False}


@pytest.mark.parametrize("switch", [*ONE_SWITCH, "all"])
def test_each_switch_matches_the_numpy_forward_pass(switch):
    switches = ALL_ON if switch == "all" else ONE_SWITCH[switch]
    model = _model(**switches)
    x = images_for(model)
    np.testing.assert_allclose(logits(model, x), _reference(model, x, switches), atol=1e-5)
    assert Architecture.from_model(model).family_kwargs() == _family_of(switches)
    assert Architecture.from_contents(model_contents(model)).family_kwargs() == _family_of(switches)


@st.composite
def family_draws(draw):
    """Switch combinations, grids and patches (14 and 16, as DINOv2's and DeiT's)."""
    pooling = draw(st.sampled_from(["token", "gap"]))
    token = pooling == "token"
    distilled = token and draw(st.booleans())
    switches = dict(
        pooling=pooling,
        layer_scale_init=draw(st.sampled_from([None, 0.3])),
        num_register_tokens=draw(st.sampled_from([0, 1, 3])),
        distilled=distilled,
        distillation_head=not (distilled and draw(st.booleans())),
        no_embed_class=token and draw(st.booleans()),
        norm_pre=draw(st.booleans()),
        mlp_activation=draw(st.sampled_from(["gelu", "quick_gelu"])),
    )
    layout = dict(
        patch=draw(st.sampled_from([14, 16])),
        grid=draw(st.sampled_from([(2, 2), (2, 3), (3, 1)])),
        channels=draw(st.sampled_from([1, 3])),
    )
    return switches, layout


@given(draw=family_draws())
def test_drawn_combinations_match_the_numpy_forward_pass(draw):
    switches, layout = draw
    model = _model(**layout, **switches)
    x = images_for(model)
    np.testing.assert_allclose(logits(model, x), _reference(model, x, switches), atol=1e-5)
    assert Architecture.from_model(model).family_kwargs() == _family_of(switches)
    assert Architecture.from_contents(model_contents(model)).family_kwargs() == _family_of(switches)
    keras.backend.clear_session()


def test_distilled_logits_are_the_mean_of_both_trainable_heads():
    model = _model(distilled=True)
    x = images_for(model)
    features = keras.Model(model.input, [model.get_layer(n).output for n in ("head", "head_dist")])
    head, head_dist = (np.asarray(t) for t in features(x))
    np.testing.assert_allclose(logits(model, x), (head + head_dist) / 2, atol=1e-6)
    trainable = {v.path.split("/")[0] for v in model.trainable_weights}
    assert {"head", "head_dist", "dist"} <= trainable
    fresh = keras_vit.ViT(**TINY, patch_size=4, image_size=(8, 12), distilled=True)
    for name in ("head", "head_dist"):  # both zero-initialised, as the paper's head
        assert not any(np.any(np.asarray(w)) for w in fresh.get_layer(name).weights)


def test_all_switches_round_trip_through_config_keras_file_and_arrays(tmp_path):
    model = _model(**ALL_ON)
    x = images_for(model)
    expected = logits(model, x)
    clone = keras.Model.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(logits(clone, x), expected, atol=1e-6)
    path = os.path.join(tmp_path, "family.keras")
    model.save(path)
    back = keras.saving.load_model(path, safe_mode=True, compile=False)
    np.testing.assert_allclose(logits(back, x), expected, atol=1e-6)
    contents = model_contents(model)
    assert {"dist", "reg", "head_dist/kernel", "Transformer/norm_pre/scale"} <= set(contents.arrays)
    assert "Transformer/encoderblock_1/LayerScale_3/scale" in contents.arrays
    fresh = randomise(keras_vit.ViT(**TINY, patch_size=4, image_size=(8, 12), **ALL_ON), seed=9)
    load_weights(fresh, contents)
    np.testing.assert_allclose(logits(fresh, x), expected, atol=1e-6)
    rebuilt = keras_vit.ViT(**architecture_kwargs(contents))  # what from_checkpoint builds
    load_weights(rebuilt, contents)
    np.testing.assert_allclose(logits(rebuilt, x), expected, atol=1e-6)


def _written_back_as_hf(model, folder):
    """`model` -> HF folder -> `from_checkpoint`; returns (rebuilt model, config.json)."""
    write_checkpoint(model_contents(model), os.path.join(folder, "hf"), "hf")
    with open(os.path.join(folder, "hf", "config.json"), encoding="utf-8") as stream:
        config = json.load(stream)
    return keras_vit.from_checkpoint(os.path.join(folder, "hf")), config


def test_a_distillation_token_without_its_head_is_deit_for_image_classification(tmp_path):
    """`distillation_head=False`: the distillation token stays in the sequence (it changes
    the class token through attention) but only `head` on the class token gives logits."""
    model = _model(distilled=True, distillation_head=False)
    layers = {layer.name for layer in model.layers}
    assert {"dist", "head"} <= layers and not {"head_dist", "pool_dist", "head_mean"} & layers
    x = images_for(model)
    expected = logits(model, x)
    features = keras.Model(model.input, model.get_layer("pool").output)
    head = model.get_layer("head")
    np.testing.assert_allclose(expected, np.asarray(head(features(x))), atol=1e-6)
    clone = keras.Model.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(logits(clone, x), expected, atol=1e-6)
    model.save(tmp_path / "m.keras")
    back = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True, compile=False)
    np.testing.assert_allclose(logits(back, x), expected, atol=1e-6)
    rebuilt, config = _written_back_as_hf(model, tmp_path)
    assert config["architectures"] == ["DeiTForImageClassification"]
    assert Architecture.from_model(rebuilt).family_kwargs() == {
        "distilled": True,
        "distillation_head": False,
    }
    np.testing.assert_allclose(logits(rebuilt, x), expected, atol=1e-6)
    dist = model.get_layer("dist")
    rng = np.random.default_rng(3)  # (a constant shift would vanish in the LayerNorms)
    dist.set_weights([w + rng.normal(0, 1, w.shape) for w in dist.get_weights()])
    assert np.abs(logits(model, x) - expected).max() > 1e-3  # the token is attended to
    with pytest.raises(CheckpointError, match="distillation='class head only'"):
        write_checkpoint(model_contents(model), tmp_path / "m.timm", "timm")
    assert not os.path.exists(tmp_path / "m.timm")


def test_a_distilled_feature_model_with_pre_logits_is_deit_models_pooler(tmp_path):
    """HF DeiTModel's pooler, tanh(dense(final LayerNorm's token 0))), is the feature model's
    `pre_logits` (include_top=False, representation_size = pooler_output_size)."""
    switches = dict(distilled=True, include_top=False, representation_size=8)
    model = _model(**switches)
    x = images_for(model)
    expected = logits(model, x)
    assert expected.shape == (2, 8)
    np.testing.assert_allclose(expected, _reference(model, x, switches), atol=1e-5)
    rebuilt, config = _written_back_as_hf(model, tmp_path)
    assert (config["architectures"], config["pooler_output_size"]) == (["DeiTModel"], 8)
    np.testing.assert_allclose(logits(rebuilt, x), expected, atol=1e-6)
    match = r"distillation=True, pre_logits='feature' together \(deit.py's"
    with pytest.raises(CheckpointError, match=match):
        write_checkpoint(model_contents(model), tmp_path / "m.safetensors", "timm")
    assert not os.path.exists(tmp_path / "m.safetensors")


@pytest.mark.parametrize("switch", ONE_SWITCH)
def test_keras_vits_npz_holds_each_switch(switch, tmp_path):
    """The release-style keys hold the family's tensors; keras_vit/metadata what they
    cannot say (no_embed_class, quick_gelu): the model comes back with the same logits."""
    model = _model(**ONE_SWITCH[switch])
    target = os.path.join(tmp_path, "m.npz")
    write_checkpoint(model_contents(model), target, "npz")
    x = images_for(model)
    back = keras_vit.from_checkpoint(target, image_size=(8, 12))
    np.testing.assert_allclose(logits(back, x), logits(model, x), atol=1e-6, err_msg=switch)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(distilled=True, pooling="gap"), "distilled=True needs pooling='token'"),
        (dict(distilled=True, representation_size=8), "only with include_top=False"),
        (dict(distilled=True, final_norm="pooled"), "distilled=True needs final_norm"),
        (dict(distillation_head=False), "distillation_head=False .* needs distilled=True"),
        (dict(distilled=True, distillation_head=0), "`distillation_head` must be True or"),
        (dict(no_embed_class=True, pooling="gap"), "no_embed_class=True needs a class token"),
        (dict(num_register_tokens=2, pooling="map"), "register tokens need"),
        (dict(num_register_tokens=-1), "num_register_tokens"),
        (dict(num_register_tokens=True), "num_register_tokens"),
        (dict(layer_scale_init=0), "layer_scale_init"),
        (dict(distilled="yes"), "distilled"),
        (dict(mlp_activation="relu"), "mlp_activation"),
    ],
)
def test_bad_switches_are_refused_by_name_before_building(kwargs, match):
    with pytest.raises(ValueError, match=match):
        keras_vit.ViT(**TINY, patch_size=4, image_size=8, **kwargs)
