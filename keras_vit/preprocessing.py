"""Input scaling used by the release: pixel values [0, 255] -> [-1, 1]."""

from __future__ import annotations

from keras import ops


def preprocess_inputs(images):
    """Maps pixel values in [0, 255] to [-1, 1] as the release does: (x - 127.5) / 127.5.

    keras_vit models expect inputs already scaled this way (they do not rescale inside);
    the data pipelines in `keras_vit.data` and the SavedModel export apply it for you.

    Args:
        images: array or tensor `(..., height, width, channels)` of any real or integer dtype,
            values in [0, 255].

    Returns:
        A float32 tensor of the same shape: 0 -> -1, 127.5 -> 0, 255 -> 1.
    """
    images = ops.cast(images, "float32")
    return (images - 127.5) / 127.5
