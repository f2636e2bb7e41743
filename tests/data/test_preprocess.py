"""Per-image preprocessing: scaling, channels, Inception crop, flip (release input pipeline)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from keras_vit.data import preprocess
from keras_vit.data.preprocess import Augmentation


def test_scaling_maps_0_255_to_minus_one_one():
    pixels = np.array([0, 1, 127, 128, 254, 255], np.uint8)
    np.testing.assert_allclose(
        preprocess.scale_to_unit_range(pixels).numpy(), (pixels - 127.5) / 127.5, atol=1e-7
    )


def test_rgb_to_gray_is_itu_601_luma_and_gray_to_rgb_repeats():
    rgb = np.random.default_rng(1).uniform(0, 255, (4, 5, 3)).astype(np.float32)
    gray = preprocess.convert_channels(tf.constant(rgb), 1).numpy()
    np.testing.assert_allclose(gray[..., 0], rgb @ [0.2989, 0.5870, 0.1140], rtol=1e-3)
    back = preprocess.convert_channels(tf.constant(gray), 3).numpy()
    np.testing.assert_array_equal(back, np.repeat(gray, 3, axis=-1))


def test_eval_preprocess_resizes_and_is_deterministic():
    image = np.random.default_rng(2).integers(0, 256, (20, 30, 3)).astype(np.uint8)
    first = preprocess.eval_preprocess(image, (10, 15), 3).numpy()
    second = preprocess.eval_preprocess(image, (10, 15), 3).numpy()
    assert first.shape == (10, 15, 3) and first.dtype == np.float32
    np.testing.assert_array_equal(first, second)
    # 2x downscale with half-pixel bilinear = mean of each 2x2 block.
    blocks = image.astype(np.float64).reshape(10, 2, 15, 2, 3).mean((1, 3))
    np.testing.assert_allclose(first, (blocks - 127.5) / 127.5, atol=1e-5)


def test_inception_crop_respects_area_and_aspect_ranges():
    image = tf.zeros((100, 100, 1))
    for i in range(20):
        crop = preprocess.inception_crop(image, tf.constant([i, 7]), (0.3, 0.6), (0.75, 4 / 3))
        height, width = crop.shape[0], crop.shape[1]
        assert 0.3 * 1e4 * 0.9 <= height * width <= 0.6 * 1e4 * 1.1
        assert 0.75 * 0.9 <= width / height <= 4 / 3 * 1.1


def test_train_preprocess_without_augmentation_equals_eval():
    image = np.random.default_rng(3).integers(0, 256, (16, 16, 1)).astype(np.uint8)
    plain = Augmentation(crop_area_range=None, flip=False)
    trained = preprocess.train_preprocess(image, tf.constant([1, 2]), 8, 1, plain).numpy()
    np.testing.assert_allclose(trained, preprocess.eval_preprocess(image, 8, 1).numpy())


def test_flip_is_a_mirror_image_and_seeded():
    image = np.random.default_rng(4).integers(0, 256, (8, 8, 3)).astype(np.uint8)
    flip_only = Augmentation(crop_area_range=None, flip=True)
    scaled = (image - 127.5) / 127.5
    outputs = [
        preprocess.train_preprocess(image, tf.constant([s, 0]), 8, 3, flip_only).numpy()
        for s in range(16)
    ]
    flipped = [np.allclose(o, scaled[:, ::-1], atol=1e-6) for o in outputs]
    kept = [np.allclose(o, scaled, atol=1e-6) for o in outputs]
    assert all(f or k for f, k in zip(flipped, kept, strict=False)) and any(flipped) and any(kept)
    again = preprocess.train_preprocess(image, tf.constant([5, 0]), 8, 3, flip_only).numpy()
    np.testing.assert_array_equal(again, outputs[5])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"crop_area_range": (0.0, 1.0)}, "crop_area_range"),
        ({"crop_area_range": (0.8, 0.5)}, "crop_area_range"),
        ({"aspect_ratio_range": (2.0, 1.0)}, "aspect_ratio_range"),
        ({"mixup_alpha": 0.0}, "mixup_alpha"),
    ],
)
def test_bad_augmentation_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Augmentation(**kwargs)
