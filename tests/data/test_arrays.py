"""NumPy arrays (x, y) as a data source."""

from __future__ import annotations

import re

import numpy as np
import pytest

from keras_vit import data


def _all(dataset):
    xs, ys = zip(*[(x.numpy(), y.numpy()) for x, y in dataset], strict=False)
    return np.concatenate(xs), np.concatenate(ys)


def test_arrays_eval_pipeline_is_the_scaled_pixels():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (10, 12, 12, 3), dtype=np.uint8)
    x[0, 0, 0] = 0
    x[1, 0, 0] = 255
    y = np.arange(10) % 5
    images, labels = _all(data.load((x, y), image_size=12, batch_size=4, training=False))
    expected = (x.astype(np.float64) - 127.5) / 127.5
    assert images.shape == (10, 12, 12, 3) and images.dtype == np.float32
    np.testing.assert_allclose(images, expected, atol=1e-7)
    assert images.min() == -1.0 and images.max() == 1.0
    np.testing.assert_array_equal(labels, y)


def test_arrays_gray_without_channel_axis_and_describe():
    x = np.full((6, 8, 8), 51, np.uint8)
    y = np.array([0, 1, 2, 0, 1, 2])
    info = data.describe((x, y))
    assert (info.num_classes, info.channels, info.image_size) == (3, 1, (8, 8))
    assert info.num_examples == {"train": 6}
    images, _ = _all(data.load((x, y), image_size=16, batch_size=6, training=False, channels=3))
    assert images.shape == (6, 16, 16, 3)
    np.testing.assert_allclose(images, (51 - 127.5) / 127.5, atol=1e-6)


def test_arrays_slices_are_per_class_and_disjoint():
    x = np.arange(20, dtype=np.uint8).reshape(20, 1, 1).repeat(2, 1).repeat(2, 2)
    y = np.arange(20) % 2
    head = data.load((x, y), "train[:60%]", image_size=2, batch_size=None, training=False)
    tail = data.load((x, y), "train[60%:]", image_size=2, batch_size=None, training=False)
    head_labels = [int(label) for _, label in head]
    tail_labels = [int(label) for _, label in tail]
    assert np.bincount(head_labels).tolist() == [6, 6]
    assert np.bincount(tail_labels).tolist() == [4, 4]
    pixel = lambda ds: {int(round(float(img[0, 0, 0]) * 127.5 + 127.5)) for img, _ in ds}  # noqa: E731
    assert pixel(head) | pixel(tail) == set(range(20)) and not pixel(head) & pixel(tail)


@pytest.mark.parametrize(
    "source, match",
    [
        ((np.zeros((4, 8)), np.zeros(4)), "x must be"),
        ((np.zeros((4, 8, 8)), np.zeros(3)), "y must be"),
        (
            (np.zeros((4, 8, 8)), np.array([0, 1.5, 2, 3])),
            r"label 1.5 at index 1 is not an integer class id",
        ),
        ((np.zeros((4, 8, 8, 2)), np.zeros(4)), "channels"),
        ((np.zeros((4, 8, 8)),), "pair"),
    ],
)
def test_bad_arrays_are_refused(source, match):
    with pytest.raises(ValueError, match=match):
        data.load(source, image_size=8, batch_size=2, training=False)


@pytest.mark.parametrize("split", ["test", "validation", "banana", "test[:50%]"])
def test_a_split_other_than_train_is_refused_naming_it(split):
    """A pair of arrays is the 'train' split: 'test' gave the same images back, silently."""
    x, y = np.zeros((6, 8, 8), "uint8"), np.arange(6) % 3
    with pytest.raises(
        ValueError, match=f"has one split, 'train'.*received split {re.escape(repr(split))}"
    ):
        data.load((x, y), split, image_size=8, batch_size=2, training=False)
    with pytest.raises(ValueError, match="has one split, 'train'"):
        data.class_counts((x, y), split)


def test_slices_of_the_train_split_are_still_read():
    x, y = np.zeros((10, 8, 8), "uint8"), np.arange(10) % 2
    first = data.load((x, y), "train[:80%]", image_size=8, batch_size=10, training=False)
    rest = data.load((x, y), "train[80%:]", image_size=8, batch_size=10, training=False)
    assert sum(len(b[1]) for b in first) + sum(len(b[1]) for b in rest) == 10
