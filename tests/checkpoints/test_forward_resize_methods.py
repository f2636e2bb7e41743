"""`dynamic_image_size=True` with every resize method: the table resized
in the forward pass (`keras.ops`, any backend) equals the NumPy load-time resize
(`keras_vit.resize_position_embeddings`, the independent reference: float64 weight matrices
by the sources' formulas), for non-square grids both ways and each method."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import keras_vit
from keras_vit.checkpoints import write_checkpoint
from keras_vit.checkpoints.keras_files.model_io import model_contents
from keras_vit.layers.position_resize import resize_position_embeddings
from keras_vit.layers.position_table_ops import resize_table
from keras_vit.spec.resize_methods import RESIZE_METHODS
from tests.checkpoints.random_models import tiny_vit

POSITION = "posembed_input"


@settings(max_examples=12, deadline=None)
@given(
    method=st.sampled_from(RESIZE_METHODS),
    old=st.tuples(st.integers(1, 6), st.integers(1, 6)),
    new=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    prefix=st.integers(0, 2),
)
def test_the_forward_resize_equals_the_load_time_resize(method, old, new, prefix):
    rng = np.random.default_rng(0)
    table = rng.normal(size=(1, prefix + old[0] * old[1], 8)).astype("float32")
    got = np.asarray(resize_table(table, old, new, prefix, method))
    expected = resize_position_embeddings(table, old, new, prefix, method)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def timm_file(tmp_path_factory):
    model = tiny_vit(grid=(3, 5), gelu_approximate=False)
    path = tmp_path_factory.mktemp("fwd") / "model.safetensors"
    write_checkpoint(model_contents(model), path, "timm")
    return path


@pytest.mark.parametrize("method", RESIZE_METHODS)
@pytest.mark.parametrize("size", [(48, 40), (16, 56), (24, 40)])
def test_a_dynamic_model_equals_one_resized_at_load(timm_file, method, size):
    dynamic = keras_vit.from_checkpoint(
        timm_file, num_heads=4, dynamic_image_size=True, resize_method=method
    )
    assert dynamic.get_layer(POSITION).resize_method == method
    static = keras_vit.from_checkpoint(
        timm_file, num_heads=4, image_size=size, resize_method=method
    )
    images = np.random.default_rng(1).uniform(-1, 1, (2, *size, 3)).astype("float32")
    got = np.asarray(dynamic(images))
    assert np.std(got) > 1e-2
    np.testing.assert_allclose(got, np.asarray(static(images)), atol=1e-5, rtol=0)


def test_the_method_survives_a_keras_file(timm_file, tmp_path):
    import keras

    model = keras_vit.from_checkpoint(
        timm_file, num_heads=4, dynamic_image_size=True, resize_method="torch_bicubic"
    )
    model.save(tmp_path / "dyn.keras")
    loaded = keras.saving.load_model(tmp_path / "dyn.keras")
    assert loaded.get_layer(POSITION).resize_method == "torch_bicubic"
    images = np.random.default_rng(2).uniform(-1, 1, (1, 40, 56, 3)).astype("float32")
    np.testing.assert_allclose(loaded(images), model(images), atol=1e-6, rtol=0)


def test_loading_with_another_method_than_the_forward_pass_is_refused(timm_file):
    model = keras_vit.ViT(
        patch_size=8, image_size=(24, 40), dynamic_image_size=True, num_classes=5,
        hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"resize_method='bicubic' but the model .*'bilinear'"):
        keras_vit.load_weights(model, timm_file, resize_method="bicubic")
