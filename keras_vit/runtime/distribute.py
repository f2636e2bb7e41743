"""Choosing a `tf.distribute` strategy, splitting the batch, and the strategies' Keras fixes.

The model must be built and compiled inside `strategy.scope()` so that every variable (patch
embedding, class token, position table, blocks, head) is created as a mirrored variable;
`keras_vit.train.runs.train` does this for you. From Python:

    strategy = keras_vit.runtime.distribute.resolve_strategy("auto")
    with strategy.scope():
        model = keras_vit.ViT_Ti16(num_classes=10, image_size=32)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(dataset.batch(global_batch_size(64, strategy)), epochs=3)

Strategies (`STRATEGY_NAMES`):
  - "auto": a TPU if a resolver finds one, else a multi-worker strategy when TF_CONFIG
    describes more than one worker, else `MirroredStrategy` over the GPUs when there are
    more than one, else TensorFlow's default strategy (one device, no overhead).
  - "one_device": `OneDeviceStrategy` on the first GPU, or the CPU.
  - "mirrored": `MirroredStrategy` over every local GPU (or the logical CPUs, if the CPU was
    split with `tf.config.set_logical_device_configuration`).
  - "multi_worker": `MultiWorkerMirroredStrategy` configured from the `TF_CONFIG` environment
    variable (https://www.tensorflow.org/guide/distributed_training#TF_CONFIG).
  - "tpu": `TPUStrategy` from a `TPUClusterResolver` (the TPU name, or "local" on a TPU VM).
  - "model_parallel" (JAX only): the kernels sharded over the devices by
    `keras.distribution.ModelParallel` (`keras_vit.runtime.model_parallel`), set by
    `keras_vit.train.run_plan.plan_run` once the model's sizes are known.

The dtype policy and XLA choice live in `keras_vit.runtime.precision`.

TensorFlow-specific by design: the model code itself stays backend-neutral.
"""

from __future__ import annotations

import json
import logging
import os

import keras
import tensorflow as tf

logger = logging.getLogger(__name__)

STRATEGY_NAMES = ("auto", "one_device", "mirrored", "multi_worker", "tpu", "model_parallel")


class StrategyUnavailableError(RuntimeError):
    """The requested strategy cannot run here (no TPU, no or bad TF_CONFIG, ...)."""


class MultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """`tf.distribute.MultiWorkerMirroredStrategy` whose `reduce` works with Keras 3 `fit`.

    Keras 3 (checked with 3.15.1 on TensorFlow 2.21) makes two calls that the multi-worker
    strategy rejects (keras/src/backend/tensorflow/trainer.py):

      1. before the first step, `_symbolic_build` calls
         `strategy.reduce("MEAN", (x, y), axis=None)` on the whole batch *structure*, while
         the strategy reduces one value only ("Attempt to convert a value (PerReplica ...)
         to a Tensor");
      2. `reduce_per_replica` reduces each scalar log (loss, metrics) with
         `strategy.reduce("MEAN", value, axis=0)`, which fails on rank-0 values ("Invalid
         reduction dimension 0 for input with 0 dimensions").

    This subclass changes only `reduce`: it maps itself over structures and drops `axis` for
    rank-0 values (the cross-replica mean of a scalar is what Keras wants). Everything else is
    TensorFlow's strategy. `tests/runtime/test_distribute.py` checks that the plain strategy still
    fails, so the shim can be dropped when a Keras release fixes these call sites.
    """

    def reduce(self, reduce_op, value, axis):
        """Reduces `value` (a value or a nested structure) across replicas; see the class doc."""
        leaves = tf.nest.flatten(value)
        if len(leaves) != 1 or leaves[0] is not value:
            return tf.nest.map_structure(lambda leaf: self.reduce(reduce_op, leaf, axis), value)
        if axis is not None and _rank(self, value) == 0:
            axis = None
        return super().reduce(reduce_op, value, axis)


def _rank(strategy, value):
    """Static rank of a (possibly per-replica) value, or None if unknown."""
    local = strategy.experimental_local_results(value)[0]
    shape = getattr(local, "shape", None)
    return None if shape is None else tf.TensorShape(shape).rank


def resolve_strategy(name: str = "auto", *, tpu: str | None = None) -> tf.distribute.Strategy:
    """Returns the `tf.distribute.Strategy` called `name`.

    Args:
        name: one of `STRATEGY_NAMES` (default "auto"; see the module docstring).
        tpu: TPU name or address for "tpu"/"auto"; defaults to the `TPU_NAME` environment
            variable ("local" on a TPU VM).

    Returns:
        A strategy. Build and compile the model inside its `scope()`.

    Raises:
        ValueError: `name` is not one of `STRATEGY_NAMES`.
        StrategyUnavailableError: "tpu" without a reachable TPU; "multi_worker" without a
            valid TF_CONFIG; "model_parallel" on another backend than JAX.
    """
    if name not in STRATEGY_NAMES:
        raise ValueError(
            f"Unknown distribution strategy {name!r}; expected one of {list(STRATEGY_NAMES)}."
        )
    if name == "model_parallel":
        return _model_parallel_strategy()
    if keras.backend.backend() != "tensorflow":
        return _keras_backend_strategy(name)
    if name == "tpu":
        return _tpu_strategy(tpu)
    if name == "multi_worker":
        read_tf_config()
        return MultiWorkerMirroredStrategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "one_device":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    return _auto_strategy(tpu)


TENSORFLOW_ONLY_STRATEGIES = ("multi_worker", "tpu")


def _keras_backend_strategy(name: str) -> tf.distribute.Strategy:
    """`resolve_strategy` on Keras' JAX or PyTorch backend: TensorFlow's default strategy (a
    no-op scope; the variables are the backend's), after setting Keras' own distribution for
    "mirrored" on JAX: `keras.distribution.DataParallel` over every local device (each step's
    global batch split across them, gradients averaged); "multi_worker" on JAX: this process
    joins the cluster TF_CONFIG describes and `DataParallel` spans every process's devices
    (`keras_vit.runtime.jax_cluster`). "tpu", and "multi_worker" on PyTorch, are
    tf.distribute strategies: refused in one line."""
    backend = keras.backend.backend()
    if name == "multi_worker" and backend == "jax":
        from keras_vit.runtime import jax_cluster

        try:
            jax_cluster.start()
        except jax_cluster.ClusterError as error:
            raise StrategyUnavailableError(f"--strategy multi_worker on JAX: {error}") from None
        return tf.distribute.get_strategy()
    if name in TENSORFLOW_ONLY_STRATEGIES:
        raise StrategyUnavailableError(
            f"--strategy {name} is TensorFlow-only (tf.distribute); the Keras backend is "
            f"{backend!r}: run with KERAS_BACKEND=tensorflow, or use 'auto' or 'mirrored'."
        )
    keras.distribution.set_distribution(None)
    if name == "mirrored":
        if backend != "jax":
            raise StrategyUnavailableError(
                f"--strategy mirrored needs TensorFlow or JAX (keras.distribution.DataParallel);"
                f" the Keras backend is {backend!r}: use 'auto' (one device)."
            )
        devices = keras.distribution.list_devices()
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
        logger.info("%d local devices: keras.distribution.DataParallel", len(devices))
    return tf.distribute.get_strategy()


def _model_parallel_strategy() -> tf.distribute.Strategy:
    """`resolve_strategy("model_parallel")`: TensorFlow's default strategy (a no-op scope) on
    JAX, with no Keras distribution yet (`keras_vit.runtime.model_parallel.vit_model_parallel`
    needs the model's sizes: `plan_run` sets it); refused in one line on other backends."""
    backend = keras.backend.backend()
    if backend != "jax":
        raise StrategyUnavailableError(
            "--strategy model_parallel shards the kernels with keras.distribution.ModelParallel"
            f", which needs KERAS_BACKEND=jax; the Keras backend is {backend!r}: run with "
            "KERAS_BACKEND=jax, or use 'auto' or 'mirrored'."
        )
    keras.distribution.set_distribution(None)
    return tf.distribute.get_strategy()


def num_replicas(strategy) -> int:
    """How many replicas share each global batch: the devices along the batch axis of Keras'
    distribution where one is set (JAX: `DataParallel`, `ModelParallel`), else
    `strategy.num_replicas_in_sync`."""
    if keras.backend.backend() != "tensorflow":
        distribution = keras.distribution.distribution()
        if distribution is None or distribution.batch_dim_name is None:
            return 1
        mesh = distribution.device_mesh
        return int(mesh.shape[list(mesh.axis_names).index(distribution.batch_dim_name)])
    return strategy.num_replicas_in_sync


def _auto_strategy(tpu: str | None) -> tf.distribute.Strategy:
    """TPU > multi-worker (TF_CONFIG) > several GPUs > TensorFlow's default strategy."""
    if tpu or os.environ.get("TPU_NAME"):
        return _tpu_strategy(tpu)
    if "TF_CONFIG" in os.environ and _num_workers(read_tf_config()) > 1:
        logger.info("TF_CONFIG describes several workers: using MultiWorkerMirroredStrategy")
        return MultiWorkerMirroredStrategy()
    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) > 1:
        logger.info("%d GPUs: using MirroredStrategy", len(gpus))
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def _tpu_strategy(tpu: str | None) -> tf.distribute.Strategy:
    """Connects to a TPU and returns `TPUStrategy`; fails at once when there is none."""
    address = tpu or os.environ.get("TPU_NAME")
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=address)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, tf.errors.OpError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise StrategyUnavailableError(
            f"No TPU found for strategy 'tpu' (TPU name: {address!r}; set --tpu/TPU_NAME, or "
            f"use 'auto' on machines without a TPU). TensorFlow said: {first_line}"
        ) from None
    return tf.distribute.TPUStrategy(resolver)


def read_tf_config() -> dict:
    """Parses and checks the `TF_CONFIG` environment variable for multi-worker training.

    Returns:
        The parsed dict with `cluster` (a dict of job name -> list of "host:port") and `task`
        (`type`, `index`).

    Raises:
        StrategyUnavailableError: TF_CONFIG missing, not JSON, or without a cluster/task that
            names one of its own addresses.
    """
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        raise StrategyUnavailableError(
            "Strategy 'multi_worker' needs the TF_CONFIG environment variable, e.g. "
            '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
            '"task": {"type": "worker", "index": 0}}'
        )
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as error:
        raise StrategyUnavailableError(f"TF_CONFIG is not valid JSON: {error}") from None
    cluster = config.get("cluster") if isinstance(config, dict) else None
    task = config.get("task") if isinstance(config, dict) else None
    if not isinstance(cluster, dict) or not cluster or not isinstance(task, dict):
        raise StrategyUnavailableError(
            f"TF_CONFIG needs a 'cluster' dict and a 'task' dict. Received: TF_CONFIG={raw}"
        )
    members = cluster.get(task.get("type"))
    index = task.get("index")
    if (
        not isinstance(members, list)
        or isinstance(index, bool)
        or not isinstance(index, int)
        or not 0 <= index < len(members)
    ):
        raise StrategyUnavailableError(
            f"TF_CONFIG task {task} does not name a member of its cluster {cluster}."
        )
    return config


def _num_workers(config: dict) -> int:
    cluster = config["cluster"]
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def is_chief(strategy: tf.distribute.Strategy | None = None) -> bool:
    """True in the process that writes final files: always, except non-chief workers.

    With a multi-worker strategy the chief is task `chief`, or `worker` 0 when the cluster
    has no `chief` job (the convention of Keras and `tf.distribute`).
    """
    if keras.backend.backend() == "jax":  # several JAX processes: process 0
        from keras_vit.runtime import jax_cluster

        return jax_cluster.is_chief()
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    resolver = strategy.cluster_resolver
    cluster = resolver.cluster_spec().as_dict() if resolver is not None else {}
    if not cluster or resolver.task_type is None:
        return True  # local mode: no TF_CONFIG
    if resolver.task_type == "chief":
        return True
    return resolver.task_type == "worker" and resolver.task_id == 0 and "chief" not in cluster


def worker_index(strategy) -> int:
    """This worker's index among a job's processes: its JAX process index on JAX (several
    processes: `keras_vit.runtime.jax_cluster`), else the task index of `strategy`'s cluster
    (TF_CONFIG); names each non-chief worker's own folders in a run directory."""
    if keras.backend.backend() == "jax":
        import jax

        return jax.process_index()
    return strategy.cluster_resolver.task_id


def check_variables_in_scope(model, strategy: tf.distribute.Strategy) -> None:
    """Raises a clear error if some of `model`'s variables were not created by `strategy`.

    A model built outside `strategy.scope()` and then trained inside it fails deep in Keras'
    distributed optimizer update with a bare `AssertionError` (Keras 3.15; user report B39).
    Call this before `fit` to get a message that says what to do instead.

    Args:
        model: a built Keras model.
        strategy: the strategy `fit` will run under.

    Raises:
        ValueError: naming the variables created outside the scope.
    """
    if keras.backend.backend() != "tensorflow":
        return  # the backend's own variables; no tf.distribute scope to be created in
    outside = [
        variable.path
        for variable in model.variables
        if not strategy.extended.variable_created_in_scope(getattr(variable, "value", variable))
    ]
    if outside:
        shown = ", ".join(outside[:5]) + (
            f" and {len(outside) - 5} more" if len(outside) > 5 else ""
        )
        raise ValueError(
            f"{len(outside)} variables of model {model.name!r} were not created in the "
            f"distribution strategy scope of {type(strategy).__name__} ({shown}). Build and "
            "compile the model inside `with strategy.scope():`, then call fit."
        )


def per_replica_batch_size(global_batch_size: int, strategy: tf.distribute.Strategy) -> int:
    """Splits a global batch evenly across the strategy's replicas.

    Args:
        global_batch_size: examples per step over all replicas (what `dataset.batch` takes).
        strategy: the strategy; its `num_replicas_in_sync` replicas share the batch.

    Returns:
        `global_batch_size // num_replicas_in_sync` (on JAX, the devices of Keras'
        `DataParallel`, which takes the global batch and splits it: `num_replicas`).

    Raises:
        ValueError: the global batch is not a positive multiple of the number of replicas.
    """
    replicas = num_replicas(strategy)
    if (
        isinstance(global_batch_size, bool)
        or not isinstance(global_batch_size, int)
        or global_batch_size <= 0
        or global_batch_size % replicas
    ):
        raise ValueError(
            f"The global batch size must be a positive multiple of the number of replicas "
            f"({replicas} with {strategy_name(strategy)}), so each replica gets the same "
            f"share. Received: batch_size={global_batch_size!r}"
        )
    return global_batch_size // replicas


def strategy_name(strategy) -> str:
    """What runs the steps, for messages and config.json: the Keras distribution's class on
    JAX (`ModelParallel` with its mesh, "ModelParallel (batch 1 x model 2)"), else the
    strategy's class."""
    if keras.backend.backend() != "tensorflow":
        distribution = keras.distribution.distribution()
        if isinstance(distribution, keras.distribution.ModelParallel):
            mesh = distribution.device_mesh
            names, sizes = mesh.axis_names, mesh.shape
            mesh = " x ".join(f"{name} {size}" for name, size in zip(names, sizes, strict=True))
            return f"ModelParallel ({mesh})"
        return type(distribution or strategy).__name__
    return type(strategy).__name__


def clip_after_all_reduce(optimizer) -> None:
    """Makes `optimizer`'s `global_clipnorm` clip the gradient summed over replicas.

    Keras 3 (checked with 3.15.1, `BaseOptimizer.apply` then the TensorFlow optimizer's
    `_backend_update_step`) clips each replica's gradient *before* the all-reduce, so with
    `global_clipnorm` and several replicas the update differs from the one-device update of
    the same global batch (the paper clips the global norm of the batch's gradient, section
    4.1 / appendix B.1). This replaces the instance's `_clip_gradients` by one that reduces
    the gradients first (one more all-reduce per step), measures their global norm, and
    scales the local gradients by `min(1, clipnorm / norm)`; Keras' own all-reduce then sums
    the scaled gradients, which is the clipped global gradient. Outside a multi-replica
    context, or without `global_clipnorm`, Keras' clipping runs unchanged. The optimizer's
    config (and so a saved `.keras`) is unchanged.

    Args:
        optimizer: a Keras optimizer (e.g. `model.optimizer` after `compile`).
    """
    keras_clip = optimizer._clip_gradients

    def clip_gradients(grads):
        context = tf.distribute.get_replica_context()
        clipnorm = optimizer.global_clipnorm
        if not clipnorm or context is None or context.num_replicas_in_sync == 1:
            return keras_clip(grads)
        present = [g for g in grads if g is not None]
        norm = tf.linalg.global_norm(context.all_reduce("SUM", present))
        scale = clipnorm / tf.maximum(norm, clipnorm)
        return [None if g is None else g * tf.cast(scale, g.dtype) for g in grads]

    optimizer._clip_gradients = clip_gradients
