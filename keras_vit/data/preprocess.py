"""Per-image preprocessing of the release: resize, scale to [-1, 1]; Inception crop and flip.

Source: the official JAX release's input pipeline (vit_jax/input_pipeline.py) and the
paper's appendix B.1.1. Training: Inception crop
(`tf.image.sample_distorted_bounding_box`, area 0.05-1, aspect 3/4-4/3) -> resize -> random
horizontal flip; evaluation: plain resize. Both scale pixel values [0, 255] to [-1, 1] as
(x - 127.5) / 127.5. The random ops are stateless and take an explicit seed pair, so a pipeline
with a fixed `shuffle_seed` is reproducible.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf
from keras import ops

from keras_vit._validation import to_pair
from keras_vit.spec.input_scaling import MEAN_STD


@dataclasses.dataclass(frozen=True)
class Augmentation:
    """Training-time augmentation settings (evaluation never augments).

    Args:
        crop_area_range: (min, max) fraction of the image area kept by the Inception crop;
            None for no crop. The release uses (0.05, 1.0) for natural images.
        aspect_ratio_range: (min, max) width/height ratio of the crop (release: 3/4 to 4/3).
        flip: random horizontal flip (True for natural images, False for digits).
        randaugment: apply `keras.layers.RandAugment(value_range=(0, 255))` after the resize
            (needs 3 channels).
        mixup_alpha: None, or the alpha of `keras.layers.MixUp` applied to each batch; labels
            then become one-hot float32 `(batch, num_classes)` mixtures.
    """

    crop_area_range: tuple[float, float] | None = (0.05, 1.0)
    aspect_ratio_range: tuple[float, float] = (3 / 4, 4 / 3)
    flip: bool = True
    randaugment: bool = False
    mixup_alpha: float | None = None

    def __post_init__(self):
        if self.crop_area_range is not None:
            low, high = self.crop_area_range
            if not 0 < low <= high <= 1:
                raise ValueError(
                    "`crop_area_range` must be (min, max) with 0 < min <= max <= 1. "
                    f"Received: crop_area_range={self.crop_area_range!r}"
                )
        low, high = self.aspect_ratio_range
        if not 0 < low <= high:
            raise ValueError(
                "`aspect_ratio_range` must be (min, max) with 0 < min <= max. "
                f"Received: aspect_ratio_range={self.aspect_ratio_range!r}"
            )
        if self.mixup_alpha is not None and not self.mixup_alpha > 0:
            raise ValueError(
                f"`mixup_alpha` must be None or > 0. Received: mixup_alpha={self.mixup_alpha!r}"
            )


NATURAL_AUGMENTATION = Augmentation()
"""The release's fine-tuning augmentation: Inception crop (0.05-1) + horizontal flip."""

DIGIT_AUGMENTATION = Augmentation(
    crop_area_range=(0.75, 1.0), aspect_ratio_range=(0.85, 1.0 / 0.85), flip=False
)
"""For handwritten digits: a mild crop (a small zoom and shift); no flip (a flipped 2 is no 2)."""

NO_AUGMENTATION = Augmentation(crop_area_range=None, flip=False)


def preprocess_inputs(images):
    """Maps pixel values in [0, 255] to [-1, 1] as the release does: (x - 127.5) / 127.5.

    keras_vit models expect inputs already scaled this way (they do not rescale inside);
    the data pipelines in `keras_vit.data` and the SavedModel export apply it for you.
    Public as `keras_vit.preprocess_inputs`.

    Args:
        images: array or tensor `(..., height, width, channels)` of any real or integer dtype,
            values in [0, 255].

    Returns:
        A float32 tensor of the same shape: 0 -> -1, 127.5 -> 0, 255 -> 1.
    """
    images = _cast_float32(images)
    return (images - 127.5) / 127.5


def _cast_float32(images):
    """`images` as float32: with TensorFlow's cast for a `tf.Tensor` (inside a tf.data map,
    where a symbolic tensor is no array that JAX's or PyTorch's `keras.ops` could take), with
    `keras.ops` otherwise (an array or a tensor of the Keras backend)."""
    if isinstance(images, tf.Tensor):
        return tf.cast(images, tf.float32)
    return ops.cast(images, "float32")


scale_to_unit_range = preprocess_inputs
"""The pipeline's older name of `preprocess_inputs` (kept for existing imports)."""


def from_unit_range(images, preprocessing: str):
    """Re-scales images in [-1, 1] (what keras_vit's pipelines produce) to a model's input.

    Args:
        images: tensor `(..., channels)` in [-1, 1].
        preprocessing: "[-1,1]" (returned unchanged), "imagenet" or "clip": pixel/255 =
            (x + 1) / 2, then `(p - mean) / std` per channel with ImageNet's mean (0.485,
            0.456, 0.406) and std (0.229, 0.224, 0.225) (timm's IMAGENET_DEFAULT_MEAN /
            _STD), or OpenAI CLIP's (`CLIP_MEAN`, `CLIP_STD`; timm's OPENAI_CLIP_MEAN / _STD).

    Raises:
        ValueError: an unknown `preprocessing`, or a mean/std on images without 3 channels.
    """
    if preprocessing == "[-1,1]":
        return images
    if preprocessing not in MEAN_STD:
        raise ValueError(
            f"preprocessing must be '[-1,1]', 'imagenet' or 'clip'. Received: {preprocessing!r}"
        )
    if images.shape[-1] != 3:
        raise ValueError(
            f"The {preprocessing} mean/std needs 3 channels. Received: shape {tuple(images.shape)}"
        )
    mean = np.asarray(MEAN_STD[preprocessing][0], np.float32)
    std = np.asarray(MEAN_STD[preprocessing][1], np.float32)
    return ((_cast_float32(images) + 1.0) * 0.5 - mean) / std


def convert_channels(image, channels: int):
    """Converts a `(height, width, c)` image (c in 1-4) to `channels` (1, 3 or 4) channels,
    by keras_vit's one rule (`keras_vit.data.decode.to_channels`): 1 -> 3 repeats the gray
    value; 3 or 4 -> 1 takes the ITU-R 601 luma (`tf.image.rgb_to_grayscale`); alpha is
    dropped for 1 and 3 channels and added opaque (255) for 4.

    Raises:
        ValueError: `channels` not 1, 3 or 4.
    """
    from keras_vit.data.decode import to_channels

    if image.shape[-1] == channels:
        return image
    return to_channels(image, channels)


def resize(image, image_size):
    """Bilinear resize (half-pixel, as tf.image.resize) unless the size already matches."""
    height, width = to_pair("image_size", image_size)
    shape = tf.shape(image)
    return tf.cond(
        tf.logical_and(tf.equal(shape[0], height), tf.equal(shape[1], width)),
        lambda: tf.cast(image, tf.float32),
        lambda: tf.image.resize(tf.cast(image, tf.float32), (height, width), method="bilinear"),
    )


def eval_preprocess(image, image_size, channels: int):
    """Deterministic evaluation path: resize to `image_size`, convert channels, scale.

    Args:
        image: `(height, width, c)` pixel values in [0, 255] (any size, any real dtype).
        image_size: int or (height, width).
        channels: 1, 3 or 4.

    Returns:
        float32 `(image_height, image_width, channels)` in [-1, 1].
    """
    height, width = to_pair("image_size", image_size)
    image = convert_channels(resize(image, (height, width)), channels)
    image = tf.ensure_shape(image, (height, width, channels))
    return scale_to_unit_range(image)


def inception_crop(image, seed, area_range, aspect_ratio_range):
    """Random crop of the release: a box with area fraction in `area_range` and aspect ratio in
    `aspect_ratio_range` (`tf.image.stateless_sample_distorted_bounding_box`, no object boxes,
    min_object_covered 0, 10 attempts, whole image as fallback)."""
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image),
        bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
        seed=seed,
        min_object_covered=0.0,
        area_range=area_range,
        aspect_ratio_range=aspect_ratio_range,
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    crop = tf.slice(image, begin, size)
    crop.set_shape([None, None, image.shape[-1]])
    return crop


def train_preprocess(image, seed, image_size, channels: int, augmentation: Augmentation):
    """Training path: Inception crop -> resize -> random flip -> channels -> scale.

    Args:
        image: `(height, width, c)` pixel values in [0, 255].
        seed: int32/int64 tensor of shape (2,), the stateless random seed of this example.
        image_size: int or (height, width).
        channels: 1, 3 or 4.
        augmentation: an `Augmentation` (RandAugment and MixUp are applied by the pipeline).

    Returns:
        float32 `(image_height, image_width, channels)` in [-1, 1].
    """
    height, width = to_pair("image_size", image_size)
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    if augmentation.crop_area_range is not None:
        image = inception_crop(
            image, crop_seed, augmentation.crop_area_range, augmentation.aspect_ratio_range
        )
    image = resize(image, (height, width))
    if augmentation.flip:
        image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    image = convert_channels(image, channels)
    image = tf.ensure_shape(image, (height, width, channels))
    return scale_to_unit_range(image)
