"""TFDS-style split strings for in-memory and folder sources."""

from __future__ import annotations

import numpy as np
import pytest

from keras_vit.data.splits import SplitSpec, complement, parse_split, slice_counts, slice_indices


@pytest.mark.parametrize(
    "text, spec",
    [
        ("train", SplitSpec("train")),
        ("train[:90%]", SplitSpec("train", None, "90%")),
        ("test[100:]", SplitSpec("test", "100", None)),
        ("validation[-5:]", SplitSpec("validation", "-5", None)),
    ],
)
def test_parse_split(text, spec):
    assert parse_split(text) == spec


@pytest.mark.parametrize("text", ["train+test", "train[::2]", "", "train[a:b]", 3])
def test_bad_split_strings_are_refused(text):
    with pytest.raises(ValueError, match="split"):
        parse_split(text)


def test_slices_are_per_class_in_stored_order():
    labels = np.array([0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 2])
    # Class 0 at 0,2,4,6,8; class 1 at 1,3,5,7,9; class 2 at 10,11.
    np.testing.assert_array_equal(slice_indices(labels, parse_split("t[:40%]")), [0, 1, 2, 3, 10])
    np.testing.assert_array_equal(slice_indices(labels, parse_split("t[-1:]")), [8, 9, 11])
    np.testing.assert_array_equal(slice_indices(labels, parse_split("t")), np.arange(12))


def test_seeded_slices_carve_a_stratified_random_validation_split():
    labels = np.repeat(np.arange(4), [50, 30, 20, 10])
    held = slice_indices(labels, parse_split("train[90%:]"), seed=7)
    rest = slice_indices(labels, parse_split("train[:90%]"), seed=7)
    assert not set(held) & set(rest)  # disjoint
    np.testing.assert_array_equal(np.sort(np.concatenate([held, rest])), np.arange(len(labels)))
    np.testing.assert_array_equal(np.bincount(labels[held]), [5, 3, 2, 1])  # a tenth per class
    assert not np.array_equal(held, slice_indices(labels, parse_split("train[90%:]")))  # random
    again = slice_indices(labels, parse_split("train[90%:]"), seed=7)
    other = slice_indices(labels, parse_split("train[90%:]"), seed=8)
    np.testing.assert_array_equal(held, again)  # seeded
    assert not np.array_equal(held, other)


@pytest.mark.parametrize(
    "split, expected",
    [
        ("train[90%:]", "train[:90%]"),
        ("train[:10%]", "train[10%:]"),
        ("train[-20:]", "train[:-20]"),
        ("train", None),
        ("train[10%:90%]", None),
    ],
)
def test_complement(split, expected):
    assert complement(split) == expected


@pytest.mark.parametrize("split", ["t[:90%]", "t[90%:]", "t[-3:]", "t[2:5]", "t"])
def test_slice_counts_count_as_slice_indices_takes(split):
    labels = np.repeat(np.arange(3), [7, 11, 4])
    spec = parse_split(split)
    kept = labels[slice_indices(labels, spec, seed=1)]
    assert slice_counts([7, 11, 4], spec) == np.bincount(kept, minlength=3).tolist()
