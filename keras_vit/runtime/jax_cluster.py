"""Several JAX processes as one data-parallel job: `keras.distribution.initialize` from the
cluster description the TensorFlow path reads, then `DataParallel` over every process's
devices.

The cluster comes from `TF_CONFIG` (its `chief` job first if it has one, then its `worker`
list; the first member is JAX's coordinator, process 0) or, without `TF_CONFIG`, from Keras'
own variables `KERAS_DISTRIBUTION_JOB_ADDRESSES`, `KERAS_DISTRIBUTION_NUM_PROCESSES` and
`KERAS_DISTRIBUTION_PROCESS_ID`. Where a process has no accelerator the CPU collectives run
over gloo (`jax_cpu_collectives_implementation`), set before JAX starts its backend, and
gloo's "[Gloo] Rank N is connected to M peer ranks" lines are kept off stdout
(`keras_vit.runtime.gloo_lines`) unless debug logging is on (`keras-vit --verbose`,
`KERAS_VIT_VERBOSE=1`).

In a user's own script, before anything computes on JAX::

    import keras_vit.runtime.jax_cluster as jax_cluster

    distribution = jax_cluster.start()       # every process runs the same script
    model = keras_vit.ViT_B16(num_classes=10)
    model.compile(...)
    model.fit(dataset.batch(global_batch))   # a tf.data.Dataset: Keras gives each process
                                             # its part of every global batch
    if jax_cluster.is_chief():
        model.save("model.keras")

`keras-vit train/finetune --strategy multi_worker` (`keras_vit.train.runs`) cuts each process's
share of every batch itself (`process_share`, under `process_local_input`), agrees on the
backup to resume from through `all_gather_rows`, and evaluates the test split on the chief
alone (`without_distribution`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os

import keras

from keras_vit._lazy import verbose_from_env
from keras_vit.runtime import gloo_lines

logger = logging.getLogger(__name__)

KERAS_VARIABLES = (
    "KERAS_DISTRIBUTION_JOB_ADDRESSES",
    "KERAS_DISTRIBUTION_NUM_PROCESSES",
    "KERAS_DISTRIBUTION_PROCESS_ID",
)


class ClusterError(ValueError):
    """The environment describes no usable cluster of JAX processes."""


def cluster_from_environment(environ=None) -> tuple[str, int, int]:
    """`(coordinator "host:port", number of processes, this process's id)`.

    From `TF_CONFIG` (the `chief` job, then the `worker` list; task `chief` is process 0,
    worker i is i, or i + 1 after a chief), else from the `KERAS_DISTRIBUTION_*` variables.

    Raises:
        ClusterError: neither is set, or what is set names no member of its cluster.
    """
    environ = os.environ if environ is None else environ
    if environ.get("TF_CONFIG"):
        return _from_tf_config(environ["TF_CONFIG"])
    if all(environ.get(name) for name in KERAS_VARIABLES):
        addresses = environ["KERAS_DISTRIBUTION_JOB_ADDRESSES"].split(",")
        try:
            count = int(environ["KERAS_DISTRIBUTION_NUM_PROCESSES"])
            index = int(environ["KERAS_DISTRIBUTION_PROCESS_ID"])
        except ValueError:
            count = index = -1
        if not 0 <= index < count:
            raise ClusterError(
                "KERAS_DISTRIBUTION_PROCESS_ID must be in [0, KERAS_DISTRIBUTION_NUM_PROCESSES)"
                f". Received: {index}, {count}"
            )
        return addresses[0].strip(), count, index
    raise ClusterError(
        'Several JAX processes need TF_CONFIG (e.g. {"cluster": {"worker": '
        '["host1:12345", "host2:12345"]}, "task": {"type": "worker", "index": 0}}) or '
        f"all of {', '.join(KERAS_VARIABLES)}."
    )


def _from_tf_config(raw: str) -> tuple[str, int, int]:
    try:
        config = json.loads(raw)
        cluster, task = config["cluster"], config["task"]
        members = list(cluster.get("chief", [])) + list(cluster.get("worker", []))
        offset = len(cluster.get("chief", [])) if task["type"] == "worker" else 0
        index = offset + int(task["index"])
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ClusterError(f"TF_CONFIG names no task of a chief/worker cluster: {raw}") from None
    if task["type"] not in ("chief", "worker") or not 0 <= index < len(members):
        raise ClusterError(f"TF_CONFIG task {task} is not a member of its cluster {cluster}.")
    return members[0], len(members), index


def start(environ=None):
    """Joins this process to the cluster (`keras.distribution.initialize`), sets and returns
    `keras.distribution.DataParallel` over every process's devices. Call it before anything
    computes on JAX; every process runs the same program.

    Raises:
        ClusterError: no cluster described (see `cluster_from_environment`), or a backend
            other than JAX.
    """
    if keras.backend.backend() != "jax":
        raise ClusterError(
            f"keras_vit.runtime.jax_cluster needs KERAS_BACKEND=jax; the backend is "
            f"{keras.backend.backend()!r} (TensorFlow: --strategy multi_worker uses "
            "tf.distribute)."
        )
    coordinator, count, index = cluster_from_environment(environ)
    import jax

    if not _has_accelerator():
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        if not (verbose_from_env() or logger.isEnabledFor(logging.DEBUG)):
            gloo_lines.hide()
    keras.distribution.initialize(job_addresses=coordinator, num_processes=count, process_id=index)
    devices = keras.distribution.list_devices()
    distribution = keras.distribution.DataParallel(devices=devices)
    keras.distribution.set_distribution(distribution)
    logger.info(
        "JAX process %d of %d (coordinator %s): DataParallel over %d devices",
        index, count, coordinator, len(devices),
    )  # fmt: skip
    return distribution


def _has_accelerator() -> bool:
    """Whether JAX is configured for a GPU or TPU (without starting its backends)."""
    platforms = os.environ.get("JAX_PLATFORMS", "")
    if platforms:
        return any(name in platforms for name in ("gpu", "cuda", "rocm", "tpu"))
    import importlib.util

    return any(
        importlib.util.find_spec(name) is not None
        for name in ("jax_cuda12_plugin", "jax_cuda13_plugin", "libtpu", "jax_rocm60_plugin")
    )


def process_count() -> int:
    """How many JAX processes run this job (`jax.process_count()`); 1 on other backends."""
    if keras.backend.backend() != "jax":
        return 1
    import jax

    return jax.process_count()


def is_chief() -> bool:
    """True in JAX process 0 (the one that writes final files), and in a single process."""
    if keras.backend.backend() != "jax":
        return True
    import jax

    return jax.process_index() == 0


def process_share(dataset, what: str = "data"):
    """`dataset` (a batched `tf.data.Dataset` of the global batches, the same in every
    process) with each batch cut to this process's share: of a batch of `n`, process `i` of
    `P` keeps rows `[i * n / P, (i + 1) * n / P)`, which `jax.make_array_from_process_local_data`
    (Keras' JAX trainer, under `process_local_input`) puts back together as the global batch.
    A static batch size stays static (`B / P`). Unchanged in a single process.

    The cut replaces Keras' own auto-sharding (`Distribution.distribute_dataset`), which
    needs a batch size it can read from the dataset's graph (`compute_batch_size`; a
    `repeat`, `skip` or label check after the `batch` hides it) and cuts a last partial batch
    into unequal shares. Here a batch whose size `n` is not a multiple of every process's
    devices together stops the run with InvalidArgumentError naming `what`, `n` and the
    device count, in every process at the same batch (`keras_vit.train.run_plan` refuses
    such batches of the CLI's splits before the first step).
    """
    count = process_count()
    if count == 1:
        return dataset
    import jax
    import tensorflow as tf

    index, devices = jax.process_index(), jax.device_count()

    def cut(part, size):
        share = size // count
        shape = part.shape
        local = part[index * share : (index + 1) * share]
        static = shape[0] // count if shape.rank and shape[0] is not None else None
        return tf.ensure_shape(local, [static, *shape[1:]]) if shape.rank else local

    def share(*batch):
        parts = tf.nest.flatten(batch)
        size = tf.shape(parts[0], out_type=tf.int64)[0]
        check = tf.debugging.Assert(
            tf.equal(size % devices, 0),
            [f"{what}: a batch that does not split over the {devices} devices of the "
             f"{count} JAX processes; batch size:", size],
        )  # fmt: skip
        with tf.control_dependencies([check]):
            size = tf.identity(size)
        shared = tf.nest.pack_sequence_as(batch, [cut(part, size) for part in parts])
        return shared if len(batch) > 1 else shared[0]

    return dataset.map(share)


@contextlib.contextmanager
def process_local_input():
    """Within it, Keras takes each process's input as that process's share of the global
    batch (`auto_shard_dataset` off: the input comes from `process_share`). Nothing changes
    in a single process or without a distribution."""
    distribution = keras.distribution.distribution() if process_count() > 1 else None
    if distribution is None:
        yield
        return
    before = distribution.auto_shard_dataset
    distribution.auto_shard_dataset = False
    try:
        yield
    finally:
        distribution.auto_shard_dataset = before


@contextlib.contextmanager
def without_distribution():
    """Within it, Keras places new variables and inputs on this process's devices alone (no
    distribution), for what one process computes by itself: the chief's test evaluation of a
    saved model, which the other processes do not join."""
    distribution = keras.distribution.distribution() if keras.backend.backend() == "jax" else None
    if distribution is None:
        yield
        return
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(distribution)


def all_gather_rows(row) -> list:
    """Every JAX process's `row` (non-negative ints below 2**32), in process order: one
    `jax.experimental.multihost_utils.process_allgather` (a collective: every process must
    call it at the same point), each value sent as two 16-bit halves (JAX's integers are 32
    bits wide unless x64 is on). `[row]` in a single process."""
    import numpy as np

    if process_count() == 1:
        return [list(row)]
    from jax.experimental import multihost_utils

    values = np.asarray(row, np.uint64)
    halves = np.stack([values >> 16, values & 0xFFFF], axis=-1).astype(np.int32)
    gathered = np.asarray(multihost_utils.process_allgather(halves)).astype(np.int64)
    return [[int(high << 16 | low) for high, low in rows] for rows in gathered]
