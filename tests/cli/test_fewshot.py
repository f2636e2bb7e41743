"""Tests of `keras-vit fewshot` on the shared tiny `keras-vit train` run."""

import re
import sys

import numpy as np
import pytest

from keras_vit.cli.main import main
from tests.helpers.cli_runs import pretrained_run


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return pretrained_run(tmp_path_factory)


def test_fewshot_prints_mean_and_spread_per_shot_count(trained, capsys):
    import keras_vit
    from keras_vit import data
    from keras_vit.train import runs

    argv = ["fewshot", str(trained), "--dataset", "digits", "--shots", "1", "3", "--seeds", "2"]
    assert main([*argv, "--holdout-per-class", "2"]) == 0
    out = capsys.readouterr().out
    assert "'pool' features (64-d), ridge regression to {-1, 1}^10 with a bias column" in out
    assert "2 seed(s); 500 'test' images" in out
    rows = dict(re.findall(r"^\s+(\d+)\s+(\d+\.\d+)%\s+\d+\.\d+\s+2\^", out, re.MULTILINE))
    assert sorted(rows) == ["1", "3"]
    # The same protocol through the Python API on the same model and data.
    model = runs.load_model(trained / "best.keras")
    kwargs = dict(image_size=8, batch_size=64, training=False, channels=1)
    results = keras_vit.fewshot_evaluate(
        model, data.load("digits", "train", **kwargs), data.load("digits", "test", **kwargs),
        shots=(1, 3), seeds=2, holdout_per_class=2,
    )  # fmt: skip
    for shots, result in results.items():
        assert float(rows[str(shots)]) == pytest.approx(100 * result.mean, abs=0.006)


# a small pool and test set: 10 images per class, 5 per class scored
SMALL = ["--shots", "2", "--seeds", "1", "--holdout-per-class", "0"]
SMALL += ["--train-split", "train[:10]", "--test-split", "test[:5]"]


@pytest.mark.parametrize("quiet", [False, True])
def test_a_progress_bar_on_a_terminal_and_only_the_result_with_quiet(
    trained, capsys, monkeypatch, quiet
):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    argv = ["fewshot", str(trained), "--dataset", "digits", *SMALL]
    assert main(argv + ["--quiet"] * quiet) == 0
    out = capsys.readouterr().out
    result = [line for line in out.splitlines() if line.strip()][-3:]
    assert result[0].startswith("Few-shot linear evaluation of ")
    assert result[1].split() == ["shots", "accuracy", "±", "std", "l2", "chosen", "per", "seed"]
    assert re.fullmatch(r"\s+2\s+\d+\.\d+%\s+0\.00\s+2\^-?\d+", result[2]), result[2]
    if quiet:
        assert out.splitlines() == result
    else:
        assert "/Unknown" in out  # the Keras progress bar of the feature extraction


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--train-split", "dev"], "--train-split: dataset 'digits' has no split 'dev'"),
        (["--holdout-per-class", "-1"], "--holdout-per-class must be >= 0"),
        (["--shots", "400"], "400-shot evaluation needs 400 training examples of every class"),
    ],
)
def test_bad_arguments_exit_2(trained, capsys, extra, message):
    assert main(["fewshot", str(trained), "--dataset", "digits", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


@pytest.mark.parametrize(
    "flags, policy, xla",
    [
        (["--mixed-precision", "mixed_bfloat16", "--no-jit-compile"], "mixed_bfloat16", False),
        (["--mixed-precision", "float32", "--jit-compile"], "float32", True),
    ],
)
def test_features_are_computed_under_the_chosen_precision(
    trained, capsys, monkeypatch, flags, policy, xla
):
    from keras_vit.evaluate import fewshot

    seen, collect = [], fewshot.collect_features

    def spy(extractor, data, **kwargs):
        seen.append((extractor.outputs[0].dtype, extractor.jit_compile))
        return collect(extractor, data, **kwargs)

    monkeypatch.setattr(fewshot, "collect_features", spy)
    assert main(["fewshot", str(trained), "--dataset", "digits", *SMALL, *flags]) == 0
    compute_dtype = "bfloat16" if policy == "mixed_bfloat16" else "float32"
    assert seen == [(compute_dtype, xla)]
    assert f"precision {policy}, XLA {'on' if xla else 'off'}." in capsys.readouterr().out


def _no_model_loading(monkeypatch):
    from keras_vit.cli import model_files

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(model_files, "load_model", refuse)


def test_too_many_shots_are_refused_before_the_model_is_loaded(trained, capsys, monkeypatch):
    from keras_vit.data import embedded

    _no_model_loading(monkeypatch)
    per_class = np.bincount(embedded.read_embedded("digits")["y_train"])  # the file's labels
    assert main(["fewshot", str(trained), "--dataset", "digits", "--shots", "5", "500"]) == 2
    assert capsys.readouterr().err.strip() == (
        "keras-vit fewshot: error: --shots 500 is too many for --train-split 'train' of "
        "'digits': 500-shot evaluation needs 500 training examples of every class; class 0 "
        f"has {per_class[0]}."
    )
    argv = ["fewshot", str(trained), "--dataset", "digits", "--train-split", "train[:20]"]
    assert main([*argv, "--shots", "21"]) == 2  # a slice: 20 images of each class
    assert "needs 21 training examples of every class; class 0 has 20." in capsys.readouterr().err


def test_a_folder_class_with_too_few_images_is_named(trained, tmp_path, capsys, monkeypatch):
    import tensorflow as tf

    _no_model_loading(monkeypatch)
    for name, count in (("cat", 3), ("dog", 1)):
        (tmp_path / name).mkdir()
        for index in range(count):
            image = tf.fill((8, 8, 1), tf.constant(40 * index, tf.uint8))
            (tmp_path / name / f"{index}.png").write_bytes(tf.io.encode_png(image).numpy())
    argv = ["fewshot", str(trained), "--dataset", str(tmp_path), "--test-split", "train"]
    argv += ["--allow-test-selection"]  # a folder with one split, scored on its shots' pool
    assert main([*argv, "--shots", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("needs 2 training examples of every class; class dog has 1."), err


def test_the_shot_check_counts_only_files_that_decode(trained, tmp_path, capsys, monkeypatch):
    from tests.helpers import bad_images

    _no_model_loading(monkeypatch)
    bad_images.write_folder(tmp_path)  # digit_1: 3 good files and 5 that do not decode
    good = bad_images.GOOD_PER_CLASS
    argv = ["fewshot", str(trained), "--dataset", str(tmp_path), "--test-split", "train"]
    argv += ["--allow-test-selection"]  # a folder with one split, scored on its shots' pool
    assert main([*argv, "--shots", str(good + 1)]) == 2  # 8 files of digit_1, 3 images
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        f"needs {good + 1} training examples of every class; class digit_1 has {good}."
    ), err
    assert main([*argv, "--shots", str(good + 1), "--bad-images", "fail"]) == 2
    assert "Bad image" in capsys.readouterr().err  # refused before the model is loaded


@pytest.mark.parametrize(
    "splits", [["--train-split", "test", "--test-split", "test"], ["--train-split", "test[:20]"]]
)
def test_shots_drawn_from_the_scored_split_are_refused_unless_asked(
    trained, capsys, monkeypatch, splits
):
    _no_model_loading(monkeypatch)
    argv = ["fewshot", str(trained), "--dataset", "digits", "--shots", "2", *splits]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert f"--train-split '{splits[1]}' shares images with --test-split 'test'" in err, err
    assert "pass --allow-test-selection to do this on purpose" in err


def test_allowed_selection_on_the_scored_split_runs_and_warns(trained, capsys, caplog):
    argv = ["fewshot", str(trained), "--dataset", "digits", "--shots", "2", "--seeds", "1"]
    argv += ["--train-split", "test[:10]", "--test-split", "test[:5]", "--holdout-per-class", "0"]
    assert main([*argv, "--allow-test-selection"]) == 0
    assert "Selection on the test split, as asked (--allow-test-selection)" in caplog.text
    assert "Few-shot linear evaluation of " in capsys.readouterr().out
    caplog.clear()
    argv[argv.index("test[:5]")] = "test[10:15]"  # disjoint slices: no overlap, no warning
    assert main(argv) == 0
    assert "as asked" not in caplog.text


def test_a_folder_with_best_keras_but_no_config_is_a_model_outside_a_run(tmp_path, capsys):
    """Was a traceback "Cannot resume: ... (no config.json)"; now the folder's best.keras
    is a model without a run, and what is missing is the dataset to evaluate on."""
    folder = tmp_path / "copied"
    folder.mkdir()
    (folder / "best.keras").write_bytes(b"")
    assert main(["fewshot", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "--dataset is required for a model outside a run directory" in err, err
    assert "resume" not in err.lower() and "config.json" not in err
