"""Batches that split over the devices of Keras' distribution (`keras.distribution`, JAX).

Under `keras.distribution.DataParallel` (or a `ModelParallel` with a batch axis) every batch
is cut into equal shards, one per device along the batch axis; a batch that does not split
fails with jax's `IndivisibleError` in the middle of an epoch, after weights moved
(keras-team/keras #21167), and a failed `predict` leaves the model without weights. For
array inputs the batches are known up front: `fit` and `evaluate` refuse before the first
step, naming the batch and the device count; `predict` pads the last batch with copies of
the last image and drops their outputs (inference treats samples independently).
"""

from __future__ import annotations

import keras
import numpy as np

KERAS_DEFAULT_BATCH = 32  # `fit`, `evaluate` and `predict` without `batch_size`


def batch_shards() -> int:
    """How many equal parts each process's batch is cut into: the devices along the batch
    axis of Keras' distribution, per process; 1 without a distribution (or off JAX)."""
    distribution = keras.distribution.distribution() if _on_jax() else None
    axis = getattr(distribution, "batch_dim_name", None)
    if distribution is None or axis is None:
        return 1
    mesh = distribution.device_mesh
    shards = int(mesh.shape[list(mesh.axis_names).index(axis)])
    import jax

    return max(1, shards // jax.process_count())


def _on_jax() -> bool:
    return keras.backend.backend() == "jax"


def array_count(data) -> int | None:
    """The number of samples in `data` (an array, or a dict/tuple whose first entry is
    one); None for datasets, generators and other inputs read batch by batch."""
    if hasattr(data, "element_spec") or data is None:
        return None
    if isinstance(data, dict):
        data = next(iter(data.values()), None)
    elif isinstance(data, (tuple, list)):
        data = data[0] if data else None
    shape = getattr(data, "shape", None)
    return None if not shape else int(shape[0])


def batch_sizes(count: int, batch_size: int | None) -> list[int]:
    """The distinct batch sizes Keras cuts `count` samples into at `batch_size`."""
    batch_size = batch_size or KERAS_DEFAULT_BATCH
    if count <= batch_size:
        return [count]
    return sorted({batch_size, count % batch_size} - {0}, reverse=True)


def check_batches_split(data, batch_size, call: str, argument: str = "x") -> None:
    """Raises a one-line ValueError when array `data` at `batch_size` gives a batch that does
    not split over `batch_shards()` devices; passes without a distribution and for data read
    batch by batch (datasets, generators), where Keras' own error applies."""
    shards = batch_shards()
    count = array_count(data)
    if shards == 1 or count is None:
        return
    for size in batch_sizes(count, batch_size):
        if size % shards:
            raise ValueError(
                f"{call} on {count} samples of `{argument}` at batch_size "
                f"{batch_size or KERAS_DEFAULT_BATCH} makes a batch of {size}, which does not "
                f"split over the {shards} devices of keras.distribution's batch axis: pass a "
                f"batch_size and a sample count that are multiples of {shards} (drop "
                f"{size % shards} or add {shards - size % shards} samples)."
            )


def padded_for_predict(data, batch_size):
    """`(data, count)` for `predict` under a distribution: `data` with copies of its last
    sample appended until every batch splits over `batch_shards()` devices, and the number
    of real samples (whose outputs to keep); `(data, None)` where nothing needs padding.

    Raises:
        ValueError: a `batch_size` that is itself not a multiple of the device count.
    """
    shards = batch_shards()
    count = array_count(data)
    if shards == 1 or count is None or _splits(count, batch_size, shards):
        return data, None
    padded = count + -count % shards
    batch = batch_size or KERAS_DEFAULT_BATCH
    if padded > batch and batch % shards:  # full batches of `batch` too
        raise ValueError(
            f"predict at batch_size {batch} makes batches of {batch}, which do not split over "
            f"the {shards} devices of keras.distribution's batch axis: pass a batch_size that "
            f"is a multiple of {shards}."
        )
    extra = padded - count
    return keras.tree.map_structure(lambda array: _pad(array, extra), data), count


def kept_outputs(outputs, count):
    """`predict`'s outputs without the padded samples' (`count`: from `padded_for_predict`)."""
    if count is None:
        return outputs
    return keras.tree.map_structure(lambda array: array[:count], outputs)


def _splits(count, batch_size, shards) -> bool:
    return all(size % shards == 0 for size in batch_sizes(count, batch_size))


def _pad(array, extra):
    array = np.asarray(array)
    return np.concatenate([array, np.repeat(array[-1:], extra, axis=0)], axis=0)
