"""cli/run_driver: the lines `train`/`finetune` end with (from best.json and metrics.json of
a run; in a multi-worker job's non-chief process, only what that process did), --jit-compile
refused where the strategy cannot compile, unknown strategies as usage errors, and the default
run directory."""

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
    from keras_vit.train import run_directory

    monkeypatch.setattr(
        run_directory, "read_config", lambda d: {"resolved": {**RESOLVED, "test_split": "test"}}
    )
    metrics = {
        "test": {"accuracy": 0.98765, "loss": 0.04321, "loss_name": "cross-entropy"},
        "best": {"epoch": 0, "monitor": "val_accuracy", "value": 0.9, "select": "last"},
        "epochs": 1,
        "steps": 1,
        "num_replicas": 2,
    }
    result = argparse.Namespace(metrics=metrics, run_dir=str(tmp_path))
    run_driver.print_summary(result, "runs/r1", next_steps=True)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Test accuracy: 98.77% on 'test' (best.keras; test loss 0.0432, cross-entropy)"
    assert out[1].startswith("Kept model: the last epoch, 1 of 1 (--select last)")
    assert out[2] == "Trained 1 epoch, 1 step on 2 replica(s); run directory: runs/r1"
    assert out[3].startswith("Models: best.keras and best.npz (the kept model")
    assert out[4:] == [
        "Next:",
        "  keras-vit evaluate runs/r1",
        "  keras-vit predict runs/r1 IMAGE_OR_FOLDER",
        "  keras-vit export runs/r1 EXPORT_DIR",
        "  tensorboard --logdir runs",
    ]


def test_a_non_chief_worker_summarises_only_what_it_did(tmp_path, monkeypatch, capsys):
    """A multi-worker job's other process evaluates no test split and writes no file: its
    summary names its role and the chief, not "no test split", kept models or commands."""
    from keras_vit.train import run_directory

    monkeypatch.setattr(
        run_directory, "read_config", lambda d: {"resolved": {**RESOLVED, "test_split": "test"}}
    )
    metrics = {  # a worker's: validation from its history, no "test", best.json not its own
        "validation": {"accuracy": 0.5, "loss": 1.25},
        "held_out": {"accuracy": 0.5, "loss": 1.25},
        "best": None,
        "epochs": 2,
        "steps": 6,
        "num_replicas": 4,
    }
    result = argparse.Namespace(metrics=metrics, run_dir=str(tmp_path))
    run_driver.print_summary(result, "runs/r1", next_steps=True, worker=1)
    assert capsys.readouterr().out.splitlines() == [
        "Validation accuracy: 50.00% after the last epoch (loss with the training label "
        "smoothing 1.2500)",
        "Trained 2 epochs, 6 steps on 4 replica(s) as worker 1; the chief writes the run "
        "directory runs/r1 (models, history, the test figures of 'test') and prints the run's "
        "summary",
    ]


@pytest.mark.parametrize(
    "test_split, worker, then",
    [("test", None, "the test evaluation"), (None, None, None), ("test", 1, None)],
)
def test_only_a_process_that_evaluates_a_test_split_announces_it(test_split, worker, then):
    assert run_driver.after_training({"test_split": test_split}, worker) == then
