"""Choosing a `tf.distribute` strategy, splitting the batch, mixed precision and XLA switches.

The model must be built and compiled inside `strategy.scope()` so that every variable (patch
embedding, class token, position table, blocks, head) is created as a mirrored variable;
`keras_vit.runs.train` does this for you. From Python:

    strategy = keras_vit.distribute.resolve_strategy("auto")
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

TensorFlow-specific by design (see DESIGN.md): the model code itself stays backend-neutral.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os

import keras
import tensorflow as tf

logger = logging.getLogger(__name__)

STRATEGY_NAMES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")
PRECISION_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")


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
    TensorFlow's strategy. `tests/test_distribute.py` checks that the plain strategy still
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
            valid TF_CONFIG.
    """
    if name not in STRATEGY_NAMES:
        raise ValueError(
            f"Unknown distribution strategy {name!r}; expected one of {list(STRATEGY_NAMES)}."
        )
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
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    resolver = strategy.cluster_resolver
    cluster = resolver.cluster_spec().as_dict() if resolver is not None else {}
    if not cluster or resolver.task_type is None:
        return True  # local mode: no TF_CONFIG
    if resolver.task_type == "chief":
        return True
    return resolver.task_type == "worker" and resolver.task_id == 0 and "chief" not in cluster


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
        `global_batch_size // num_replicas_in_sync`.

    Raises:
        ValueError: the global batch is not a positive multiple of the number of replicas.
    """
    replicas = strategy.num_replicas_in_sync
    if (
        isinstance(global_batch_size, bool)
        or not isinstance(global_batch_size, int)
        or global_batch_size <= 0
        or global_batch_size % replicas
    ):
        raise ValueError(
            f"The global batch size must be a positive multiple of the number of replicas "
            f"({replicas} with {type(strategy).__name__}), so each replica gets the same share. "
            f"Received: batch_size={global_batch_size!r}"
        )
    return global_batch_size // replicas


def set_mixed_precision(policy: str | None) -> str:
    """Sets Keras' global dtype policy before the model is built.

    Args:
        policy: "mixed_float16" (GPUs), "mixed_bfloat16" (TPUs, recent CPUs/GPUs), or
            "float32"/None for full precision. The ViT head keeps float32 logits under any
            policy, so losses are computed in float32.

    Returns:
        The policy name now in force.

    Raises:
        ValueError: an unknown policy name.
    """
    name = policy or "float32"
    if name not in PRECISION_POLICIES:
        raise ValueError(
            f"Unknown mixed precision policy {policy!r}; expected one of "
            f"{list(PRECISION_POLICIES)}."
        )
    keras.config.set_dtype_policy(name)
    return name


def resolve_jit_compile(jit_compile: bool | str | None, strategy: tf.distribute.Strategy):
    """The `jit_compile` value to pass to `model.compile` (XLA on or off).

    Args:
        jit_compile: True (compile steps with XLA), False, or None/"auto" to let Keras decide
            (XLA on GPUs/TPUs, off on CPU-only machines and under a distribution strategy).
        strategy: the strategy the model will train under. XLA is always on with TPUStrategy,
            and off (True and "auto" become False, logged) where `xla_unsupported_reason`
            gives a reason: several replicas on CPUs.

    Returns:
        True, False or "auto", for `model.compile(jit_compile=...)`.
    """
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return True
    reason = xla_unsupported_reason(strategy)
    if reason and (jit_compile is True or jit_compile == "auto" or jit_compile is None):
        logger.info("XLA off (jit_compile=False): %s", reason)
        return False
    if jit_compile is None or jit_compile == "auto":
        return "auto"
    return bool(jit_compile)


def xla_unsupported_reason(strategy: tf.distribute.Strategy) -> str | None:
    """Why `strategy` cannot run XLA-compiled steps here, or None if it can.

    The one home of the "several CPU replicas: no XLA" rule (`resolve_jit_compile`,
    `choose_precision` and the CLI's refusal of an explicit `--jit-compile` all ask it).
    TensorFlow 2.21's XLA has no CPU collectives: a multi-worker strategy on CPUs fails in
    the first step ("Collectives are not yet implemented for CPU devices when compiling with
    XLA", then the process aborts), and `MirroredStrategy` over several (logical) CPUs fails
    with "Trying to access resource ... located in device CPU:1 from device CPU:0". Both work
    without XLA.
    """
    multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    mirrored = isinstance(strategy, tf.distribute.MirroredStrategy)
    if not (multi_worker or (mirrored and strategy.num_replicas_in_sync > 1)):
        return None
    devices = strategy.extended.worker_devices
    on_cpu = all((tf.DeviceSpec.from_string(d).device_type or "").upper() == "CPU" for d in devices)
    if not on_cpu:
        return None
    return (
        f"{type(strategy).__name__} runs several replicas or workers on CPU devices, and "
        "TensorFlow's XLA has no collectives for CPUs"
    )


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


# --- choosing the precision and the compiler ------------------------------------------------

AUTO = "auto"
BFLOAT16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
"""/proc/cpuinfo flags of x86 CPUs with bfloat16 matrix instructions (AMX tiles, AVX-512
BF16 dot products), which TensorFlow's oneDNN kernels use for bfloat16 matrix products."""
MIN_BFLOAT16_WIDTH = 192
"""Narrowest `hidden_dim` for which mixed_bfloat16 through oneDNN is picked over float32 with
XLA on a CPU with bfloat16 units. Measured (docs/performance.md, training step @224, batch
16): Ti/16 (D 192) 1.44x faster in bfloat16 on an AVX-512 BF16 CPU, within 4% of float32 +
XLA on an AMX one; S/16 (D 384) and B/16 (D 768) faster on both. Narrower models (the
default `keras-vit train` model has D 64) keep float32 with XLA: no measurement shows
bfloat16 paying there."""


@dataclasses.dataclass(frozen=True)
class PrecisionChoice:
    """The dtype policy and XLA setting for a model on this device, and why.

    Attributes:
        policy: a Keras dtype policy name of `PRECISION_POLICIES`.
        jit_compile: the `model.compile(jit_compile=...)` value (True: XLA, False: TensorFlow's
            own kernels, oneDNN on CPU).
        reason: one sentence saying why (the device and what was detected).
    """

    policy: str
    jit_compile: bool
    reason: str

    def describe(self) -> str:
        """One line: `precision mixed_bfloat16, XLA off (reason)`."""
        return f"precision {self.policy}, XLA {'on' if self.jit_compile else 'off'} ({self.reason})"

    def as_dict(self) -> dict:
        """`{"mixed_precision": ..., "jit_compile": ..., "reason": ...}` (for config.json)."""
        return {
            "mixed_precision": self.policy,
            "jit_compile": self.jit_compile,
            "reason": self.reason,
        }


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The feature flags the CPU reports (the `flags` line of /proc/cpuinfo on Linux).

    Returns an empty set where the file is missing or unreadable (other systems): then no
    bfloat16 matrix units are assumed.
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def model_width(model) -> int | None:
    """The token width (`hidden_dim`) of a keras_vit model, or None when it has no
    `embedding` layer with one."""
    try:
        return int(model.get_layer("embedding").hidden_dim)
    except (ValueError, AttributeError, TypeError):
        return None


def _device_kind(strategy) -> str:
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return "tpu"
    return "gpu" if tf.config.list_logical_devices("GPU") else "cpu"


def _gpu_policy() -> tuple[str, str]:
    """(policy, reason) for the first GPU, from its compute capability."""
    details = {}
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
    capability = tuple(details.get("compute_capability") or (0, 0))
    name = (
        f"{details.get('device_name', 'GPU')} (compute capability {capability[0]}.{capability[1]})"
    )
    if capability >= (8, 0):
        return "mixed_bfloat16", f"{name}: bfloat16 tensor cores"
    if capability >= (7, 0):
        return "mixed_float16", f"{name}: float16 tensor cores"
    return "float32", f"{name}: no tensor cores"


def choose_precision(
    hidden_dim: int | None = None,
    *,
    strategy: tf.distribute.Strategy | None = None,
    mixed_precision: str | None = AUTO,
    jit_compile: bool | str | None = AUTO,
    flags: frozenset[str] | None = None,
) -> PrecisionChoice:
    """The dtype policy and XLA setting that run a ViT of width `hidden_dim` fastest here.

    `"auto"` (the default of both) picks:
      - TPU: mixed_bfloat16 with XLA (TPUStrategy always compiles).
      - GPU: mixed_bfloat16 (compute capability >= 8.0) or mixed_float16 (7.x) with XLA.
      - CPU with bfloat16 matrix units (`amx_bf16` or `avx512_bf16` in the CPU flags) and
        `hidden_dim >= MIN_BFLOAT16_WIDTH`: mixed_bfloat16 without XLA (TensorFlow's oneDNN
        kernels use those units, XLA's CPU backend does not).
      - any other CPU case: float32 with XLA.
      - on CPU, XLA is off under a strategy with several replicas or workers, even when
        `jit_compile=True` is given (`xla_unsupported_reason`: XLA's collectives do not run
        on CPU).
    A value given for one of the two is kept and the other is chosen to suit it (XLA given
    on CPU: float32, as XLA's bfloat16 products do not use the bfloat16 units; a reduced
    precision given on CPU: XLA off).

    Args:
        hidden_dim: the model's token width (`model_width(model)`); None: unknown, treated
            as narrow.
        strategy: the `tf.distribute.Strategy` the model will run under (default: current).
        mixed_precision: "auto", or a policy of `PRECISION_POLICIES` (None means float32).
        jit_compile: "auto" (or None), True or False.
        flags: the CPU flags (default: `cpu_flags()`, read at run time).

    Returns:
        A `PrecisionChoice`; `choice.describe()` is the line to log.

    Raises:
        ValueError: an unknown policy or a `jit_compile` other than "auto"/None/True/False.
    """
    if mixed_precision is not None and mixed_precision not in (AUTO, *PRECISION_POLICIES):
        raise ValueError(
            f"Unknown mixed precision policy {mixed_precision!r}; expected 'auto' or one of "
            f"{list(PRECISION_POLICIES)}."
        )
    if jit_compile not in (AUTO, None, True, False):
        raise ValueError(f"`jit_compile` must be 'auto', True or False. Received: {jit_compile!r}")
    policy = "float32" if mixed_precision is None else mixed_precision
    jit = AUTO if jit_compile is None else jit_compile
    strategy = strategy or tf.distribute.get_strategy()
    kind = _device_kind(strategy)
    if kind == "tpu":
        return PrecisionChoice(
            "mixed_bfloat16" if policy == AUTO else policy, True, "TPU: XLA always"
        )
    if kind == "gpu":
        auto_policy, reason = _gpu_policy()
        return PrecisionChoice(
            auto_policy if policy == AUTO else policy,
            True if jit == AUTO else bool(jit),
            reason + ("" if policy == AUTO else f"; {policy} as given") + ", XLA",
        )
    return _cpu_choice(hidden_dim, strategy, policy, jit, cpu_flags() if flags is None else flags)


def _cpu_choice(hidden_dim, strategy, policy, jit, flags) -> PrecisionChoice:
    units = [flag for flag in BFLOAT16_CPU_FLAGS if flag in flags]
    no_xla = xla_unsupported_reason(strategy)
    if no_xla and jit is True:  # the CLI refuses an explicit --jit-compile here first
        logger.info("XLA off (jit_compile=False): %s", no_xla)
        jit = AUTO
    reasons = [f"CPU with {', '.join(units)}" if units else "CPU without bfloat16 matrix units"]
    if policy == AUTO:
        wide = hidden_dim is not None and hidden_dim >= MIN_BFLOAT16_WIDTH
        width = "width unknown" if hidden_dim is None else f"hidden_dim {hidden_dim}"
        if units and wide and jit is not True:
            policy = "mixed_bfloat16"
            reasons.append(f"{width} >= {MIN_BFLOAT16_WIDTH}: bfloat16 products on oneDNN")
        else:
            policy = "float32"
            if units and jit is True:
                reasons.append("XLA given, and XLA's CPU products do not use bfloat16 units")
            elif units:
                reasons.append(f"{width} < {MIN_BFLOAT16_WIDTH}: bfloat16 does not pay")
    else:
        reasons.append(f"{policy} as given")
    if no_xla:
        jit = False
        reasons.append(f"XLA off: {no_xla}")
    elif jit == AUTO:
        jit = policy == "float32"
        if not jit:
            reasons.append("XLA off: XLA's CPU backend does not use the bfloat16 units")
    else:
        reasons.append(f"XLA {'on' if jit else 'off'} as given")
    return PrecisionChoice(policy, bool(jit), "; ".join(reasons))


FLOAT32_LAYERS = ("head",)
"""Layers keras_vit builds in float32 under every policy (float32 logits)."""


def with_dtype_policy(model: keras.Model, policy: str) -> keras.Model:
    """A copy of a functional model whose layers compute under `policy`, same weights.

    A loaded `.keras` model keeps the dtype policy it was built with; this rebuilds it from
    its config with every layer's policy replaced (the `head` stays float32, so logits stay
    float32) and copies the weights (variables stay float32 under the mixed policies).

    Args:
        model: a functional Keras model (keras_vit's ViT, hybrid or fine-tuned models).
        policy: one of `PRECISION_POLICIES`.

    Returns:
        `model` itself when its layers already use `policy`, else the copy.

    Raises:
        ValueError: an unknown policy.
    """
    if policy not in PRECISION_POLICIES:
        raise ValueError(
            f"Unknown mixed precision policy {policy!r}; expected one of "
            f"{list(PRECISION_POLICIES)}."
        )
    config = model.get_config()
    target = keras.dtype_policies.serialize(keras.DTypePolicy(policy))
    changed = False
    for layer in config["layers"]:
        dtype = layer["config"].get("dtype")
        if not isinstance(dtype, dict) or layer["name"] in FLOAT32_LAYERS:
            continue  # input layers carry a plain dtype string
        if dtype.get("config", {}).get("name") != policy:
            layer["config"]["dtype"] = target
            changed = True
    if not changed:
        return model
    clone = model.__class__.from_config(config)
    clone.set_weights(model.get_weights())
    return clone
