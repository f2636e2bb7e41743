"""Tests of the precision-and-compiler choice of keras_vit.runtime.precision: CPU flags, the rules
of `choose_precision`, `with_dtype_policy`, and what a run records in its config.json."""

import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit.runtime import precision, precision_probe
from keras_vit.train import run_config, run_plan, training

AMX = frozenset({"fpu", "avx512f", "amx_bf16", "amx_tile", "avx512_bf16"})
AVX512_BF16 = frozenset({"fpu", "avx512f", "avx512_bf16"})
NO_BF16 = frozenset({"fpu", "avx2", "fma"})

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
flags\t\t: fpu vme avx2 avx512f amx_bf16 amx_tile
bugs\t\t: spectre_v1

processor\t: 1
flags\t\t: fpu vme avx2 avx512f amx_bf16 amx_tile
"""


def test_cpu_flags_reads_the_flags_line(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    assert precision.cpu_flags(str(path)) == {
        "fpu",
        "vme",
        "avx2",
        "avx512f",
        "amx_bf16",
        "amx_tile",
    }
    assert precision.cpu_flags(str(tmp_path / "missing")) == frozenset()


@pytest.mark.parametrize(
    "flags, width, policy, jit",
    [
        (AMX, 768, "mixed_bfloat16", False),  # B/16 on AMX: oneDNN bfloat16, no XLA
        (AVX512_BF16, 384, "mixed_bfloat16", False),  # S/16 on AVX-512 BF16
        (AVX512_BF16, 192, "mixed_bfloat16", False),  # Ti/16: 1.44x in bfloat16 (measured)
        (AMX, 128, "float32", True),  # narrower than Ti/16: float32 with XLA
        (AMX, 64, "float32", True),  # the default `keras-vit train` model
        (AMX, None, "float32", True),  # unknown width: the float32 default
        (NO_BF16, 768, "float32", True),  # no bfloat16 units: float32 with XLA
        (frozenset(), 1024, "float32", True),  # flags unreadable
    ],
)
def test_auto_on_cpu(flags, width, policy, jit):
    choice = precision.choose_precision(width, flags=flags)
    assert (choice.policy, choice.jit_compile) == (policy, jit)
    assert choice.reason.startswith("CPU with" if flags & AVX512_BF16 else "CPU without")
    assert choice.describe().startswith(f"precision {policy}, XLA {'on' if jit else 'off'} (")


def test_a_given_value_is_kept_and_the_other_chosen_to_suit_it():
    xla_given = precision.choose_precision(768, flags=AMX, jit_compile=True)
    assert (xla_given.policy, xla_given.jit_compile) == ("float32", True)
    no_xla_given = precision.choose_precision(768, flags=AMX, jit_compile=False)
    assert (no_xla_given.policy, no_xla_given.jit_compile) == ("mixed_bfloat16", False)
    bf16_given = precision.choose_precision(64, flags=AMX, mixed_precision="mixed_bfloat16")
    assert (bf16_given.policy, bf16_given.jit_compile) == ("mixed_bfloat16", False)
    float32_given = precision.choose_precision(768, flags=AMX, mixed_precision="float32")
    assert (float32_given.policy, float32_given.jit_compile) == ("float32", True)
    none_is_float32 = precision.choose_precision(768, flags=AMX, mixed_precision=None)
    assert none_is_float32.policy == "float32"
    both = precision.choose_precision(768, flags=AMX, mixed_precision="float32", jit_compile=False)
    assert (both.policy, both.jit_compile) == ("float32", False)


@pytest.mark.parametrize("width", [64, 768])
def test_on_the_jax_backend_auto_is_xla_without_probing(monkeypatch, width):
    """Keras' JAX backend without XLA runs op by op: "auto" takes XLA there (float32, as
    XLA's CPU products do not use the bfloat16 units) and the probe never runs."""

    def no_probe(*args, **kwargs):
        raise AssertionError("the probe ran on the JAX backend")

    monkeypatch.setattr(precision, "_keras_backend", lambda: "jax")
    monkeypatch.setattr(precision_probe, "probe_figures", no_probe)
    choice = precision.choose_precision(width, flags=AMX, probe=True, tokens=49)
    assert (choice.policy, choice.jit_compile) == ("float32", True)
    assert precision.JAX_XLA_REASON in choice.reason
    bf16 = precision.choose_precision(
        width, flags=AMX, probe=True, mixed_precision="mixed_bfloat16"
    )
    assert (bf16.policy, bf16.jit_compile) == ("mixed_bfloat16", True)
    eager = precision.choose_precision(width, flags=AMX, probe=True, jit_compile=False)
    assert eager.jit_compile is False  # a value given is kept


@pytest.mark.parametrize("width", [64, 768])
def test_several_cpu_replicas_never_get_xla(width):
    """XLA's collectives do not run on CPU, so multi-replica runs stay off XLA."""

    class TwoCpuReplicas(tf.distribute.MirroredStrategy):
        def __init__(self):  # nothing started
            pass

        num_replicas_in_sync = 2
        extended = types.SimpleNamespace(worker_devices=("/device:CPU:0", "/device:CPU:1"))

    choice = precision.choose_precision(width, strategy=TwoCpuReplicas(), flags=AMX)
    assert choice.jit_compile is False
    assert "several replicas" in choice.reason
    given = precision.choose_precision(
        width, strategy=TwoCpuReplicas(), flags=AMX, jit_compile=True
    )
    assert given.jit_compile is False  # would abort in the first step (the CLI refuses first)


def test_a_multi_worker_strategy_with_one_replica_here_gets_no_xla():
    class OneLocalReplica(tf.distribute.MultiWorkerMirroredStrategy):
        def __init__(self):  # no cluster, nothing started
            pass

        num_replicas_in_sync = 1
        extended = types.SimpleNamespace(worker_devices=("/job:worker/task:0/device:CPU:0",))

    choice = precision.choose_precision(64, strategy=OneLocalReplica(), flags=NO_BF16)
    assert (choice.policy, choice.jit_compile) == ("float32", False)


@pytest.mark.parametrize(
    "kwargs, match",
    [({"mixed_precision": "half"}, "'half'"), ({"jit_compile": "yes"}, "'yes'")],
)
def test_bad_values_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        precision.choose_precision(64, flags=AMX, **kwargs)


def test_this_machines_flags_are_read_at_run_time():
    flags = precision.cpu_flags()
    if not flags & set(precision.BFLOAT16_CPU_FLAGS):
        pytest.skip("this CPU reports no bfloat16 matrix units")
    assert precision.choose_precision(768).policy == "mixed_bfloat16"


def test_model_width(tiny_vit_kwargs):
    assert precision.model_width(keras_vit.ViT(**tiny_vit_kwargs)) == 32
    inputs = keras.Input((4,))
    assert precision.model_width(keras.Model(inputs, keras.layers.Dense(2)(inputs))) is None


def randomised(model, seed=0):
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0.0, 0.3, w.shape).astype(w.dtype) for w in model.get_weights()])
    return model


def test_with_dtype_policy_computes_in_bfloat16_with_the_same_weights(tiny_vit_kwargs):
    model = randomised(keras_vit.ViT(**tiny_vit_kwargs))
    images = np.random.default_rng(1).uniform(-1, 1, (8, 32, 32, 3)).astype("float32")
    reference = model.predict(images, verbose=0)
    assert np.abs(reference).max() > 0.5  # randomised, not the zero head

    clone = precision.with_dtype_policy(model, "mixed_bfloat16")
    block = clone.get_layer("encoderblock_0")
    assert block.compute_dtype == "bfloat16" and block.variable_dtype == "float32"
    assert clone.get_layer("head").compute_dtype == "float32"
    logits = clone.predict(images, verbose=0)
    assert logits.dtype == np.float32
    difference = np.abs(logits - reference).max()
    assert 0 < difference < 0.05 * np.abs(reference).max()  # bfloat16 ran, and stayed close
    assert (logits.argmax(-1) == reference.argmax(-1)).mean() >= 0.75
    for a, b in zip(model.get_weights(), clone.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)

    back = precision.with_dtype_policy(clone, "float32")
    np.testing.assert_allclose(back.predict(images, verbose=0), reference, rtol=1e-5, atol=1e-5)
    assert precision.with_dtype_policy(model, "float32") is model
    with pytest.raises(ValueError, match="'half'"):
        precision.with_dtype_policy(model, "half")


def plan(monkeypatch, flags, **recipe):
    monkeypatch.setattr(precision, "cpu_flags", lambda path="/proc/cpuinfo": flags)
    config = run_config.RunConfig(recipe=training.TrainConfig(**recipe))
    return run_plan.plan_run(config, tf.distribute.get_strategy())


def test_default_run_keeps_float32_with_xla(monkeypatch):
    """The default `keras-vit train` model (D 64) runs as before, on any CPU."""
    for flags in (AMX, NO_BF16):
        resolved = plan(monkeypatch, flags).resolved()
        assert (resolved["mixed_precision"], resolved["jit_compile"]) == ("float32", True)
        assert resolved["precision_reason"]


def test_a_wide_run_records_bfloat16_without_xla(monkeypatch):
    resolved = plan(monkeypatch, AMX, hidden_dim=384, mlp_dim=768, num_heads=6).resolved()
    assert (resolved["mixed_precision"], resolved["jit_compile"]) == ("mixed_bfloat16", False)
    assert "amx_bf16" in resolved["precision_reason"]


def test_compile_kwargs_resolve_auto_for_the_recipe(monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda path="/proc/cpuinfo": AMX)
    assert training.TrainConfig().compile_kwargs(1000)["jit_compile"] is True
    assert training.TrainConfig(jit_compile=False).compile_kwargs(1000)["jit_compile"] is False


@pytest.mark.parametrize(
    "setting, record, expected",
    [
        ("mixed_bfloat16",
         {"figures": {"float32": 13.2, "mixed_bfloat16": 10.4}, "source": "cache"},
         "measured on this CPU: 1.27x float32's speed, cached probe"),
        ("float32+xla", {"figures": {"float32+xla": 4.3, "float32": 4.9, "mixed_bfloat16": 4.7},
                         "source": "probe"}, "measured on this CPU: 1.14x float32's speed"),
        ("float32", {"figures": {"float32+xla": 5.0, "float32": 4.0, "mixed_bfloat16": 4.4}},
         "measured on this CPU: 1.10x mixed_bfloat16's speed"),
        ("float32", {"reason": "CPU without bfloat16 units; XLA on", "figures": None},
         "CPU without bfloat16 units"),
        ("float32", {"reason": "x" * 200}, "x" * 69 + "..."),
    ],
)  # fmt: skip
def test_brief_reason_gives_the_measured_speed_or_the_first_clause(setting, record, expected):
    """Speeds worked by hand from the figures (ms per step: 13.2 / 10.4 = 1.27)."""
    assert precision.brief_reason(setting, record) == expected
