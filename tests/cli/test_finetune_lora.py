"""`keras-vit finetune --lora-rank R`: a LoRA run on the embedded digits whose files hold the
merged (adapted) model."""

from __future__ import annotations

import json

import numpy as np
import pytest

import keras_vit
from keras_vit.cli.main import main
from keras_vit.train import runs
from tests.helpers.cli_runs import pretrained_run


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    source_dir = pretrained_run(tmp_path_factory)
    run_dir = tmp_path_factory.mktemp("finetune_lora") / "digits"
    argv = [
        "finetune",
        "--weights", str(source_dir / "best.npz"),
        "--lora-rank", "2",
        "--dataset", "digits",
        "--image-size", "12",
        "--shots-per-class", "5",
        "--batch-size", "25",
        "--steps", "2",
        "--learning-rate", "0.5",
        "--no-jit-compile",
        "--run-dir", str(run_dir),
    ]  # fmt: skip
    assert main(argv) == 0
    return source_dir, run_dir


def test_the_run_records_the_rank_and_its_files_agree(lora_run):
    source_dir, run_dir = lora_run
    config = json.loads((run_dir / "config.json").read_text())
    assert config["run"]["lora_rank"] == 2
    kept = runs.load_model(run_dir / "best.keras")
    x = np.random.default_rng(0).uniform(-1, 1, (5, 12, 12, 1)).astype("float32")
    expected = kept.predict(x, verbose=0)
    assert np.abs(expected).max() > 1e-3
    back = keras_vit.from_checkpoint(run_dir / "best.npz")
    np.testing.assert_allclose(back.predict(x, verbose=0), expected, atol=1e-4, rtol=0)


def test_the_frozen_body_moved_only_through_the_adapters(lora_run):
    """The patch embedding is frozen (identical); the block kernels carry the merged update."""
    source_dir, run_dir = lora_run
    source = {w.path: np.asarray(w) for w in runs.load_model(source_dir / "best.keras").weights}
    tuned = {w.path: np.asarray(w) for w in runs.load_model(run_dir / "last.keras").weights}
    np.testing.assert_array_equal(tuned["conv_root/kernel"], source["conv_root/kernel"])
    kernel = "encoderblock_0/MlpBlock_3/Dense_0/kernel"
    assert not np.array_equal(tuned[kernel], source[kernel])
    bias = "encoderblock_0/MlpBlock_3/Dense_0/bias"
    np.testing.assert_array_equal(tuned[bias], source[bias])
    assert not [path for path in tuned if "lora" in path]


def test_lora_rank_is_a_finetune_flag_only(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "--lora-rank", "2"])
    assert info.value.code == 2
    assert "--lora-rank" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["finetune", "--weights", "x.npz", "--lora-rank", "0"])
    assert "--lora-rank" in capsys.readouterr().err
