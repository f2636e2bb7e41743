"""Tests of `keras-vit fewshot` on the shared tiny `keras-vit train` run."""

import re

import pytest

from keras_vit.cli.main import main
from tests.helpers.cli_runs import pretrained_run


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return pretrained_run(tmp_path_factory)


def test_fewshot_prints_mean_and_spread_per_shot_count(trained, capsys):
    import keras_vit
    from keras_vit import data, runs

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
