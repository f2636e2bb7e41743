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


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def model_input_preprocessing(model) -> str:
    """The input scaling a keras_vit model records: "[-1,1]" (default) or "imagenet".

    Read from the model's `embedding` layer (`PatchEmbed.input_preprocessing`), which
    `keras_vit.from_checkpoint` sets from the checkpoint (timm in1k models: ImageNet
    mean/std). A model without that layer gets "[-1,1]".
    """
    from keras_vit.checkpoints.naming import find_vit_model

    try:
        embed = find_vit_model(model).get_layer("embedding")
    except ValueError:
        return "[-1,1]"
    return getattr(embed, "input_preprocessing", "[-1,1]")


def from_unit_range(images, preprocessing: str):
    """Re-scales images in [-1, 1] (what keras_vit's pipelines produce) to a model's input.

    Args:
        images: tensor `(..., channels)` in [-1, 1].
        preprocessing: "[-1,1]" (returned unchanged) or "imagenet": pixel/255 = (x + 1) / 2,
            then `(p - mean) / std` per channel with ImageNet's mean (0.485, 0.456, 0.406)
            and std (0.229, 0.224, 0.225) (timm's IMAGENET_DEFAULT_MEAN / _STD).

    Raises:
        ValueError: an unknown `preprocessing`, or "imagenet" on images without 3 channels.
    """
    if preprocessing == "[-1,1]":
        return images
    if preprocessing != "imagenet":
        raise ValueError(
            f"preprocessing must be '[-1,1]' or 'imagenet'. Received: {preprocessing!r}"
        )
    if images.shape[-1] != 3:
        raise ValueError(
            f"ImageNet mean/std needs 3 channels. Received: shape {tuple(images.shape)}"
        )
    mean = ops.convert_to_tensor(IMAGENET_MEAN, "float32")
    std = ops.convert_to_tensor(IMAGENET_STD, "float32")
    return ((ops.cast(images, "float32") + 1.0) * 0.5 - mean) / std
