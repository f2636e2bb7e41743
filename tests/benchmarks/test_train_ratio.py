"""`bench.py train-ratio`'s summary: per-round JAX/TensorFlow wall ratios and their median,
per-backend medians, and the command it times."""

from __future__ import annotations

import pytest

from benchmarks.harness import train_ratio


def _run(backend, wall, cpu=1.0, accuracy=0.9):
    return {"backend": backend, "wall_s": wall, "cpu_s": cpu, "accuracy": accuracy}


def test_ratios_are_taken_within_each_round():
    runs = [
        _run("tensorflow", 100.0, accuracy=0.98),
        _run("jax", 150.0, accuracy=0.97),
        _run("tensorflow", 200.0, accuracy=0.98),
        _run("jax", 220.0, accuracy=0.99),
        _run("tensorflow", 100.0, accuracy=0.98),
        _run("jax", 130.0, accuracy=0.98),
    ]
    summary = train_ratio.summarise(runs)
    # by hand: 150/100, 220/200, 130/100
    assert summary["ratio"] == pytest.approx(1.3)
    assert (summary["ratio_min"], summary["ratio_max"]) == pytest.approx((1.1, 1.5))
    assert summary["rounds"] == 3
    assert summary["tensorflow_wall_s"] == 100.0 and summary["jax_wall_s"] == 150.0
    assert summary["jax_accuracy"] == 0.98


def test_a_round_without_both_backends_is_refused():
    with pytest.raises(ValueError, match="one run of each"):
        train_ratio.summarise([_run("tensorflow", 1.0), _run("tensorflow", 2.0)])


def test_the_timed_command_is_the_default_train():
    command = train_ratio.train_command("RUN", None)
    assert command[-5:] == ["train", "--run-dir", "RUN", "--log-every", "epoch"]
    assert train_ratio.train_command("RUN", 2)[-2:] == ["--epochs", "2"]
