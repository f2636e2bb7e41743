"""`.keras` files written by keras_vit before its modules moved into folders (main at
7223004, flat layout: keras_vit/models.py, keras_vit/training.py, ...) load in safe mode and
predict what they predicted when written.

The files hold a randomised tiny ViT (with a pre-logits layer) and a randomised tiny hybrid,
each compiled with keras_vit's optimizer and learning-rate schedule and trained one step, so
the optimizer state travels too. `pre_layout_expected.npz` holds the images and the logits
that the flat-layout code computed (written by the code before the move, not by the code
under test)."""

import pathlib

import keras
import numpy as np
import pytest

import keras_vit  # noqa: F401  (registers the layers with Keras' serialization)

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("name", ["vit", "hybrid"])
def test_a_keras_file_from_the_flat_layout_loads_and_predicts_the_same(name):
    expected = np.load(FIXTURES / "pre_layout_expected.npz", allow_pickle=False)
    model = keras.models.load_model(FIXTURES / f"pre_layout_{name}.keras", safe_mode=True)
    logits = model.predict(expected["images"], verbose=0)
    np.testing.assert_allclose(logits, expected[f"{name}_logits"], rtol=1e-5, atol=1e-5)
    assert type(model.optimizer).__module__.startswith("keras_vit")
