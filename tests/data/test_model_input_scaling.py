"""The input scaling a model records (`input_preprocessing`) and where it is applied."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit.checkpoints.keras_files.model_io import model_input_preprocessing
from keras_vit.data.preprocess import from_unit_range
from keras_vit.export import export_saved_model

# torchvision / timm IMAGENET_DEFAULT_MEAN and _STD, typed in from their documentation.
MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])


def _randomise(model, seed=0):
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.standard_normal(variable.shape).astype("float32") * 0.2)


def test_imagenet_scaling_equals_mean_std_on_pixels():
    pixels = np.random.default_rng(0).uniform(0, 255, (2, 4, 4, 3))
    unit = (pixels - 127.5) / 127.5
    got = np.asarray(from_unit_range(unit.astype("float32"), "imagenet"))
    np.testing.assert_allclose(got, (pixels / 255 - MEAN) / STD, atol=1e-5)
    assert from_unit_range(unit, "[-1,1]") is unit
    with pytest.raises(ValueError, match="'\\[-1,1\\]', 'imagenet' or 'clip'.*'zscore'"):
        from_unit_range(unit, "zscore")


def test_clip_scaling_equals_openai_mean_std_on_pixels():
    """OpenAI CLIP's normalisation (timm OPENAI_CLIP_MEAN / _STD), for CLIP image towers."""
    pixels = np.random.default_rng(0).uniform(0, 255, (2, 4, 4, 3))
    unit = ((pixels - 127.5) / 127.5).astype("float32")
    mean, std = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
    got = np.asarray(from_unit_range(unit, "clip"))
    np.testing.assert_allclose(got, (pixels / 255 - mean) / std, atol=1e-5)


def test_record_survives_keras_save_and_load(tmp_path, tiny_vit_kwargs):
    model = keras_vit.ViT(**tiny_vit_kwargs, input_preprocessing="imagenet")
    assert model_input_preprocessing(model) == "imagenet"
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert model_input_preprocessing(loaded) == "imagenet"
    with pytest.raises(ValueError, match="input_preprocessing"):
        keras_vit.ViT(**tiny_vit_kwargs, input_preprocessing="[0,1]")


def test_export_applies_imagenet_mean_std(tmp_path, tiny_vit_kwargs):
    model = keras_vit.ViT(**tiny_vit_kwargs, input_preprocessing="imagenet")
    _randomise(model)
    path = export_saved_model(model, tmp_path / "serving")
    pixels = np.random.default_rng(1).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    served = tf.saved_model.load(path).signatures["serving_default"](images=pixels)
    expected = model.predict(((pixels / 255 - MEAN) / STD).astype("float32"), verbose=0)
    assert np.abs(expected).max() > 1e-2
    np.testing.assert_allclose(served["logits"].numpy(), expected, atol=1e-4)
