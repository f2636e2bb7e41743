"""Tests of `keras-vit finetune`: the paper's transfer step from a `keras-vit train` run."""

import contextlib
import io
import json

import numpy as np
import pytest
import scipy.ndimage

from keras_vit.cli.main import main
from keras_vit.train import runs
from tests.helpers.cli_runs import TRAIN_ARGS, pretrained_run


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
    source_dir = pretrained_run(tmp_path_factory)
    run_dir = tmp_path_factory.mktemp("finetune") / "digits"
    argv = [
        "finetune",
        "--weights", str(source_dir / "best.npz"),
        "--dataset", "digits",
        "--image-size", "12",
        "--shots-per-class", "5",
        "--batch-size", "25",
        "--steps", "2",
        "--learning-rate", "1e-9",  # weights stay where the transfer step put them
        "--no-jit-compile",
        "--run-dir", str(run_dir),
    ]  # fmt: skip
    assert main(argv) == 0
    return source_dir, run_dir


def test_finetune_run_records_the_transfer(finetuned):
    source_dir, run_dir = finetuned
    config = json.loads((run_dir / "config.json").read_text())
    assert config["run"]["task"] == "finetune"
    assert config["run"]["recipe"]["steps"] == 2
    resolved = config["resolved"]
    assert resolved["dataset"] == "digits"
    assert resolved["image_size"] == [12, 12]
    assert resolved["num_classes"] == 10
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 2  # 50 images / batch 25 = 2 steps = 1 epoch


def test_finetuned_model_has_zero_head_and_resized_position_table(finetuned):
    """Transfer as in the paper (vit_facts.md section 4): body carried over, zero head,
    position table grid resized 2x2 -> 3x3 (8 -> 12 pixels, patch 4) with order-1 zoom."""
    source_dir, run_dir = finetuned
    source = runs.load_model(source_dir / "best.keras")
    target = runs.load_model(run_dir / "last.keras")
    weights = {w.path: np.asarray(w) for w in target.weights}
    original = {w.path: np.asarray(w) for w in source.weights}
    np.testing.assert_allclose(weights["head/kernel"], 0.0, atol=1e-6)
    np.testing.assert_allclose(weights["head/bias"], 0.0, atol=1e-6)
    for path in ("embedding/conv/kernel", "encoderblock_0/MlpBlock_3/Dense_0/kernel"):
        np.testing.assert_allclose(weights[path], original[path], atol=1e-6)
    table = original["posembed_input/pos_embedding"]  # (1, 4, D): "gap" pooling, no class token
    hidden = table.shape[-1]
    expected = scipy.ndimage.zoom(table.reshape(2, 2, hidden), (1.5, 1.5, 1), order=1)
    np.testing.assert_allclose(
        weights["posembed_input/pos_embedding"], expected.reshape(1, 9, hidden), atol=1e-5
    )


def expect_usage_error(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_missing_weights_exit_2(capsys, tmp_path):
    run_dir = tmp_path / "run"
    expect_usage_error(capsys, ["finetune", "--run-dir", str(run_dir)], "--weights is required")
    missing = tmp_path / "nowhere" / "best.npz"
    argv = ["finetune", "--weights", str(missing), "--run-dir", str(run_dir)]
    expect_usage_error(capsys, argv, f"Weights file not found: {missing}")
    assert not run_dir.exists()


def test_finetune_bad_image_size_exits_2(capsys, tmp_path):
    # a pure ViT source (patch 4): the default recipe's hybrid stem takes any image size
    source_dir = tmp_path / "vit_source"
    with contextlib.redirect_stdout(io.StringIO()):
        status = main([*TRAIN_ARGS, "--stem", "patch", "--run-dir", str(source_dir)])
    assert status == 0
    run_dir = tmp_path / "run"
    argv = ["finetune", "--weights", str(source_dir), "--image-size", "10"]
    expect_usage_error(capsys, [*argv, "--run-dir", str(run_dir)], "not divisible by the patch")
    assert not run_dir.exists()


def test_finetune_a_dinov3_timm_file_at_a_new_image_size(tmp_path):
    """A (tiny, keras_vit-written) timm DINOv3 file fine-tuned at 12 px from 8 px: RoPE has
    no table to resize, the blocks rotate by the new 3x3 grid, the body is carried over and
    the head starts at zero."""
    import keras_vit
    from keras_vit.checkpoints import model_contents, write_checkpoint
    from tests.checkpoints.random_models import randomise

    source = randomise(
        keras_vit.DINOv3(
            "S/16",
            hidden_dim=16,
            num_heads=2,
            mlp_dim=32,
            num_layers=1,
            patch_size=4,
            image_size=8,
            channels=1,
            num_classes=3,
        )
    )
    weights = tmp_path / "dinov3" / "model.safetensors"
    weights.parent.mkdir()
    write_checkpoint(model_contents(source), weights, "timm")
    run_dir = tmp_path / "run"
    argv = [
        "finetune",
        "--weights", str(weights),
        "--dataset", "digits",
        "--image-size", "12",
        "--shots-per-class", "5",
        "--batch-size", "25",
        "--steps", "2",
        "--learning-rate", "1e-9",
        "--no-jit-compile",
        "--run-dir", str(run_dir),
    ]  # fmt: skip
    assert main(argv) == 0
    target = runs.load_model(run_dir / "last.keras")
    block = target.get_layer("encoderblock_0")
    assert block.rope["grid_size"] == [3, 3] and block.rope["num_prefix_tokens"] == 5
    assert target.output_shape == (None, 10)
    np.testing.assert_allclose(target.get_layer("head").get_weights()[0], 0.0, atol=1e-6)
    np.testing.assert_allclose(
        block.attention.query.kernel,
        source.get_layer("encoderblock_0").attention.query.kernel,
        atol=1e-6,
    )
