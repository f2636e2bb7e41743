"""Tests of the rules of "auto" precision (keras_vit/runtime/precision_auto.py): the CPU flags,
the device and flag rules of `choose_precision`, the Keras JAX backend's XLA, several replicas;
on CPU the choice by measurement: which settings are candidates, the pick among the probe's
figures (the fastest, or within the tie one without XLA and then the flag rule's), the reason
it gives, and the fall-backs to the flag rule (probe off, one-off commands without a cached
probe, several replicas, a failing probe). The probe runs on a fake host
(tests/helpers/fake_probe_host.py)."""

from __future__ import annotations

import itertools
import json
import logging
import os
import types

import keras
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from keras_vit.runtime import precision, precision_auto, precision_probe
from tests.helpers.fake_probe_host import AVX512_BF16, FakeHost, choose, fake_host

AMX = frozenset({"fpu", "avx512f", "amx_bf16", "amx_tile", "avx512_bf16"})
NO_BF16 = frozenset({"fpu", "avx2", "fma"})
EXAMPLES = itertools.count()
LABELS = [precision_probe.setting_label(p, x) for p, x in precision_probe.CANDIDATES]
TIE = precision_probe.TIE * (1 + 1e-9)  # the tie, and float rounding of its product

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
flags\t\t: fpu vme avx2 avx512f amx_bf16 amx_tile
bugs\t\t: spectre_v1

processor\t: 1
flags\t\t: fpu vme avx2 avx512f amx_bf16 amx_tile
"""


class TwoCpuReplicas(tf.distribute.MirroredStrategy):
    """A strategy of two CPU replicas, for the rules only (nothing started)."""

    def __init__(self):
        pass

    num_replicas_in_sync = 2
    extended = types.SimpleNamespace(worker_devices=("/device:CPU:0", "/device:CPU:1"))


@pytest.fixture
def host(monkeypatch, tmp_path):
    return fake_host(monkeypatch, tmp_path)


def test_cpu_flags_reads_the_flags_line(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    assert precision_auto.cpu_flags(str(path)) == {
        "fpu",
        "vme",
        "avx2",
        "avx512f",
        "amx_bf16",
        "amx_tile",
    }
    assert precision_auto.cpu_flags(str(tmp_path / "missing")) == frozenset()


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
    choice = precision_auto.choose_precision(width, flags=flags)
    assert (choice.policy, choice.jit_compile) == (policy, jit)
    assert choice.reason.startswith("CPU with" if flags & AVX512_BF16 else "CPU without")
    assert choice.describe().startswith(f"precision {policy}, XLA {'on' if jit else 'off'} (")


def test_a_given_value_is_kept_and_the_other_chosen_to_suit_it():
    xla_given = precision_auto.choose_precision(768, flags=AMX, jit_compile=True)
    assert (xla_given.policy, xla_given.jit_compile) == ("float32", True)
    no_xla_given = precision_auto.choose_precision(768, flags=AMX, jit_compile=False)
    assert (no_xla_given.policy, no_xla_given.jit_compile) == ("mixed_bfloat16", False)
    bf16_given = precision_auto.choose_precision(64, flags=AMX, mixed_precision="mixed_bfloat16")
    assert (bf16_given.policy, bf16_given.jit_compile) == ("mixed_bfloat16", False)
    float32_given = precision_auto.choose_precision(768, flags=AMX, mixed_precision="float32")
    assert (float32_given.policy, float32_given.jit_compile) == ("float32", True)
    none_is_float32 = precision_auto.choose_precision(768, flags=AMX, mixed_precision=None)
    assert none_is_float32.policy == "float32"
    both = precision_auto.choose_precision(
        768, flags=AMX, mixed_precision="float32", jit_compile=False
    )
    assert (both.policy, both.jit_compile) == ("float32", False)


@pytest.mark.parametrize("width", [64, 768])
def test_on_the_jax_backend_auto_is_xla_without_probing(monkeypatch, width):
    """Keras' JAX backend without XLA runs op by op: "auto" takes XLA there (float32, as
    XLA's CPU products do not use the bfloat16 units) and the probe never runs."""

    def no_probe(*args, **kwargs):
        raise AssertionError("the probe ran on the JAX backend")

    monkeypatch.setattr(precision_auto, "_keras_backend", lambda: "jax")
    monkeypatch.setattr(precision_probe, "probe_figures", no_probe)
    choice = precision_auto.choose_precision(width, flags=AMX, probe=True, tokens=49)
    assert (choice.policy, choice.jit_compile) == ("float32", True)
    # no CPU flag is read there, so the reason names none
    assert choice.brief() == "precision float32, XLA on (JAX on CPU: XLA always)"
    assert "amx" not in choice.reason and "bf16" not in choice.reason
    assert "~15x slower" in choice.describe() and len(choice.describe()) < 160
    bf16 = precision_auto.choose_precision(
        width, flags=AMX, probe=True, mixed_precision="mixed_bfloat16"
    )
    assert (bf16.policy, bf16.jit_compile) == ("mixed_bfloat16", True)
    assert bf16.reason.startswith("JAX on CPU: XLA always; mixed_bfloat16 as given")
    eager = precision_auto.choose_precision(width, flags=AMX, probe=True, jit_compile=False)
    assert eager.jit_compile is False  # a value given is kept


@pytest.mark.parametrize("width", [64, 768])
def test_several_cpu_replicas_never_get_xla(width):
    """XLA's collectives do not run on CPU, so multi-replica runs stay off XLA."""

    choice = precision_auto.choose_precision(width, strategy=TwoCpuReplicas(), flags=AMX)
    assert choice.jit_compile is False
    assert "several replicas" in choice.reason
    given = precision_auto.choose_precision(
        width, strategy=TwoCpuReplicas(), flags=AMX, jit_compile=True
    )
    assert given.jit_compile is False  # would abort in the first step (the CLI refuses first)


def test_a_multi_worker_strategy_with_one_replica_here_gets_no_xla():
    class OneLocalReplica(tf.distribute.MultiWorkerMirroredStrategy):
        def __init__(self):  # no cluster, nothing started
            pass

        num_replicas_in_sync = 1
        extended = types.SimpleNamespace(worker_devices=("/job:worker/task:0/device:CPU:0",))

    choice = precision_auto.choose_precision(64, strategy=OneLocalReplica(), flags=NO_BF16)
    assert (choice.policy, choice.jit_compile) == ("float32", False)


@pytest.mark.parametrize(
    "kwargs, match",
    [({"mixed_precision": "half"}, "'half'"), ({"jit_compile": "yes"}, "'yes'")],
)
def test_bad_values_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        precision_auto.choose_precision(64, flags=AMX, **kwargs)


def test_this_machines_flags_are_read_at_run_time():
    flags = precision_auto.cpu_flags()
    if not flags & set(precision_auto.BFLOAT16_CPU_FLAGS):
        pytest.skip("this CPU reports no bfloat16 matrix units")
    assert precision_auto.choose_precision(768).policy == "mixed_bfloat16"


def test_measured_choice_beats_the_flag_rule_and_is_cached(host):
    rule = choose(probe=False)
    assert rule.setting == "mixed_bfloat16"  # the flags say bfloat16 for D 768
    choice = choose()
    assert (choice.policy, choice.jit_compile, choice.source) == ("float32", True, "probe")
    assert choice.figures == {"float32+xla": 30.0, "float32": 50.0, "mixed_bfloat16": 90.0}
    assert "float32+xla 30.0 ms" in choice.reason and "1.67x float32" in choice.reason
    assert precision_probe.cpu_model() in choice.reason
    built = len(host.built)
    assert built == len(precision_probe.CANDIDATES)

    cached = choose()
    assert (cached.setting, cached.source, cached.figures) == (
        "float32+xla",
        "cache",
        choice.figures,
    )
    assert "cached probe of" in cached.reason
    assert len(host.built) == built  # nothing measured again

    with open(precision_probe.cache_path(), encoding="utf-8") as handle:
        entry = next(iter(json.load(handle)["entries"].values()))
    assert entry["key"] == {
        "cpu": precision_probe.cpu_model(),
        "cores": precision_probe.core_count(),
        "backend": keras.backend.backend(),
        "tensorflow": tf.__version__,
        "hidden_dim": 768,
        "mlp_dim": 3072,
        "num_heads": 12,
        "tokens": 197,
    }


def test_within_the_tie_no_xla_then_the_flag_rule_is_kept(host):
    host.costs.update({"mixed_bfloat16": 0.0309})  # 3% slower than float32+xla
    choice = choose()
    assert choice.setting == "mixed_bfloat16" and "within 5%" in choice.reason
    host.costs.update({"mixed_bfloat16": 0.0330})  # 10% slower
    assert choose(384).setting == "float32+xla"
    # D 64: the flag rule says float32+xla; float32 is 4% slower, so no XLA compile
    host.costs.update({"float32": 0.0312})
    choice = choose(64)
    assert choice.setting == "float32"
    assert "float32 within 5% of the fastest (float32+xla), without XLA's compile" in choice.reason
    host.costs.update({"float32": 0.0318})  # 6% slower
    assert choose(64, tokens=50).setting == "float32+xla"


def test_a_given_value_limits_the_candidates(host):
    host.costs.update({"float32+xla": 0.010, "float32": 0.060, "mixed_bfloat16": 0.040})
    no_xla = choose(jit_compile=False)
    assert no_xla.setting == "mixed_bfloat16" and "XLA off as given" in no_xla.reason
    float32 = choose(mixed_precision="float32")
    assert float32.setting == "float32+xla" and "float32 as given" in float32.reason
    assert choose(mixed_precision="mixed_bfloat16").source == "rule"  # one setting left
    assert choose(jit_compile=True).setting == "float32+xla"
    assert choose(mixed_precision="float32", jit_compile=False).source == "rule"


@given(
    # near-equal costs (within the tie or just outside) as often as spread-out ones
    costs=st.lists(
        st.floats(0.001, 1.0) | st.sampled_from([0.030, 0.031, 0.0315, 0.032]),
        min_size=3,
        max_size=3,
    ),
    policy=st.sampled_from([precision.AUTO, *precision.POLICIES]),
    jit=st.sampled_from([precision.AUTO, True, False]),
    width=st.sampled_from([64, 192, 768]),
)
def test_the_choice_is_the_fastest_allowed_or_a_tie_without_xla_then_the_prior(
    costs, policy, jit, width, monkeypatch, tmp_path
):
    with monkeypatch.context() as patch:
        patch.setenv("KERAS_VIT_CACHE_DIR", str(tmp_path / f"c{next(EXAMPLES)}"))
        fake = FakeHost(dict(zip(LABELS, costs, strict=True)))
        patch.setattr(precision_probe, "clock", fake.clock)
        patch.setattr(precision_probe, "block_step", fake.make_step)
        prior = choose(width, mixed_precision=policy, jit_compile=jit, probe=False)
        choice = choose(width, mixed_precision=policy, jit_compile=jit, probe=True)
    allowed = {
        label: fake.costs[label]
        for label in LABELS
        if policy in (precision.AUTO, label.split("+")[0])
        and jit in (precision.AUTO, label.endswith("+xla"))
    }
    if len(allowed) < 2:
        assert choice == prior and not fake.built
        return
    assert choice.setting in allowed
    fastest = min(allowed.values())
    close = {label for label, cost in allowed.items() if cost <= (1 + TIE) * fastest}
    assert choice.setting in close
    if choice.setting.endswith("+xla"):  # only where nothing without XLA ties
        assert all(label.endswith("+xla") for label in close)
    without_xla = {label for label in close if not label.endswith("+xla")} or close
    if prior.setting in without_xla:
        assert choice.setting == prior.setting
    else:
        assert allowed[choice.setting] == min(allowed[label] for label in without_xla)


def test_a_failing_probe_falls_back_to_the_flag_rule(host, monkeypatch, caplog):
    def broken(shape, policy, xla):
        raise RuntimeError("no oneDNN here")

    monkeypatch.setattr(precision_probe, "block_step", broken)
    with caplog.at_level(logging.WARNING, logger="keras_vit.runtime.precision_auto"):
        choice = choose()
    assert choice.setting == "mixed_bfloat16" and "flag rule (probe failed)" in choice.reason
    assert "no oneDNN here" in caplog.text


def test_probe_switches(host, monkeypatch):
    monkeypatch.setenv("KERAS_VIT_PRECISION_PROBE", "off")
    off = choose()
    assert off.source == "rule" and "probe off" in off.reason and not host.built
    monkeypatch.setenv("KERAS_VIT_PRECISION_PROBE", "on")
    assert choose().source == "probe"
    assert choose().source == "cache"
    monkeypatch.setenv("KERAS_VIT_PRECISION_PROBE", "refresh")
    assert choose().source == "probe"
    assert len(host.built) == 6
    unknown = choose(None)
    assert unknown.source == "rule" and "width unknown" in unknown.reason


def test_one_off_commands_use_a_cached_probe_but_never_measure(host, monkeypatch):
    """probe="cached" (predict, explain, evaluate, fewshot): the flag rule while nothing is
    cached for this host and shape, nothing built or timed, no cache file written; the
    cached figures once a run measured them; off under KERAS_VIT_PRECISION_PROBE=off."""
    first = choose(probe="cached")
    assert first.source == "rule" and first.setting == "mixed_bfloat16"
    assert "not probed for a one-off command" in first.reason
    assert not host.built and not os.path.exists(precision_probe.cache_path())
    measured = choose()  # a training run on this host measures and caches
    again = choose(probe="cached")
    assert (again.setting, again.source, again.figures) == (
        "float32+xla",
        "cache",
        measured.figures,
    )
    assert len(host.built) == len(precision_probe.CANDIDATES)
    other_shape = choose(384, probe="cached")  # another model shape: not cached
    assert other_shape.source == "rule" and len(host.built) == len(precision_probe.CANDIDATES)
    monkeypatch.setenv("KERAS_VIT_PRECISION_PROBE", "off")
    assert "probe off" in choose(probe="cached").reason


def test_several_replicas_are_not_probed(host):
    choice = choose(strategy=TwoCpuReplicas())
    assert choice.source == "rule" and choice.jit_compile is False and not host.built
