"""A fake host for the precision probe (a fake clock and probe steps of set costs), shared by
tests/runtime/test_precision_probe.py and tests/runtime/test_precision_auto.py."""

from __future__ import annotations

from keras_vit.runtime import precision_auto, precision_probe

AVX512_BF16 = frozenset({"fpu", "avx512f", "avx512_bf16"})
"""CPU flags for which the flag rule picks mixed_bfloat16 at D >= 192."""


class FakeHost:
    """A fake clock and step factory: each probe step of a setting advances the clock by that
    setting's cost (seconds); counts the steps built and run."""

    def __init__(self, costs):
        self.now = 0.0
        self.costs = dict(costs)
        self.built = []
        self.calls = []

    def clock(self):
        return self.now

    def make_step(self, shape, policy, xla):
        label = precision_probe.setting_label(policy, xla)
        self.built.append((label, shape))

        def step():
            self.calls.append(label)
            self.now += self.costs[label]

        return step


def fake_host(monkeypatch, tmp_path) -> FakeHost:
    """A fake host (float32+xla 30 ms, float32 50 ms, bfloat16 90 ms) put in place of the
    probe's clock and block step, with its own cache folder under `tmp_path`."""
    monkeypatch.setenv("KERAS_VIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KERAS_VIT_PRECISION_PROBE", raising=False)
    fake = FakeHost({"float32+xla": 0.030, "float32": 0.050, "mixed_bfloat16": 0.090})
    monkeypatch.setattr(precision_probe, "clock", fake.clock)
    monkeypatch.setattr(precision_probe, "block_step", fake.make_step)
    return fake


def choose(hidden_dim=768, **kwargs):
    """`precision_auto.choose_precision` on a CPU with `AVX512_BF16`."""
    return precision_auto.choose_precision(hidden_dim, flags=AVX512_BF16, **kwargs)
