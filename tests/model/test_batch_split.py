"""keras_vit.model.batch_split: the batch sizes Keras cuts an array into, the refusal and the
predict padding (the JAX lane runs them under a real DataParallel: tests/backends/test_jax.py)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_vit.model import batch_split


def keras_batches(count, batch_size):
    """The batch lengths of `count` samples at `batch_size`, cut as Keras' array adapter does."""
    return {
        len(range(start, min(start + batch_size, count))) for start in range(0, count, batch_size)
    }


@settings(max_examples=50, deadline=None)
@given(count=st.integers(1, 200), batch_size=st.integers(1, 64), shards=st.integers(1, 8))
def test_batch_sizes_and_padding_follow_keras_batching(count, batch_size, shards):
    assert set(batch_split.batch_sizes(count, batch_size)) == keras_batches(count, batch_size)
    data = {"images": np.arange(count, dtype="float32")}
    original = batch_split.batch_shards
    batch_split.batch_shards = lambda: shards
    try:
        padded, kept = batch_split.padded_for_predict(data, batch_size)
    except ValueError as error:
        assert f"batch_size {batch_size}" in str(error) and batch_size % shards
        return
    finally:
        batch_split.batch_shards = original
    total = len(padded["images"])
    assert all(size % shards == 0 for size in keras_batches(total, batch_size))
    assert total - count < shards
    np.testing.assert_array_equal(padded["images"][:count], data["images"])
    assert kept in (None, count) and (kept is None) == (total == count)


def test_without_a_distribution_nothing_changes():
    x = np.zeros((9, 2), "float32")
    assert batch_split.batch_shards() == 1
    batch_split.check_batches_split(x, 4, "fit")
    assert batch_split.padded_for_predict(x, 4) == (x, None)


def test_the_refusal_names_the_batch_and_the_devices(monkeypatch):
    monkeypatch.setattr(batch_split, "batch_shards", lambda: 2)
    with pytest.raises(ValueError, match="fit on 9 samples .* batch of 1, .* the 2 devices"):
        batch_split.check_batches_split(np.zeros((9, 1)), 4, "fit")
    batch_split.check_batches_split(np.zeros((8, 1)), 4, "fit")
    batch_split.check_batches_split(iter([]), 4, "fit")  # read batch by batch: Keras decides
