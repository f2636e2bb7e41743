"""The functional `keras.Model` the builders return: image sizes checked before a step traces.

A size a model does not take is refused by `PatchEmbed` while the backend traces its step.
On JAX that is too late: Keras' JAX trainer takes the variables out of the model for the
jitted step (`_purge_model_variables`) and puts them back only when the step returns, so
after a refused `predict` or `evaluate` the model has no weights and every later call fails
(Keras restores them for `fit` only). `ImageModel` checks the images' shape in `fit`,
`evaluate`, `predict` and the `*_on_batch` calls, before anything traces, with the same
one-line errors on every backend; the model stays usable.
"""

from __future__ import annotations

import keras

from keras_vit.layers.patch_embed import PatchEmbed
from keras_vit.model.batch_split import check_batches_split, kept_outputs, padded_for_predict

IMAGES = "images"  # the builders' input name


def images_shape(data):
    """The shape (a tuple, None for unknown sizes) of the images in `data`, or None where it
    cannot be read without consuming the data (generators, `keras.utils.PyDataset`).

    `data` is an array or tensor of images, a dict with an "images" entry, an `(x, y[, w])`
    tuple (`validation_data`), or a `tf.data.Dataset` yielding any of these.
    """
    spec = getattr(data, "element_spec", None)
    if spec is not None:
        return images_shape(spec)
    if isinstance(data, dict):
        return images_shape(data.get(IMAGES))
    if isinstance(data, (tuple, list)) and data:
        return images_shape(data[0])
    shape = getattr(data, "shape", None)
    if shape is None:
        return None
    shape = shape.as_list() if hasattr(shape, "as_list") else shape
    return tuple(None if size is None else int(size) for size in shape)


def check_images(model, data, argument="x"):
    """Raises a one-line ValueError when the images in `data` (see `images_shape`) do not
    fit `model`: another rank than (batch, height, width, channels), another size or channel
    count than the model's input where that is fixed, or (dynamic image size) a side that is
    not a multiple of the patch. Data whose shape cannot be read passes."""
    shape = images_shape(data)
    if shape is None:
        return
    expected = tuple(model.inputs[0].shape)
    if len(shape) != len(expected):
        raise ValueError(
            f"{model.name} takes a batch of images (batch, height, width, channels) "
            f"{expected}. Received `{argument}` of shape {shape}."
        )
    for size, want in zip(shape[1:], expected[1:], strict=True):
        if None not in (size, want) and size != want:
            raise ValueError(
                f"{model.name} takes images of shape {expected[1:]} (height, width, channels). "
                f"Received `{argument}` of shape {shape}. Build a model for the new size "
                "(e.g. keras_vit.finetune(model, ..., image_size=...))."
            )
    for layer in model.layers:
        if isinstance(layer, PatchEmbed) and layer.dynamic_image_size:
            layer.check_image_shape(shape)


@keras.saving.register_keras_serializable(package="keras_vit")
class ImageModel(keras.Model):
    """A functional `keras.Model` (same constructor: `ImageModel(inputs, outputs, name=...)`)
    whose `fit`, `evaluate`, `predict`, `train_on_batch`, `test_on_batch` and
    `predict_on_batch` refuse images of a size it does not take before the backend's step
    traces (`check_images`), so a refused call leaves the model usable on every backend.
    Under a `keras.distribution` with a batch axis (JAX), array inputs whose batches do not
    split over its devices are refused by `fit` and `evaluate` before the first step, and
    padded (outputs dropped) by `predict` (`keras_vit.model.batch_split`).

    Raises:
        ValueError: images of another rank, size or channel count than the model's input,
            or (dynamic image size) a side that is not a multiple of the patch; a batch that
            does not split over the distribution's devices (naming the batch and the count).
    """

    def fit(self, x=None, y=None, batch_size=None, *args, **kwargs):
        check_images(self, x)
        check_batches_split(x, batch_size, "fit")
        validation = kwargs.get("validation_data")
        check_images(self, validation, "validation_data")
        validation_batch = kwargs.get("validation_batch_size") or batch_size
        check_batches_split(validation, validation_batch, "fit", "validation_data")
        return super().fit(x, y, batch_size, *args, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, *args, **kwargs):
        check_images(self, x)
        check_batches_split(x, batch_size, "evaluate")
        return super().evaluate(x, y, batch_size, *args, **kwargs)

    def predict(self, x, batch_size=None, *args, **kwargs):
        check_images(self, x)
        x, count = padded_for_predict(x, batch_size)
        return kept_outputs(super().predict(x, batch_size, *args, **kwargs), count)

    def train_on_batch(self, x, *args, **kwargs):
        check_images(self, x)
        return super().train_on_batch(x, *args, **kwargs)

    def test_on_batch(self, x, *args, **kwargs):
        check_images(self, x)
        return super().test_on_batch(x, *args, **kwargs)

    def predict_on_batch(self, x):
        check_images(self, x)
        return super().predict_on_batch(x)


# Keras' legacy HDF5 loader (`model.save("x.h5")`) finds a model's class by its bare
# `class_name`, not its registered "keras_vit>ImageModel": known by both names.
keras.saving.get_custom_objects().setdefault("ImageModel", ImageModel)
