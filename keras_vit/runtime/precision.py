"""The precision policies of keras_vit and the compiler (XLA or not) setting, checked and applied.

The one home of the precision policies (`POLICIES`, checked by `check_policy`), of the
`jit_compile` check, of the `PrecisionChoice` record, of the "several CPU replicas: no XLA"
rule (`xla_unsupported_reason`, `resolve_jit_compile`), and of applying a policy (globally,
`set_mixed_precision`; to a loaded model, `with_dtype_policy`). The rules that pick a setting
for "auto" are `keras_vit.runtime.precision_auto`'s.

TensorFlow and Keras are imported inside the functions, so that `keras-vit --help` can read
`POLICIES` without starting TensorFlow.
"""

from __future__ import annotations

import dataclasses
import logging

from keras_vit.runtime.precision_probe import setting_label
from keras_vit.spec import layer_names as names

logger = logging.getLogger(__name__)

AUTO = "auto"
POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
"""The Keras dtype policies keras_vit runs under (the one list; the CLI's choices and every
check read it)."""
CHOICES = (AUTO, *POLICIES)
"""What a `mixed_precision` argument or `--mixed-precision` flag may be."""

FLOAT32_LAYERS = (names.HEAD, names.HEAD_DIST, names.HEAD_MEAN, names.HEAD_ACTIVATION)
"""Layers keras_vit builds in float32 under every policy (float32 logits)."""


def check_policy(policy, *, allow_auto: bool = False) -> str:
    """The policy name `policy` stands for (None means "float32"), checked.

    Args:
        policy: a name of `POLICIES`, None, or (with `allow_auto`) "auto".
        allow_auto: whether "auto" is accepted.

    Returns:
        The policy name ("float32" for None).

    Raises:
        ValueError: any other value, naming it and the accepted ones.
    """
    accepted = CHOICES if allow_auto else POLICIES
    if policy is None:
        return "float32"
    if not isinstance(policy, str) or policy not in accepted:
        expected = (
            f"'auto' or one of {list(POLICIES)}" if allow_auto else f"one of {list(POLICIES)}"
        )
        raise ValueError(f"Unknown mixed precision policy {policy!r}; expected {expected}.")
    return policy


def check_jit_compile(jit_compile):
    """`jit_compile` checked: "auto" (None also means "auto"), True or False.

    Raises:
        ValueError: any other value.
    """
    if jit_compile is None:
        return AUTO
    if jit_compile is True or jit_compile is False or jit_compile == AUTO:
        return jit_compile
    raise ValueError(f"`jit_compile` must be 'auto', True or False. Received: {jit_compile!r}")


@dataclasses.dataclass(frozen=True)
class PrecisionChoice:
    """The dtype policy and XLA setting for a model on this device, and why.

    Attributes:
        policy: a Keras dtype policy name of `POLICIES`.
        jit_compile: the `model.compile(jit_compile=...)` value (True: XLA, False: TensorFlow's
            own kernels, oneDNN on CPU).
        reason: one sentence saying why (the device and what was detected or measured).
        source: "rule" (device rules or CPU flags), "probe" (measured now) or "cache" (a
            measurement of an earlier run on this host).
        figures: for "probe"/"cache", milliseconds per probe step of each candidate setting
            ({"float32+xla": 41.0, "float32": 55.2, "mixed_bfloat16": 30.9}); else None.
    """

    policy: str
    jit_compile: bool
    reason: str
    source: str = "rule"
    figures: dict | None = None

    @property
    def setting(self) -> str:
        """`policy` with "+xla" when XLA is on (the benchmarks' label of a setting)."""
        return setting_label(self.policy, self.jit_compile)

    def describe(self) -> str:
        """One line: `precision mixed_bfloat16, XLA off (reason)`."""
        return f"precision {self.policy}, XLA {'on' if self.jit_compile else 'off'} ({self.reason})"

    def brief(self) -> str:
        """`describe()` kept short (under ~100 characters): the setting and `brief_reason`."""
        xla = "on" if self.jit_compile else "off"
        return f"precision {self.policy}, XLA {xla} ({brief_reason(self.setting, self.as_dict())})"

    def as_dict(self) -> dict:
        """`{"mixed_precision", "jit_compile", "reason", "source", "figures"}` (config.json)."""
        return {
            "mixed_precision": self.policy,
            "jit_compile": self.jit_compile,
            "reason": self.reason,
            "source": self.source,
            "figures": dict(self.figures) if self.figures else None,
        }


BRIEF_REASON_MAX = 72
"""Characters of the reason `brief_reason` keeps when nothing was measured."""


def brief_reason(setting: str, choice: dict) -> str:
    """Why `setting` ("mixed_bfloat16", "float32+xla") was chosen, in a few words, from a
    `PrecisionChoice.as_dict()` record (or config.json's "precision_probe" with "reason"):
    measured, its speed against float32 (or, for float32, against the next setting), e.g.
    "measured on this CPU: 1.27x float32's speed, cached probe"; otherwise the first clause
    of the reason, cut to `BRIEF_REASON_MAX` characters. The full reason is the record's."""
    figures = choice.get("figures") or {}
    if setting in figures and len(figures) > 1:
        others = {label: ms for label, ms in figures.items() if label != setting}
        versus = "float32" if setting != "float32" else min(others, key=others.get)
        cached = ", cached probe" if choice.get("source") == "cache" else ""
        speed = others[versus] / figures[setting]
        return f"measured on this CPU: {speed:.2f}x {versus}'s speed{cached}"
    first = str(choice.get("reason") or "").split("; ")[0]
    if len(first) > BRIEF_REASON_MAX:
        first = first[: BRIEF_REASON_MAX - 3].rstrip() + "..."
    return first


def model_width(model) -> int | None:
    """The token width (`hidden_dim`) of a keras_vit model, or None when it has no
    `embedding` layer with one."""
    try:
        return int(model.get_layer("embedding").hidden_dim)
    except (ValueError, AttributeError, TypeError):
        return None


def xla_unsupported_reason(strategy) -> str | None:
    """Why `strategy` cannot run XLA-compiled steps here, or None if it can.

    The one home of the "several CPU replicas: no XLA" rule (`resolve_jit_compile`,
    `precision_auto.choose_precision` and the CLI's refusal of an explicit `--jit-compile` all
    ask it).
    TensorFlow 2.21's XLA has no CPU collectives: a multi-worker strategy on CPUs fails in
    the first step ("Collectives are not yet implemented for CPU devices when compiling with
    XLA", then the process aborts), and `MirroredStrategy` over several (logical) CPUs fails
    with "Trying to access resource ... located in device CPU:1 from device CPU:0". Both work
    without XLA.
    """
    import tensorflow as tf

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


def resolve_jit_compile(jit_compile, strategy):
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
    import tensorflow as tf

    if isinstance(strategy, tf.distribute.TPUStrategy):
        return True
    reason = xla_unsupported_reason(strategy)
    if reason and (jit_compile is True or jit_compile == AUTO or jit_compile is None):
        logger.info("XLA off (jit_compile=False): %s", reason)
        return False
    if jit_compile is None or jit_compile == AUTO:
        return AUTO
    return bool(jit_compile)


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
    import keras

    name = check_policy(policy)
    keras.config.set_dtype_policy(name)
    return name


def with_dtype_policy(model, policy: str):
    """A copy of a functional model whose layers compute under `policy`, same weights.

    A loaded `.keras` model keeps the dtype policy it was built with; this rebuilds it from
    its config with every layer's policy replaced (the `head` stays float32, so logits stay
    float32) and copies the weights (variables stay float32 under the mixed policies; LoRA
    adapters, which no config holds, merged into their kernels).

    Args:
        model: a functional Keras model (keras_vit's ViT, hybrid or fine-tuned models).
        policy: one of `POLICIES`.

    Returns:
        `model` itself when its layers already use `policy`, else the copy.

    Raises:
        ValueError: an unknown policy.
    """
    import keras

    if policy is None:
        raise ValueError(f"Unknown mixed precision policy None; expected one of {list(POLICIES)}.")
    check_policy(policy)
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
    from keras_vit.checkpoints.base.lora import merged_weights  # LoRA adapters: not in a config

    clone = model.__class__.from_config(config)
    clone.set_weights(merged_weights(model))
    return clone
