"""Label checks inside `tf.data` pipelines, for labels that cannot all be read before work
(TFDS splits, a caller's own dataset): `checked_labels` raises InvalidArgumentError at the
first example whose label is not an integer class id in [0, num_classes), naming the label,
its index in the batch and the range. In-memory labels are checked whole, before any work,
by `keras_vit._validation.check_labels` (one rule, `label_problem`)."""

from __future__ import annotations

import tensorflow as tf


def assert_labels(labels, num_classes: int, where: str):
    """Returns `labels` after an assert that each is an integer in [0, num_classes).

    Sparse labels only: float labels of rank >= 2 whose last axis is `num_classes` are
    one-hot (or MixUp-mixed) targets and pass unchecked. tf.data runs its functions outside
    XLA, so the assert always runs (unlike inside a `jit_compile=True` train step)."""
    if labels.dtype.is_floating and labels.shape.rank and labels.shape.rank >= 2:
        if labels.shape[-1] == num_classes:
            return labels
    flat = tf.reshape(labels, [-1])
    values = tf.cast(flat, tf.float64)
    valid = (values == tf.floor(values)) & (values >= 0) & (values < num_classes)
    first = tf.argmin(tf.cast(valid, tf.int32))
    check = tf.debugging.Assert(
        tf.reduce_all(valid),
        [
            f"Bad labels in {where}: each must be an integer class id in [0, {num_classes}); "
            "first bad label and its index in the batch:",
            flat[first],
            first,
        ],
        summarize=3,
    )
    with tf.control_dependencies([check]):
        return tf.identity(labels)


def checked_labels(dataset: tf.data.Dataset, num_classes: int, where: str) -> tf.data.Dataset:
    """`dataset` of (images, labels[, sample weights]) with `assert_labels` on each label
    tensor (the element structure, cardinality and order are unchanged)."""

    def check(images, labels, *rest):
        return (images, assert_labels(labels, num_classes, where), *rest)

    return dataset.map(check)
