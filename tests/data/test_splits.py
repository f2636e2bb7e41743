"""TFDS-style split strings for in-memory and folder sources."""

from __future__ import annotations

import numpy as np
import pytest

from keras_vit.data.splits import SplitSpec, parse_split, slice_indices


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
