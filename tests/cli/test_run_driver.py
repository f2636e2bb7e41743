"""cli/run_driver: the lines `train`/`finetune` end with (from best.json and metrics.json of
a run), --jit-compile refused where the strategy cannot compile, unknown strategies as
usage errors, and the default run directory."""

import argparse
import re

import pytest

from keras_vit.cli import run_driver
from keras_vit.cli.flags import UsageError
from keras_vit.runtime import precision

RESOLVED = {"validation_split": "train[90%:]", "num_validation_examples": 500}


@pytest.mark.parametrize("n, text", [(0, "0 epochs"), (1, "1 epoch"), (2, "2 epochs")])
def test_counted(n, text):
    assert run_driver.counted(n, "epoch") == text


def test_kept_epoch_line_for_last_and_best():
    last = {"epoch": 4, "monitor": "val_accuracy", "value": 0.91234, "select": "last"}
    assert run_driver.kept_epoch_line(last, 5, RESOLVED) == (
        "Kept model: the last epoch, 5 of 5 (--select last); val_accuracy 0.9123 on "
        "'train[90%:]' (500 images, not trained on)"
    )
    best = {"epoch": 1, "monitor": "val_loss", "value": 0.5}
    assert run_driver.kept_epoch_line(best, 3, RESOLVED) == (  # no "select": a best run
        "Kept model: the best epoch, 2 of 3, by val_loss 0.5000 on 'train[90%:]' "
        "(500 images, not trained on)"
    )


def test_the_default_run_dir_names_the_task_and_the_time():
    path = run_driver.default_run_dir("finetune")
    assert re.fullmatch(r"runs[/\\]finetune-\d{8}-\d{6}", path)


def test_unknown_strategy_is_a_usage_error():
    with pytest.raises(UsageError, match="nope"):
        run_driver.resolve_strategy("nope")


@pytest.mark.parametrize("flag, refused", [(True, True), (None, False), (False, False)])
def test_explicit_jit_compile_is_refused_where_xla_cannot_run(monkeypatch, flag, refused):
    monkeypatch.setattr(precision, "xla_unsupported_reason", lambda s: "no XLA on this TPU")
    args = argparse.Namespace(jit_compile=flag)
    if refused:
        with pytest.raises(UsageError, match="--jit-compile cannot run here: no XLA on this TPU"):
            run_driver.check_jit_compile(args, object())
    else:
        run_driver.check_jit_compile(args, object())
    monkeypatch.setattr(precision, "xla_unsupported_reason", lambda s: None)
    run_driver.check_jit_compile(argparse.Namespace(jit_compile=True), object())


def test_print_summary(tmp_path, monkeypatch, capsys):
    from keras_vit.train import runs

    monkeypatch.setattr(
        runs, "read_config", lambda d: {"resolved": {**RESOLVED, "test_split": "test"}}
    )
    metrics = {
        "test": {"accuracy": 0.98765, "loss": 0.04321, "loss_name": "cross-entropy"},
        "best": {"epoch": 0, "monitor": "val_accuracy", "value": 0.9, "select": "last"},
        "epochs": 1,
        "steps": 1,
        "num_replicas": 2,
    }
    run_driver.print_summary(argparse.Namespace(metrics=metrics, run_dir=str(tmp_path)))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Test accuracy: 98.77% on 'test' (best.keras; test loss 0.0432, cross-entropy)"
    assert out[1].startswith("Kept model: the last epoch, 1 of 1 (--select last)")
    assert out[2] == f"Trained 1 epoch, 1 step on 2 replica(s); run directory: {tmp_path}"
    assert out[3].startswith(f"Models: {tmp_path / 'best.keras'} and best.npz (the kept model")
