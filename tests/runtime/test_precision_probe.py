"""Tests of the precision probe (keras_vit/runtime/precision_probe.py): its timing loop with a
fake clock, the cache (key, location, corrupt files), and what a run records. The real block
step runs once, on a tiny shape. The choice made from the figures is tested in
tests/runtime/test_precision_auto.py."""

from __future__ import annotations

import json
import logging
import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from keras_vit.cli import progress
from keras_vit.runtime import optimizers, precision_auto, precision_probe
from keras_vit.train import run_config, run_plan, training
from tests.helpers.fake_probe_host import FakeHost, choose, fake_host


@pytest.fixture
def host(monkeypatch, tmp_path):
    return fake_host(monkeypatch, tmp_path)


def test_measure_rotates_the_order_and_returns_the_fastest_call():
    fake = FakeHost({"a": 0.3, "b": 0.1, "c": 0.2})
    steps = {label: fake.make_step({}, label, False) for label in "abc"}
    seconds = precision_probe.measure(steps, timer=fake.clock, budget_s=1.0)
    assert seconds == pytest.approx({"a": 0.3, "b": 0.1, "c": 0.2})
    # the untimed compile call of each, then one timed call that sets its unit (here one
    # call: every step is longer than MIN_UNIT_S)
    assert fake.calls[:6] == ["a", "b", "c"] * 2
    rounds = [fake.calls[i : i + 3] for i in range(6, len(fake.calls), 3)]
    assert [r[0] for r in rounds[:3]] == ["a", "b", "c"]  # each round starts one later
    # MIN_ROUNDS x 0.6 s >= the 1 s budget: stops at MIN_ROUNDS
    assert len(rounds) == precision_probe.MIN_ROUNDS
    fake.calls.clear()
    precision_probe.measure(steps, timer=fake.clock, budget_s=1e9)
    assert len(fake.calls) == 6 + 3 * precision_probe.MAX_ROUNDS


@given(costs=st.lists(st.floats(0.0005, 0.2), min_size=2, max_size=3))
def test_short_steps_are_timed_in_units_of_back_to_back_calls(costs):
    """A step shorter than MIN_UNIT_S runs ceil(MIN_UNIT_S / its time) times in a row per
    round, timed together; the figure is still seconds per call."""
    labels = "abc"[: len(costs)]
    fake = FakeHost(dict(zip(labels, costs, strict=True)))
    steps = {label: fake.make_step({}, label, False) for label in labels}
    seconds = precision_probe.measure(steps, timer=fake.clock, budget_s=1e9)
    assert seconds == pytest.approx(dict(zip(labels, costs, strict=True)))
    per_round = {
        label: max(1, math.ceil(precision_probe.MIN_UNIT_S / cost))
        for label, cost in zip(labels, costs, strict=True)
    }
    timed = fake.calls[2 * len(labels) :]  # after the compile and the unit-setting calls
    assert len(timed) == precision_probe.MAX_ROUNDS * sum(per_round.values())
    first = labels[0]
    assert timed[: per_round[first]] == [first] * per_round[first]  # back to back
    for label, cost in zip(labels, costs, strict=True):
        assert per_round[label] * cost >= precision_probe.MIN_UNIT_S or per_round[label] == 1


@pytest.mark.parametrize(
    ("costs", "passes"),
    [
        ({"x": 0.060, "y": 0.100, "z": 0.180}, 1),  # decided: one pass
        ({"x": 0.060, "y": 0.062, "z": 0.180}, precision_probe.MAX_PASSES),  # a tie
    ],
)
def test_a_tie_is_measured_again_up_to_max_passes(costs, passes):
    fake = FakeHost(costs)
    steps = {label: fake.make_step({}, label, False) for label in costs}
    seconds = precision_probe.measure_until_decided(steps, timer=fake.clock)
    assert seconds == pytest.approx(costs)
    one_pass = 2 * len(costs) + len(costs) * rounds_in_budget(costs)
    assert len(fake.calls) == passes * one_pass


def rounds_in_budget(costs) -> int:
    """Rounds `measure_rounds` times on a FakeHost of `costs` (one call per unit)."""
    per_round = sum(costs.values())
    rounds = math.ceil(precision_probe.BUDGET_S / per_round - 1e-9)
    return min(precision_probe.MAX_ROUNDS, max(precision_probe.MIN_ROUNDS, rounds))


class LoadedHost(FakeHost):
    """A `FakeHost` whose every call of timed round r costs `loads[r]` times its setting's
    cost (the load of a shared host coming and going between rounds); the untimed first
    call of each setting costs its plain cost."""

    def __init__(self, costs, loads):
        super().__init__(costs)
        self.loads = loads

    def make_step(self, shape, policy, xla):
        label = precision_probe.setting_label(policy, xla)

        def step():
            timed = len(self.calls) - 2 * len(self.costs)  # after compile and unit calls
            load = self.loads[timed // len(self.costs)] if timed >= 0 else 1.0
            self.calls.append(label)
            self.now += self.costs[label] * load

        return step


@given(
    costs=st.lists(st.floats(1.01 * precision_probe.MIN_UNIT_S, 1.0), min_size=2, max_size=3),
    loads=st.lists(
        st.floats(1.0, 3.0),
        min_size=precision_probe.MAX_ROUNDS,
        max_size=precision_probe.MAX_ROUNDS,
    ),
)
def test_load_that_changes_between_rounds_keeps_the_ratios(costs, loads):
    """Every round at its own load (1-3x): each figure is its cost times the median load (of
    the loads' logarithms: a geometric median), so the ratios between settings are the
    costs' ratios whatever the load did."""
    labels = "abc"[: len(costs)]
    fake = LoadedHost(dict(zip(labels, costs, strict=True)), loads)
    steps = {label: fake.make_step({}, label, False) for label in labels}
    seconds = precision_probe.measure(steps, timer=fake.clock, budget_s=1e9)
    load = float(np.exp(np.median(np.log(loads))))
    expected = {label: cost * load for label, cost in zip(labels, costs, strict=True)}
    assert seconds == pytest.approx(expected)


def test_one_lucky_or_unlucky_call_does_not_decide():
    """A single call far from a setting's usual time (a lucky 2x, an unlucky 5x) changes
    nothing: "b" (90 ms) stays ahead of "a" (100 ms), at their usual times."""
    rounds = 9
    a = [0.100] * rounds
    b = [0.090] * rounds
    for lucky, unlucky in ((3, 6), (0, 8)):
        times = {"a": list(a), "b": list(b)}
        times["a"][lucky] = 0.050
        times["b"][unlucky] = 0.450
        assert precision_probe.paired_figures(times) == pytest.approx({"a": 0.1, "b": 0.09})


def test_a_setting_slow_on_most_calls_is_judged_by_them():
    """ "b" ran at 60 ms in 1 call of 3 and at 150 ms otherwise: its figure is 150 ms (the
    fastest call, the probe's figure before, said 60 ms and ranked it ahead of "a")."""
    times = {"a": [0.1] * 9, "b": [0.06, 0.15, 0.15] * 3}
    figures = precision_probe.paired_figures(times)
    assert figures["b"] / figures["a"] == pytest.approx(1.5)


def test_the_cache_key_separates_hosts_and_every_model_shape_field(host, monkeypatch):
    choose(768)
    choose(768, tokens=197, mlp_dim=3072, num_heads=12)  # the defaults spelled out: cached
    assert len(host.built) == 3
    choose(384)
    choose(768, tokens=200)
    choose(768, mlp_dim=1024)
    choose(768, num_heads=8)
    assert len(host.built) == 15
    monkeypatch.setattr(precision_probe, "core_count", lambda: 64)
    choose(768)
    monkeypatch.setattr(tf, "__version__", "9.9.9")
    choose(768)
    assert len(host.built) == 21
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")  # figures of another backend
    monkeypatch.setattr(precision_auto, "_keras_backend", lambda: "tensorflow")  # still probed
    choose(768)
    assert len(host.built) == 24
    with open(precision_probe.cache_path(), encoding="utf-8") as handle:
        keys = [entry["key"] for entry in json.load(handle)["entries"].values()]
    assert len(keys) == 8
    assert {(k["mlp_dim"], k["num_heads"], k["tokens"]) for k in keys} >= {
        (3072, 12, 200),
        (1024, 12, 197),
        (3072, 8, 197),
        (1536, 6, 197),
    }
    # the block that was timed has the shape of the key it is stored under
    timed = {(s["hidden_dim"], s["mlp_dim"], s["heads"], s["tokens"]) for _, s in host.built}
    assert (768, 1024, 12, 197) in timed and (768, 3072, 8, 197) in timed


def test_a_corrupt_cache_is_ignored_with_a_log_line(host, caplog):
    path = precision_probe.cache_path()
    os.makedirs(os.path.dirname(path))
    for content in ("{not json", json.dumps({"version": 0}), json.dumps([1, 2])):
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(content)
        with caplog.at_level(logging.WARNING, logger="keras_vit.runtime.precision_probe"):
            caplog.clear()
            assert choose().source == "probe"
        assert "Ignoring the precision probe cache" in caplog.text
    bad_entry = {"version": precision_probe.CACHE_VERSION, "entries": {"k": {"figures": "x"}}}
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(bad_entry, handle)
    assert choose().source == "probe"
    with open(path, encoding="utf-8") as handle:
        assert "k" not in json.load(handle)["entries"]  # rewritten without the bad entry
    assert choose().source == "cache"


def test_an_unwritable_cache_never_stops_a_run(host, monkeypatch, tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("KERAS_VIT_CACHE_DIR", str(blocker / "below"))
    with caplog.at_level(logging.WARNING, logger="keras_vit.runtime.precision_probe"):
        assert choose().source == "probe"
    assert "Could not write the precision probe cache" in caplog.text


def test_cache_path_order(monkeypatch, tmp_path):
    monkeypatch.delenv("KERAS_VIT_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    home = os.path.join(str(tmp_path / "home"), ".cache", "keras_vit", "precision_probe.json")
    assert precision_probe.cache_path() == home
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert precision_probe.cache_path() == str(
        tmp_path / "xdg" / "keras_vit" / "precision_probe.json"
    )
    monkeypatch.setenv("KERAS_VIT_CACHE_DIR", str(tmp_path / "mine"))
    assert precision_probe.cache_path() == str(tmp_path / "mine" / "precision_probe.json")


def test_probe_shape_defaults_and_given_fields():
    ti = precision_probe.probe_shape(192, 197)
    assert (ti["mlp_dim"], ti["heads"], ti["tokens"]) == (768, 3, 197)
    assert precision_probe.probe_shape(192)["tokens"] == 197
    small = precision_probe.probe_shape(64, 49, mlp_dim=128, num_heads=4)
    assert (small["mlp_dim"], small["heads"], small["tokens"], small["batch"]) == (128, 4, 49, 16)
    assert precision_probe.probe_shape(768, 197)["batch"] == 1  # ~8.7 GFLOP per image
    assert ti["batch"] == 16  # 0.61 GFLOP per image: a training run's batch, not 5
    assert precision_probe.probe_shape(32, 17)["batch"] == 16
    assert precision_probe.probe_shape(96, 17)["heads"] == 1


@pytest.mark.parametrize("policy, xla", precision_probe.CANDIDATES)
def test_the_real_block_step_runs_in_each_setting(policy, xla, monkeypatch):
    """The probe trains keras_vit's own block: its training kernels run, in the policy."""
    from keras_vit.kernels import dispatch

    seen = []
    real = dispatch._fast
    monkeypatch.setattr(
        dispatch,
        "_fast",
        lambda dtype, training: seen.append((dtype, training)) or real(dtype, training=training),
    )
    shape = {"hidden_dim": 32, "mlp_dim": 64, "heads": 2, "tokens": 5, "batch": 2}
    value = precision_probe.block_step(shape, policy, xla)()
    assert np.isfinite(value) and value != 0
    assert set(seen) == {(policy.removeprefix("mixed_"), True)}


@pytest.mark.parametrize("xla", [True, False])
def test_the_probe_steps_the_block_as_a_run_steps_its_model(xla, monkeypatch):
    """The probe's step is Keras' train step with the run's AdamW (a bare forward and
    backward tied the settings on a host where the models trained 1.2-1.4x faster with XLA):
    the optimizer's update runs, over every weight of the block, and changes them."""
    applied = []

    class CountingAdamW(optimizers.ViTAdamW):
        def apply(self, grads, trainable_variables=None):
            applied.append(len(grads))
            return super().apply(grads, trainable_variables)

    monkeypatch.setattr(optimizers, "ViTAdamW", CountingAdamW)
    shape = {"hidden_dim": 32, "mlp_dim": 64, "heads": 2, "tokens": 5, "batch": 2}
    step = precision_probe.block_step(shape, "float32", xla)
    first = step()
    assert applied and set(applied) == {16}  # 2 LayerNorms x 2, q/k/v/out x 2, 2 MLP layers x 2
    assert np.isfinite(first) and step() != first  # the update moved the weights


def test_a_run_records_the_measured_choice_and_prints_it_first(host, monkeypatch):
    config = run_config.RunConfig(
        recipe=training.TrainConfig(hidden_dim=384, mlp_dim=768, num_heads=6)
    )
    resolved = run_plan.plan_run(config, tf.distribute.get_strategy()).resolved()
    assert (resolved["mixed_precision"], resolved["jit_compile"]) == ("float32", True)
    assert resolved["precision_probe"]["source"] == "probe"
    assert resolved["precision_probe"]["figures"]["mixed_bfloat16"] == 90.0
    assert "measured" in resolved["precision_reason"]
    # the default recipe's hybrid: 28 px, stride-4 root, 1x1 patches, GAP (no class token)
    assert {shape["tokens"] for _, shape in host.built} == {49}
    assert {(s["mlp_dim"], s["heads"]) for _, s in host.built} == {(768, 6)}
    assert "MLP 768, 6 heads, 49 tokens" in resolved["precision_reason"]
    json.dumps(resolved)  # config.json can hold it
    line = "\n".join(progress.start_lines("runs/x", {"run": {}, "resolved": resolved}, "float32"))
    # the short line: the choice and its speed against plain float32 (50 ms / 30 ms); the
    # full figures stay in config.json
    assert "precision: float32, XLA on (measured on this CPU: 1.67x float32's speed)" in line


@given(
    grid=st.integers(1, 4),
    patch=st.sampled_from([2, 4]),
    pooling=st.sampled_from(["token", "gap"]),
    heads=st.sampled_from([1, 2]),
    hybrid=st.booleans(),
)
def test_the_shape_from_kwargs_is_the_built_models_shape(grid, patch, pooling, heads, hybrid):
    """The shape the run plan probes (from builder kwargs) is the shape the built model's
    first block sees: tokens counted from its input, mlp_dim and heads from the layer."""
    import keras_vit

    kwargs = dict(
        patch_size=patch,
        hidden_dim=8,
        mlp_dim=12,
        num_heads=heads,
        num_layers=1,
        num_classes=3,
        channels=1,
        pooling=pooling,
    )
    stride = 1
    if hybrid:
        kwargs.update(resnet_stages=[], resnet_width=8, resnet_groups=2)
        stride = 4
    kwargs["image_size"] = grid * patch * stride
    model = (keras_vit.HybridViT if hybrid else keras_vit.ViT)(**kwargs)
    built = precision_probe.model_shape(model)
    expected = {"hidden_dim": 8, "mlp_dim": 12, "num_heads": heads}
    expected["tokens"] = grid * grid + (pooling == "token")  # counted by hand
    assert built == expected
    assert precision_probe.shape_from_kwargs(kwargs) == expected


def test_model_shape_of_a_model_without_blocks_is_none():
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    assert precision_probe.model_shape(model) is None
