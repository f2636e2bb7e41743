"""Run-time checks that only the TensorFlow backend needs (kept out of `keras_vit.layers`,
whose code uses `keras.ops` only so that it runs on every backend)."""

from __future__ import annotations

import tensorflow as tf


def assert_image_size(images, image_size, channels):
    """`images` (batch, height, width, channels), passed through once their spatial size is
    asserted to equal `image_size` (height, width) at run time.

    Raises (when the graph runs) `tf.errors.InvalidArgumentError` naming the expected
    `(None, height, width, channels)` and the shape found.
    """
    height, width = image_size
    shape = tf.shape(images)
    check = tf.debugging.Assert(
        tf.reduce_all(tf.equal(shape[1:3], [height, width])),
        [
            f"Input images are incompatible with the model: expected shape=(None, {height}, "
            f"{width}, {channels}), found shape=",
            shape,
        ],
        summarize=4,
    )
    with tf.control_dependencies([check]):
        return tf.identity(images)


def assert_divisible(images, patch_size):
    """`images` (batch, height, width, channels), passed through once each of height and
    width is asserted to be a multiple of `patch_size` (height, width) at run time.

    Raises (when the graph runs) `tf.errors.InvalidArgumentError` naming the patch size, the
    rule and the shape found.
    """
    patch = tf.constant([int(patch_size[0]), int(patch_size[1])])
    shape = tf.shape(images)
    check = tf.debugging.Assert(
        tf.reduce_all(tf.equal(shape[1:3] % patch, 0)),
        [
            f"Image height and width must each be a multiple of the patch size "
            f"{tuple(int(p) for p in patch_size)} (the image is cut into non-overlapping "
            "patches, paper section 3.1; dynamic_image_size does not crop); found shape=",
            shape,
        ],
        summarize=4,
    )
    with tf.control_dependencies([check]):
        return tf.identity(images)
