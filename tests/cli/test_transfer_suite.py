"""Tests of `keras-vit transfer-suite` (VTAB-1k style) on the shared tiny run."""

import json
import re

import pytest

from keras_vit.cli.main import main
from tests.helpers.cli_runs import pretrained_run


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return pretrained_run(tmp_path_factory)


def test_suite_fine_tunes_on_800_of_1000_and_reports_test_accuracy(trained, tmp_path, capsys):
    run_dir = tmp_path / "suite"
    argv = ["transfer-suite", str(trained), "--tasks", "digits", "--steps", "2"]
    argv += ["--batch-size", "25", "--no-jit-compile", "--run-dir", str(run_dir), "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    row = re.search(r"^digits\s+10\s+800\s+200\s+500\s+(\d+\.\d+)%\s+(\d+\.\d+)%$", out, re.M)
    assert row, out
    mean = re.search(r"^mean\s+(\d+\.\d+)%$", out, re.M)
    assert mean and mean[1] == row[2]
    # --quiet: the table only, no epoch lines of the fine-tuning
    lines = out.splitlines()
    assert len(lines) == 5 and lines[0].startswith("Transfer suite (VTAB-1k style) of "), out
    assert lines[1].split()[:2] == ["task", "classes"] and lines[2:4] == [row[0], mean[0]]
    assert lines[4] == f"Run directories: {run_dir}/<task>"
    config = json.loads((run_dir / "digits" / "config.json").read_text())
    assert config["run"]["task"] == "finetune" and config["run"]["recipe"]["steps"] == 2
    assert config["run"]["recipe"]["learning_rate"] == 0.01  # the paper's VTAB rate
    assert config["run"]["select"] == "last"  # the model at the end of the schedule
    assert lines[0].endswith("keeping the model at the end of the schedule")
    resolved = config["resolved"]
    assert (resolved["train_split"], resolved["validation_split"]) == (
        "train[:80]",
        "train[80:100]",
    )
    assert resolved["image_size"] == [8, 8]  # the pre-trained model's
    # the shared precision flags: --mixed-precision defaults to auto, which records its reason
    assert config["run"]["mixed_precision"] == "auto"
    assert resolved["mixed_precision"] == "float32" and resolved["jit_compile"] is False
    assert resolved["precision_reason"]
    metrics = json.loads((run_dir / "digits" / "metrics.json").read_text())
    assert float(row[2]) == pytest.approx(100 * metrics["test"]["accuracy"], abs=0.006)


def test_the_800_and_200_examples_are_disjoint_and_stratified():
    import numpy as np

    from keras_vit.data import embedded, splits

    labels = embedded.embedded_arrays("digits", "train")[1]
    train = splits.slice_indices(labels, splits.parse_split("train[:80]"), seed=0)
    val = splits.slice_indices(labels, splits.parse_split("train[80:100]"), seed=0)
    assert len(train) == 800 and len(val) == 200 and not set(train) & set(val)
    np.testing.assert_array_equal(np.bincount(labels[val]), [20] * 10)


def test_an_unknown_task_exits_2_before_any_training(trained, tmp_path, capsys):
    run_dir = tmp_path / "suite"
    argv = ["transfer-suite", str(trained), "--tasks", "digits", "mnits", "--run-dir", str(run_dir)]
    assert main(argv) == 2
    assert "Unknown data source" in capsys.readouterr().err
    assert not run_dir.exists()


def test_a_task_folder_is_reused_only_with_the_same_settings(trained, tmp_path, capsys):
    run_dir = tmp_path / "suite"
    argv = ["transfer-suite", str(trained), "--tasks", "digits", "--steps", "2", "--quiet"]
    argv += ["--batch-size", "25", "--no-jit-compile", "--run-dir", str(run_dir)]
    assert main(argv) == 0
    first = capsys.readouterr().out
    metrics = (run_dir / "digits" / "metrics.json").read_text()
    assert main(argv) == 0  # the same settings: the finished task is reused
    assert capsys.readouterr().out == first
    changed = [*argv, "--learning-rate", "0.5", "--split-seed", "1"]
    assert main(changed) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"{run_dir / 'digits'}' holds a run of other settings: " in err, err
    assert "recipe.learning_rate 0.5 (the folder has 0.01)" in err
    assert "split_seed 1 (the folder has 0)" in err
    assert (run_dir / "digits" / "metrics.json").read_text() == metrics
    stored = run_dir / "digits" / "config.json"
    stored.write_text('{"run": {')  # damaged: refused naming the file, not a traceback
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"{run_dir / 'digits'}' cannot be reused: '{stored}' is not valid JSON" in err, err


def test_bad_images_is_a_flag_as_in_train_and_reaches_every_task():
    from keras_vit.cli.main import build_parser
    from keras_vit.evaluate import transfer_suite

    parser = build_parser()
    assert parser.parse_args(["transfer-suite", "m.keras"]).bad_images == "skip"
    args = parser.parse_args(["transfer-suite", "m.keras", "--bad-images", "fail"])
    assert args.bad_images == "fail"
    config = transfer_suite.task_config("digits", "m.keras", bad_images="fail")
    assert config.bad_images == "fail"


def test_select_is_a_flag_as_in_train_and_reaches_every_task(trained, monkeypatch):
    from keras_vit.cli.main import build_parser
    from keras_vit.evaluate import transfer_suite

    seen = {}

    def recording_suite(weights, run_dir, tasks, **kwargs):
        seen.update(kwargs)
        raise KeyboardInterrupt  # stop before training; main reports it and returns 130

    monkeypatch.setattr(transfer_suite, "run_suite", recording_suite)
    main(["transfer-suite", str(trained), "--select", "best", "--quiet"])
    assert seen["select"] == "best"

    parser = build_parser()
    assert parser.parse_args(["transfer-suite", "m.keras"]).select == "last"
    assert parser.parse_args(["transfer-suite", "m.keras", "--select", "best"]).select == "best"
    assert transfer_suite.task_config("digits", "m.keras").select == "last"
    assert transfer_suite.task_config("digits", "m.keras", select="best").select == "best"
