"""The rules that pick a dtype policy and the compiler (XLA or not) for "auto" on this device.

  - TPU: mixed_bfloat16 with XLA (TPUStrategy always compiles).
  - GPU: mixed_bfloat16 (compute capability >= 8.0) or mixed_float16 (7.x) with XLA.
  - Keras' JAX backend on CPU: XLA, float32, without probing (`jax_cpu_choice`).
  - CPU: measured. On first use for a (CPU model, core count, TensorFlow version, model
    shape class), `keras_vit.runtime.precision_probe` times one encoder block's training step in
    each candidate setting (float32 with XLA, float32 without, mixed_bfloat16 without) for
    a few seconds and caches the figures in the user's cache folder; the fastest wins.
    Where probing is impossible or off (`KERAS_VIT_PRECISION_PROBE=off`, several replicas or
    JAX processes, an unknown width), the flag rule below is the choice: mixed_bfloat16
    without XLA on CPUs with bfloat16 matrix units (`amx_bf16`, `avx512_bf16`) for
    `hidden_dim >= MIN_BFLOAT16_WIDTH`, else float32 with XLA. Among the settings the probe
    finds within `precision_probe.TIE` of the fastest, one without XLA is kept (no compile at
    start), and of those the flag rule's (`tie_winner`).
  - on CPU, XLA is off under a strategy with several replicas or workers
    (`precision.xla_unsupported_reason`: XLA's collectives do not run on CPU).

The policies, their checks and the `PrecisionChoice` record are `keras_vit.runtime.precision`'s.
TensorFlow and Keras are imported inside the functions.
"""

from __future__ import annotations

import dataclasses
import logging

from keras_vit.runtime import precision_probe
from keras_vit.runtime.precision import (
    AUTO,
    PrecisionChoice,
    check_jit_compile,
    check_policy,
    xla_unsupported_reason,
)

logger = logging.getLogger(__name__)

BFLOAT16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
"""/proc/cpuinfo flags of x86 CPUs with bfloat16 matrix instructions (AMX tiles, AVX-512
BF16 dot products), which TensorFlow's oneDNN kernels use for bfloat16 matrix products."""
MIN_BFLOAT16_WIDTH = 192
"""Narrowest `hidden_dim` for which the flag rule picks mixed_bfloat16 through oneDNN over
float32 with XLA on a CPU with bfloat16 units. Measured (docs/performance_log.md, training step
@224, batch 16): Ti/16 (D 192) 1.44x faster in bfloat16 on an AVX-512 BF16 CPU, within 4% of
float32 + XLA on an AMX one; S/16 (D 384) and B/16 (D 768) faster on both. Other hosts differ
(docs/performance_log.md: an Intel host with `avx512_bf16` runs bfloat16 at half the float32
rate), which is why "auto" measures on CPUs and uses this rule only as the prior."""


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


JAX_XLA_REASON = "JAX on CPU: XLA always"
"""The reason's first clause for "auto" on Keras' JAX backend on CPU (`jax_cpu_choice`)."""

JAX_XLA_DETAIL = (
    "nothing probed: op by op a JAX step runs ~15x slower, and XLA's CPU products do not "
    "use bfloat16 units"
)
"""Why (the reason's second clause): on Keras' JAX backend `jit_compile=False` dispatches
every operation on its own, which the probe measured 15.7x slower than the compiled step for
the default `keras-vit train` block (docs/performance.md), and under XLA float32 is the
policy on CPU (the flag rule's)."""


def _keras_backend() -> str:
    import keras

    return keras.backend.backend()


def choose_precision(
    hidden_dim: int | None = None,
    *,
    strategy=None,
    mixed_precision: str | None = AUTO,
    jit_compile: bool | str | None = AUTO,
    flags: frozenset[str] | None = None,
    tokens: int | None = None,
    probe: bool | str | None = None,
    mlp_dim: int | None = None,
    num_heads: int | None = None,
) -> PrecisionChoice:
    """The dtype policy and XLA setting that run a ViT of width `hidden_dim` fastest here.

    See the module docstring for the rules of "auto". A value given for one of the two is
    kept and the other is chosen to suit it: on CPU, among the measured candidates that have
    it (XLA given: float32, as XLA's CPU products do not use bfloat16 units; a reduced
    precision given: XLA off).

    Args:
        hidden_dim: the model's token width (`model_width(model)`); None: unknown, treated
            as narrow and not probed.
        strategy: the `tf.distribute.Strategy` the model will run under (default: current).
        mixed_precision: "auto", or a policy of `POLICIES` (None means float32).
        jit_compile: "auto" (or None), True or False.
        flags: the CPU flags for the flag rule (default: `cpu_flags()`, read at run time).
        tokens: tokens per image of the model, the probe's shape (default 197, a 224 image in
            16-pixel patches plus the class token); `precision_probe.model_shape(model)` or
            `precision_probe.shape_from_kwargs(kwargs)` give it with `mlp_dim`/`num_heads`.
        probe: measure on CPU (True), never (False), use cached figures only ("cached":
            the one-off commands), or as `KERAS_VIT_PRECISION_PROBE` says (None, the
            default: on unless it is "off"/"0"/"false").
        mlp_dim, num_heads: the model's MLP width and heads for the probe block (defaults
            4 * hidden_dim and hidden_dim / 64).

    Returns:
        A `PrecisionChoice`; `choice.describe()` is the line to log.

    Raises:
        ValueError: an unknown policy or a `jit_compile` other than "auto"/None/True/False.
    """
    policy = check_policy(mixed_precision, allow_auto=True)
    jit = check_jit_compile(jit_compile)
    import tensorflow as tf

    strategy = strategy or tf.distribute.get_strategy()
    kind = _device_kind(strategy)
    if kind == "tpu":
        return PrecisionChoice(
            policy if policy != AUTO else "mixed_bfloat16", True, "TPU: XLA always"
        )
    if kind == "gpu":
        auto_policy, reason = _gpu_policy()
        return PrecisionChoice(
            auto_policy if policy == AUTO else policy,
            True if jit == AUTO else bool(jit),
            reason + ("" if policy == AUTO else f"; {policy} as given") + ", XLA",
        )
    if jit == AUTO and _keras_backend() == "jax":
        return jax_cpu_choice(policy)  # nothing to measure: op by op is never the faster
    flags = cpu_flags() if flags is None else flags
    prior = flag_rule(hidden_dim, strategy, policy, jit, flags)
    shape = {"tokens": tokens, "mlp_dim": mlp_dim, "num_heads": num_heads}
    return measured_choice(prior, hidden_dim, strategy, policy, jit, shape=shape, probe=probe)


def jax_cpu_choice(policy) -> PrecisionChoice:
    """ "auto" XLA on Keras' JAX backend on CPU, nothing probed: float32 for `policy` "auto",
    else `policy` as given; the reason names no CPU flag (none is read)."""
    given = "float32" if policy == AUTO else policy
    clause = JAX_XLA_REASON + ("" if policy == AUTO else f"; {policy} as given")
    return PrecisionChoice(given, True, f"{clause}; {JAX_XLA_DETAIL}")


def _device_kind(strategy) -> str:
    import tensorflow as tf

    if isinstance(strategy, tf.distribute.TPUStrategy):
        return "tpu"
    return "gpu" if tf.config.list_logical_devices("GPU") else "cpu"


def _gpu_policy() -> tuple[str, str]:
    """(policy, reason) for the first GPU, from its compute capability."""
    import tensorflow as tf

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


def flag_rule(hidden_dim, strategy, policy, jit, flags, jit_reason="as given") -> PrecisionChoice:
    """The CPU choice from the CPU flags and the width alone (the prior of the probe).

    Args:
        hidden_dim: the model width, or None. strategy: the strategy.
        policy: "auto" or a checked policy. jit: "auto", True or False.
        flags: the CPU flags (`cpu_flags()`).
        jit_reason: why `jit` (True or False) is what it is, for the reason text.
    """
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
        reasons.append(f"XLA {'on' if jit else 'off'} {jit_reason}")
    return PrecisionChoice(policy, bool(jit), "; ".join(reasons))


def measured_choice(prior, hidden_dim, strategy, policy, jit, *, shape=None, probe=None):
    """The CPU choice by measurement (`keras_vit.runtime.precision_probe`), or `prior` (the flag
    rule's choice) where there is nothing to measure or probing is off or fails.

    Args:
        prior: `flag_rule`'s choice. hidden_dim, strategy, policy, jit: as `flag_rule`.
        shape: {"tokens", "mlp_dim", "num_heads"} of the model (None values: the probe's
            defaults, `precision_probe.probe_shape`). probe: as `choose_precision`.

    Returns:
        A `PrecisionChoice` with `source` "probe" or "cache" and the figures, or `prior`.
    """
    candidates = [
        precision_probe.setting_label(p, x)
        for p, x in precision_probe.CANDIDATES
        if policy in (AUTO, p) and jit in (AUTO, x)
    ]
    mode = precision_probe.probe_mode(probe)
    why_not = _why_not_measured(mode, hidden_dim, strategy)
    if len(candidates) < 2:
        return prior  # the given values leave one setting (or none the probe times)
    if why_not:
        return dataclasses.replace(prior, reason=f"{prior.reason}; flag rule ({why_not})")
    try:
        found = precision_probe.probe_figures(
            hidden_dim, **(shape or {}), refresh=mode == "refresh", measure=mode != "cached"
        )
    except Exception as error:  # the probe must never stop a run
        logger.warning(
            "Precision probe failed (%s: %s); using the flag rule.", type(error).__name__, error
        )
        return dataclasses.replace(prior, reason=f"{prior.reason}; flag rule (probe failed)")
    if found is None:  # mode "cached", nothing cached for this host and shape
        why = "not probed for a one-off command, and no cached probe of this shape"
        return dataclasses.replace(prior, reason=f"{prior.reason}; flag rule ({why})")
    figures, date, cached = found
    timed = {label: figures[label] for label in candidates if label in figures}
    if len(timed) < 2:
        return prior
    return _pick(prior, timed, figures, hidden_dim, date, cached, policy, jit, shape)


def _why_not_measured(mode, hidden_dim, strategy) -> str | None:
    """Why the probe does not run here, or None."""
    if mode == "off":
        return "probe off: KERAS_VIT_PRECISION_PROBE or probe=False"
    if hidden_dim is None:
        return "width unknown, nothing to probe"
    if xla_unsupported_reason(strategy) or strategy.num_replicas_in_sync > 1:
        return "several replicas: every worker must make the same choice"
    if _process_count() > 1:  # each process would time its own steps, and may choose apart
        return "several JAX processes: every process must make the same choice"
    return None


def _process_count() -> int:
    """JAX processes in this job (`keras_vit.runtime.jax_cluster`); 1 on other backends."""
    from keras_vit.runtime import jax_cluster

    return jax_cluster.process_count()


def tie_winner(timed: dict, prior_label: str) -> str:
    """The setting chosen from `timed` ({label: ms}): among those within
    `precision_probe.TIE` of the fastest, one without XLA when there is one, and of those
    the prior's (`prior_label`), else the fastest.

    Settings within the tie run alike, as far as a few seconds of probe on a shared host can
    tell; one without XLA starts without compiling the model (an XLA compile of a Ti/16
    training step takes seconds on 2 cores) and is where float32 training ran fastest on an
    Ice Lake Xeon whose probe tied the two float32 settings (Ti/16 1.17x, S/16 1.11x over
    float32 + XLA; docs/performance_log.md).
    """
    close = precision_probe.tied(timed)
    without_xla = [label for label in close if not label.endswith("+xla")] or close
    if prior_label in without_xla:
        return prior_label
    return min(without_xla, key=timed.get)


def _pick(prior, timed, figures, hidden_dim, date, cached, policy, jit, shape) -> PrecisionChoice:
    """The setting `tie_winner` picks from `timed` ({label: ms}), with its measured reason."""
    fastest = min(timed, key=timed.get)
    label = tie_winner(timed, prior.setting)
    shown = ", ".join(f"{name} {ms:.1f} ms" for name, ms in figures.items())
    host = f"{precision_probe.cpu_model()}, {precision_probe.core_count()} cores"
    when = f"cached probe of {date}" if cached else "probed now"
    block = precision_probe.probe_shape(hidden_dim, **(shape or {}))
    at = f"D {hidden_dim}, MLP {block['mlp_dim']}, {block['heads']} heads, {block['tokens']} tokens"
    reasons = [f"CPU {host}; measured ({when}, one block's training step at {at}): {shown}"]
    runner_up = sorted(timed, key=timed.get)[1] if len(timed) > 1 else None
    if label != fastest:
        why = "without XLA's compile" if "+xla" in fastest else "the flag rule's"
        reasons.append(
            f"{label} within {precision_probe.TIE:.0%} of the fastest ({fastest}), {why}: kept"
        )
    elif runner_up:
        reasons.append(f"{label} fastest, {timed[runner_up] / timed[label]:.2f}x {runner_up}")
    if policy != AUTO:
        reasons.append(f"{policy} as given")
    if jit != AUTO:
        reasons.append(f"XLA {'on' if jit else 'off'} as given")
    chosen_policy, _, xla = label.partition("+")
    return PrecisionChoice(
        chosen_policy, bool(xla), "; ".join(reasons), "cache" if cached else "probe", dict(figures)
    )
