"""ImageModel: images of a size the model does not take are refused before a step traces, with
one-line errors, and the model stays usable (the JAX lane checks the same in
tests/backends/test_jax.py, where a refusal inside the step empties Keras' model)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit.model.image_model import ImageModel, images_shape
from tests.helpers.refused_sizes import main as refused_sizes
from tests.helpers.refused_sizes import tiny_model


@pytest.fixture(scope="module")
def fixed():
    return tiny_model("fixed")


def images(*size, channels=3, batch=2):
    return np.zeros((batch, *size, channels), "float32")


def test_predict_and_evaluate_refuse_then_work_on_tensorflow():
    result = refused_sizes("unused")
    for key, outcome in result.items():
        if key != "backend":
            assert outcome["usable"] is True, key
            assert outcome["error"].startswith("ValueError"), key


@pytest.mark.parametrize(
    "call",
    [
        lambda m, x: m.predict(x, verbose=0),
        lambda m, x: m.predict_on_batch(x),
        lambda m, x: m.evaluate(x, np.zeros(len(x), "int32"), verbose=0),
        lambda m, x: m.test_on_batch(x, np.zeros(len(x), "int32")),
        lambda m, x: m.train_on_batch(x, np.zeros(len(x), "int32")),
        lambda m, x: m.fit(x, np.zeros(len(x), "int32"), verbose=0),
        lambda m, x: m.predict({"images": x}, verbose=0),
        lambda m, x: m.predict(tf.data.Dataset.from_tensor_slices(x).batch(2), verbose=0),
    ],
)
def test_every_entry_refuses_before_the_step(fixed, call):
    with pytest.raises(ValueError, match=r"takes images of shape \(32, 32, 3\).*, 48, 40, 3\)"):
        call(fixed, images(48, 40))


def test_validation_data_channels_and_rank_are_checked(fixed):
    labels = np.zeros(2, "int32")
    with pytest.raises(ValueError, match="`validation_data` of shape"):
        fixed.fit(images(32, 32), labels, validation_data=(images(40, 40), labels), verbose=0)
    with pytest.raises(ValueError, match=r"takes images of shape \(32, 32, 3\)"):
        fixed.predict(images(32, 32, channels=1), verbose=0)
    with pytest.raises(ValueError, match=r"a batch of images .*Received `x` of shape \(32, 32\)"):
        fixed.predict(np.zeros((32, 32), "float32"), verbose=0)


def test_a_dynamic_model_takes_patch_multiples_only():
    model = tiny_model("dynamic")
    assert model.predict(images(40, 48), verbose=0).shape == (2, 3)
    with pytest.raises(ValueError, match=r"\(36, 40\) is not divisible by the patch size"):
        model.predict(images(36, 40), verbose=0)


def test_unreadable_shapes_pass_through(fixed):
    assert images_shape(batch for batch in [images(32, 32)]) is None
    assert images_shape(tf.data.Dataset.from_tensor_slices(images(32, 32)).batch(2)) == (
        None, 32, 32, 3,
    )  # fmt: skip
    generator = ((batch,) for batch in [images(32, 32)])
    assert fixed.predict(generator, verbose=0).shape == (2, 3)


def test_saved_and_finetuned_models_keep_the_check(fixed, tmp_path):
    path = str(tmp_path / "m.keras")
    fixed.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is ImageModel
    np.testing.assert_allclose(
        loaded.predict(images(32, 32), verbose=0), fixed.predict(images(32, 32), verbose=0)
    )
    tuned = keras_vit.finetune(fixed, num_classes=4, image_size=48)
    assert type(tuned) is ImageModel
    with pytest.raises(ValueError, match=r"takes images of shape \(48, 48, 3\)"):
        tuned.predict(images(32, 32), verbose=0)
