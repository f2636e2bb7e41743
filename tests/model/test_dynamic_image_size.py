"""`dynamic_image_size=True`: any input size, the position table resized in the forward pass,
equal to a model rebuilt at that size and loaded with the release's resize."""

from __future__ import annotations

import re

import keras
import numpy as np
import pytest
import scipy.ndimage
import tensorflow as tf

import keras_vit
from keras_vit.checkpoints.base.npz_io import write_npz
from tests.numpy_reference import random_official_params, vit_forward

ARCH = dict(patch_size=8, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2, num_classes=10)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    params = random_official_params(np.random.default_rng(0), image_size=32, channels=3, **ARCH)
    path = tmp_path_factory.mktemp("dyn") / "tiny.npz"
    write_npz(path, params)
    return path, params


def _images(size):
    return np.random.default_rng(1).uniform(-1, 1, (2, *size, 3)).astype("float32")


@pytest.mark.parametrize("size", [(32, 32), (48, 64), (24, 40)])
def test_equals_a_rebuilt_model_and_the_numpy_forward(checkpoint, size):
    path, params = checkpoint
    dynamic = keras_vit.ViT(image_size=32, dynamic_image_size=True, weights=path, **ARCH)
    assert dynamic.input_shape == (None, None, None, 3)
    rebuilt = keras_vit.ViT(image_size=size, weights=path, **ARCH)
    x = _images(size)
    got = dynamic.predict(x, verbose=0)
    assert np.std(got) > 1e-2
    np.testing.assert_allclose(got, rebuilt.predict(x, verbose=0), atol=1e-5, rtol=0)
    grid = params["Transformer/posembed_input/pos_embedding"][0, 1:].reshape(4, 4, 32)
    new = (size[0] // 8, size[1] // 8)
    zoomed = scipy.ndimage.zoom(grid.astype("float64"), (new[0] / 4, new[1] / 4, 1), order=1)
    table = params["Transformer/posembed_input/pos_embedding"][:, :1]
    resized = dict(params)
    resized["Transformer/posembed_input/pos_embedding"] = np.concatenate(
        [table, zoomed.reshape(1, -1, 32)], axis=1
    )
    np.testing.assert_allclose(got, vit_forward(resized, x, num_heads=4), atol=1e-4, rtol=0)


def test_saves_loads_and_keeps_its_native_grid(checkpoint, tmp_path):
    path, _ = checkpoint
    model = keras_vit.ViT(image_size=32, dynamic_image_size=True, weights=path, **ARCH)
    model.save(tmp_path / "dyn.keras")
    loaded = keras.saving.load_model(tmp_path / "dyn.keras")
    x = _images((40, 24))
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    assert loaded.get_layer("posembed_input").pos_embedding.shape == (1, 17, 32)


@pytest.mark.parametrize("size", [(36, 32), (32, 30)])
def test_a_side_not_a_multiple_of_the_patch_is_a_clear_error(checkpoint, size):
    path, _ = checkpoint
    model = keras_vit.ViT(image_size=32, dynamic_image_size=True, weights=path, **ARCH)
    model.predict(_images((40, 24)), verbose=0)  # a second size: traced with (None, None)
    rule = r"multiple of the patch size \(8, 8\)"
    with pytest.raises(tf.errors.InvalidArgumentError, match=rule) as error:
        model.predict(_images(size), verbose=0)
    assert f"{size[0]} {size[1]}" in str(error.value)  # the shape found
    with pytest.raises(ValueError, match=re.escape(f"Image size {size}")):
        model(_images(size))  # eager: a ValueError before any work
