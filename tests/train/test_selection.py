"""`keras_vit.train.selection`: the test split is never used for selection unless asked."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from keras_vit.data import splits
from keras_vit.train import selection as test_selection

BOUNDS = st.one_of(
    st.none(),
    st.integers(-60, 60).map(str),
    st.integers(0, 100).map(lambda p: f"{p}%"),
)


def split_string(name, start, stop):
    return name if start is None and stop is None else f"{name}[{start or ''}:{stop or ''}]"


@given(st.sampled_from(["test", "train"]), BOUNDS, BOUNDS, BOUNDS, BOUNDS, st.integers(1, 50))
def test_overlap_is_a_shared_example_of_the_sliced_split(name, a0, a1, b0, b1, size):
    first, second = split_string("test", a0, a1), split_string(name, b0, b1)
    # the reference: the examples `keras_vit.data` keeps for each string, intersected
    labels = np.zeros(size, np.int64)
    kept = [set(splits.slice_indices(labels, splits.parse_split(s))) for s in (first, second)]
    shared = name == "test" and bool(kept[0] & kept[1])
    assert test_selection.overlaps(first, second, size) == shared


def test_unknown_sizes_assume_an_overlap_except_for_complements():
    assert test_selection.overlaps("test[:90%]", "test[:10%]")
    assert not test_selection.overlaps("test[:90%]", "test[90%:]")
    assert not test_selection.overlaps("train", "test")


def test_an_overlap_is_refused_naming_the_flags_unless_allowed(caplog):
    chosen = {"--validation-split": "test[:50]", "train_split": "train"}
    with pytest.raises(ValueError, match=r"--validation-split 'test\[:50\]' shares images with "
                       r"the test split 'test'.*--allow-test-selection"):  # fmt: skip
        test_selection.check_selection(chosen, ("the test split", "test"), sizes={"test": 99})
    found = test_selection.check_selection(chosen, ("the test split", "test"), allow=True)
    assert found == ["--validation-split 'test[:50]' shares images with the test split 'test'"]
    assert "Selection on the test split, as asked (--allow-test-selection)" in caplog.text
    assert test_selection.check_selection(chosen, ("the test split", None)) == []
