"""Tests of `keras-vit evaluate` on a `keras-vit train` run."""

import json
import logging
import re

import pytest

from keras_vit.cli.main import main
from tests.helpers.cli_runs import pretrained_run


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return pretrained_run(tmp_path_factory)


def reported_accuracy(out):
    match = re.search(r"accuracy (\d+\.\d+)%, top-(\d+) (\d+\.\d+)%, loss (\d+\.\d+)", out)
    assert match, out
    return float(match[1]), int(match[2]), float(match[3]), float(match[4])


@pytest.mark.parametrize("target", ["run", "best.keras", "best.npz"])
def test_evaluate_matches_the_runs_test_metrics(trained, capsys, target):
    """`train` reports the test figures of best.keras with plain cross-entropy: `evaluate`
    prints the same accuracy and loss."""
    path = trained if target == "run" else trained / target
    assert main(["evaluate", str(path), "--dataset", "mnist"]) == 0
    accuracy, k, top_k, loss = reported_accuracy(capsys.readouterr().out)
    held_out = json.loads((trained / "metrics.json").read_text())["test"]
    assert accuracy == pytest.approx(100 * held_out["accuracy"], abs=0.006)
    assert loss == pytest.approx(held_out["loss"], abs=1e-3)
    assert k == 5 and accuracy <= top_k <= 100


def expect_usage_error(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_evaluate_bad_arguments_exit_2(trained, capsys, tmp_path):
    expect_usage_error(capsys, ["evaluate", str(tmp_path / "x")], "not found")
    expect_usage_error(capsys, ["evaluate", str(tmp_path)], "not a run directory")
    expect_usage_error(
        capsys, ["evaluate", str(trained), "--dataset", "mnits"], "Unknown data source"
    )
    expect_usage_error(capsys, ["evaluate", str(trained), "--split", "dev"], "no split 'dev'")


def test_evaluate_in_bfloat16_logs_the_choice_and_stays_close(trained, capsys, caplog):
    caplog.set_level(logging.INFO)
    assert main(["evaluate", str(trained), "--mixed-precision", "mixed_bfloat16"]) == 0
    accuracy, _, _, loss = reported_accuracy(capsys.readouterr().out)
    assert "precision mixed_bfloat16, XLA off" in caplog.text
    assert "Precision: precision" not in caplog.text
    held_out = json.loads((trained / "metrics.json").read_text())["held_out"]
    assert accuracy == pytest.approx(100 * held_out["accuracy"], abs=2.0)
    assert loss == pytest.approx(held_out["loss"], rel=0.05)


def test_an_empty_split_exits_2(trained, capsys):
    """It was a KeyError traceback: Keras evaluates no batch and returns no accuracy."""
    assert main(["evaluate", str(trained), "--split", "train[90%:80%]"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "keras-vit evaluate: error: --split 'train[90%:80%]' of 'mnist' holds no images."


@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_a_damaged_config_json_exits_2_naming_it(trained, tmp_path, capsys, command):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir)
    (run_dir / "config.json").write_text('{"a":')
    from PIL import Image

    image = tmp_path / "digit.png"  # a real image: a missing or empty one is refused first
    Image.new("L", (8, 8)).save(image)
    extra = [str(image)] if command == "predict" else []
    assert main([command, str(run_dir), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"'{run_dir / 'config.json'}' is not valid JSON" in err, err


@pytest.mark.parametrize("command", ["evaluate", "predict", "export", "explain"])
@pytest.mark.parametrize("damage", ["truncated", "not a zip"])
def test_a_damaged_best_keras_exits_2_naming_it_not_as_missing(
    trained, tmp_path, capsys, command, damage
):
    """Keras reports any file that is not a zip as "File not found": the file exists, so
    the message says what is wrong with it instead."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir)
    model = run_dir / "best.keras"
    whole = model.read_bytes()
    model.write_bytes(whole[: len(whole) // 2] if damage == "truncated" else b"hello")
    import numpy as np
    import tensorflow as tf

    image = tmp_path / "x.png"
    image.write_bytes(tf.io.encode_png(np.zeros((28, 28, 1), np.uint8)).numpy())
    extra = {
        "predict": [str(image)],
        "export": [str(tmp_path / "serving")],
        "explain": [str(image), "--out", str(tmp_path / "map.png")],
    }.get(command, [])
    assert main([command, str(run_dir), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "not a readable .keras archive; it may be truncated or corrupt" in err, err
    assert "File not found" not in err and str(model) in err
