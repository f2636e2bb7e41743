"""Tests of `keras-vit train`: a real tiny run, and every bad argument -> exit 2 before work."""

import json
import os
import subprocess
import sys
import types

import pytest

from keras_vit.cli.main import main
from keras_vit.runtime import distribute
from keras_vit.train import training
from tests.helpers.cli_runs import TRAIN_ARGS, pretrained_run


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return pretrained_run(tmp_path_factory)


def test_train_writes_a_run_and_prints_test_accuracy(trained):
    run_dir = trained  # made by `keras-vit train` + TRAIN_ARGS + --seed 3
    out = run_dir.with_suffix(".stdout.txt").read_text()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    accuracy = 100 * metrics["test"]["accuracy"]
    assert f"Test accuracy: {accuracy:.2f}% on 'test' (best.keras;" in out
    assert "cross-entropy without label smoothing" in out
    assert "on 'train[90%:]' (10 images, not trained on)" in out
    assert "Kept model: the last epoch, 1 of 1 (--select last); val_accuracy " in out
    # 50 images: 1 per class is carved for validation, 40 train = 1 step of 25
    assert "Trained 1 epoch, 1 step on 1 replica(s)" in out
    assert (
        "Models: best.keras and best.npz (the kept model: the last epoch, --select last), "
        "last.keras; best.json names the epoch\nNext:\n" in out
    )
    assert out.endswith(f"  tensorboard --logdir {run_dir.parent}\n")
    # at most 120 columns where the run directory is a short relative path like runs/x
    short = out.replace(str(run_dir.parent), "runs")
    assert max(len(line) for line in short.splitlines()) <= 120, short
    config = json.loads((run_dir / "config.json").read_text())
    recipe = training.TrainConfig()
    assert config["run"]["recipe"]["seed"] == 3
    assert config["run"]["recipe"]["hidden_dim"] == recipe.hidden_dim  # the default recipe
    assert config["resolved"]["dataset"] == "mnist"
    assert config["run"]["select"] == "last"
    assert json.loads((run_dir / "best.json").read_text())["select"] == "last"
    assert config["resolved"]["image_size"] == [8, 8]
    assert config["resolved"]["steps_per_epoch"] == 40 // 25
    resolved = config["resolved"]
    assert (resolved["train_split"], resolved["validation_split"]) == ("train[:90%]", "train[90%:]")
    assert (resolved["split_seed"], resolved["test_split"]) == (0, "test")
    assert (resolved["num_train_examples"], resolved["num_validation_examples"]) == (40, 10)
    for name in ("best.keras", "best.npz", "last.keras", "history.csv", "learning_curves.png"):
        assert (run_dir / name).is_file(), name


def test_select_best_reaches_the_run(tmp_path, capsys, caplog):
    run_dir = tmp_path / "run"
    argv = [*TRAIN_ARGS, "--epochs", "2", "--select", "best", "--run-dir", str(run_dir)]
    with caplog.at_level("INFO"):
        assert main(argv) == 0
    out = capsys.readouterr().out
    # the precision sentence once: on stdout, not again as an INFO log
    assert out.count("  precision: float32") == 1
    assert not [r for r in caplog.records if r.getMessage().startswith("Precision: ")]
    assert out.count("Time left: about ") == 1  # after epoch 1 of 2
    best = json.loads((run_dir / "best.json").read_text())
    assert best["select"] == "best"
    assert json.loads((run_dir / "config.json").read_text())["run"]["select"] == "best"
    assert f"Kept model: the best epoch, {best['epoch'] + 1} of 2, by val_accuracy " in out
    kept = f"(the kept model: epoch {best['epoch'] + 1}, the best on validation), last.keras"
    assert f"{kept}; best.json names the epoch\nNext:\n" in out


def test_output_to_a_file_first_names_the_run_then_one_line_per_epoch(trained):
    """stdout is not a terminal here: no progress-bar control codes, one line per epoch."""
    lines = trained.with_suffix(".stdout.txt").read_text().splitlines()
    assert lines[0] == f"Run {trained}: default hybrid ViT on mnist (40 training images), float32"
    assert lines[1] == (
        "  model: default (hybrid: BiT ResNet root, 32 channels, + ViT patch 1, hidden_dim 64, "
        "layers 4, heads 4)"
    )
    assert lines[2] == (
        "  data: mnist, 10 classes, 8x8: 40 training images of 'train[:90%]', 10 validation "
        "('train[90%:]'), test 'test'"
    )
    assert lines[3].startswith("  precision: float32, XLA off")
    assert lines[4] == "  strategy: default strategy, 1 replica(s)"
    assert lines[5] == "Compiling the training step (first step) ..."  # no silent wait
    assert "\n".join(lines).count("precision: ") == 1
    epoch_lines = [line for line in lines if line.startswith("epoch ")]
    assert len(epoch_lines) == 1 and epoch_lines[0].startswith("epoch 1/1  ")
    assert "val_accuracy" in epoch_lines[0]
    text = "\n".join(lines)
    assert "\r" not in text and "\x08" not in text and "Epoch 1/1" not in text


def test_quiet_prints_only_the_result(trained, capsys):
    assert main(["train", "--run-dir", str(trained), "--resume", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Test accuracy: ")
    assert "Run " not in out and "Resuming" not in out


def test_resume_a_complete_run_uses_stored_config(trained, capsys):
    before = (trained / "metrics.json").read_text()
    assert main(["train", "--run-dir", str(trained), "--resume"]) == 0
    out = capsys.readouterr().out
    assert "Resuming" in out and "Test accuracy" in out
    assert (trained / "metrics.json").read_text() == before


def expect_usage_error(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"keras-vit {argv[0]}: error: ")
    assert message in err, err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--dataset", "mnits"], "Unknown data source"),
        (["--model", "Q/7"], "Unknown model 'Q/7'"),
        (["--image-size", "30", "--patch-size", "4"], "not divisible by the patch size"),
        (["--strategy", "warp"], "Unknown distribution strategy 'warp'"),
        (["--strategy", "tpu"], "No TPU found"),
        (["--strategy", "model_parallel"], "needs KERAS_BACKEND=jax; the Keras backend is 'ten"),
        (["--resume"], "--resume needs the --run-dir"),
        (["--batch-size", "100000"], "larger than the 3600 training images"),
        (["--validation-split", "train"], "would select on images the model trains on"),
        (["--validation-split", "dev"], "has no split 'dev' to validate on"),
        (["--model", "Ti/16", "--stem", "patch"], "--model Ti/16 is a ViT (patch stem)"),
        (["--model", "r50b16", "--stem", "resnet"], "is a hybrid (ResNet stem) by its table"),
        # an empty split: it trained 0 steps and reported success, or crashed after epoch 1
        (["--validation-split", "train[0%:]"], "no training images in 'train[:0%]'"),
        (["--validation-split", "train[100%:]"], "'train[100%:]' of 'mnist' holds no images"),
    ],
)
def test_bad_arguments_exit_2_before_training(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.delenv("TPU_NAME", raising=False)
    run_dir = tmp_path / "run"
    extra = [] if "--resume" in argv else ["--run-dir", str(run_dir)]
    expect_usage_error(capsys, ["train", *argv, *extra], message)
    assert not run_dir.exists()  # nothing was written: the check came first


def test_batch_not_divisible_by_replicas_exits_2(capsys, tmp_path, monkeypatch):
    # A machine with four replicas (e.g. four GPUs): only the replica count matters here.
    four_replicas = types.SimpleNamespace(num_replicas_in_sync=4)
    monkeypatch.setattr(distribute, "resolve_strategy", lambda name: four_replicas)
    run_dir = tmp_path / "run"
    argv = ["train", "--batch-size", "30", "--run-dir", str(run_dir)]
    expect_usage_error(capsys, argv, "multiple of the number of replicas (4")
    assert not run_dir.exists()


def test_existing_or_missing_run_dir_exits_2(trained, capsys, tmp_path):
    expect_usage_error(capsys, ["train", "--run-dir", str(trained)], "pass --resume")
    missing = tmp_path / "missing"
    argv = ["train", "--run-dir", str(missing), "--resume"]
    expect_usage_error(capsys, argv, "not a run directory")


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"run": {', "is not valid JSON"),
        ('{"run": {"recipe": {"epochs": 0}}}', "`epochs` must be a positive integer"),
        ('{"run": {"select": "Best"}}', "Unknown select 'Best'"),
    ],
)
def test_resume_from_a_damaged_config_json_exits_2_naming_it(tmp_path, capsys, text, message):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(text)
    expect_usage_error(capsys, ["train", "--run-dir", str(run_dir), "--resume"], message)
    expect_usage_error(capsys, ["train", "--run-dir", str(run_dir), "--resume"], "config.json")
    assert os.listdir(run_dir) == ["config.json"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--learning-rate", "inf"], "expected a finite positive number, got 'inf'"),
        (["--learning-rate", "nan"], "expected a finite positive number, got 'nan'"),
        (["--seed", "-1"], "expected an integer in [0, 2**32), got '-1'"),
        (["--split-seed", "4294967296"], "expected an integer in [0, 2**32)"),
    ],
)
def test_numbers_outside_their_rule_are_argparse_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        main(["train", *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_invalid_number_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "--epochs", "0"])
    assert info.value.code == 2
    assert "expected a positive integer, got '0'" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["train", "finetune"])
def test_an_unknown_select_is_an_argparse_error(capsys, command):
    with pytest.raises(SystemExit) as info:
        main([command, "--select", "first"])
    assert info.value.code == 2
    assert "argument --select: invalid choice: 'first'" in capsys.readouterr().err


def test_keras_vit_help_in_a_real_process():
    command = os.path.join(os.path.dirname(sys.executable), "keras-vit")
    process = subprocess.run(
        [command, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert process.returncode == 0, process.stderr[-2000:]
    for word in ("train", "finetune", "evaluate", "predict"):
        assert word in process.stdout


@pytest.mark.parametrize("command", ["train", "finetune", "evaluate", "predict"])
def test_subcommand_help(capsys, command):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: keras-vit {command}")
    expected = {"train": "--resume", "finetune": "--weights", "evaluate": "--split"}
    assert expected.get(command, "--top-k") in out


@pytest.mark.parametrize("command", ["train", "finetune"])
def test_help_gives_the_recipe_defaults(capsys, command):
    """`--help` names the defaults a run uses (the recipe dataclass a run is built from):
    epochs or steps, batch size, learning rate, seed."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    text = " ".join(out.split("options:", 1)[1].split())  # argparse wraps lines anywhere
    recipe = training.TrainConfig() if command == "train" else training.FinetuneConfig()
    schedule = "--epochs N number of epochs" if command == "train" else "--steps N"
    length = recipe.epochs if command == "train" else recipe.steps
    assert f"{schedule}" in text and f"(default: {length})" in text.split(schedule)[1][:90]
    expected = {
        "--batch-size N global batch size": f"(default: {recipe.batch_size})",
        "--learning-rate LR peak learning rate": f"(default: {recipe.learning_rate:g})",
        "--seed N random seed": f"default: {recipe.seed})",
        "--dataset DATA": f"(default: {recipe.dataset})",
    }
    for flag, default in expected.items():
        assert flag in text, flag
        assert default in text.split(flag)[1][:200], (flag, default)
    if command == "train":
        assert f"(default: {recipe.image_size}, the recipe's)" in text


def test_disk_full_exits_1_with_one_line_naming_the_file(tmp_path, capsys, monkeypatch):
    """ENOSPC injected at the write call (Keras' `Model.save` writes half a file, then fails):
    exit 1, one line with the final path and the cause, no temporary file, no traceback."""
    import errno

    import keras

    def save_half_then_fail(self, filepath, *args, **kwargs):
        with open(filepath, "wb") as handle:
            handle.write(b"PK\x03\x04 half a zip")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(keras.Model, "save", save_half_then_fail)
    run_dir = tmp_path / "run"
    argv = [*TRAIN_ARGS, "--run-dir", str(run_dir)]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"keras-vit train: error: cannot write {run_dir / 'last.keras'}: " + (
        "No space left on device"
    )
    assert not [name for name in os.listdir(run_dir) if ".tmp" in name]
    assert not (run_dir / "last.keras").exists() and not (run_dir / ".lock").exists()


def test_ctrl_c_stops_at_once_with_the_resume_command(tmp_path):
    import signal
    import time

    run_dir = tmp_path / "run"
    code = "import sys; from keras_vit.cli.main import main; sys.exit(main())"
    argv = [*TRAIN_ARGS[:-3], "--epochs", "200", "--no-jit-compile", "--run-dir", str(run_dir)]
    process = subprocess.Popen(
        [sys.executable, "-c", code, *argv],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not (run_dir / "backup" / "state.json").exists():  # epoch 1 is saved
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _, err = process.communicate(timeout=60)
        stopped_after = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-2:] == [
        "keras-vit train: interrupted. The run keeps its last finished epoch; continue with:",
        f"  keras-vit train --resume --run-dir {run_dir}",
    ]
    assert stopped_after < 30  # at once: not after the remaining ~200 epochs
    assert not (run_dir / ".lock").exists() and (run_dir / "last.keras").is_file()


def test_a_folder_without_test_split_trains_on_a_carved_validation_split(tmp_path, capsys):
    """`keras-vit train --dataset imgs` on class sub-folders only: a stratified tenth of the
    images is held out for selection (recorded in config.json); no test figure is claimed."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    for label in ("cat", "dog"):
        (tmp_path / "imgs" / label).mkdir(parents=True)
        for index in range(10):
            pixels = rng.integers(0, 256, (8, 8, 1), dtype=np.uint8)
            (tmp_path / "imgs" / label / f"{index}.png").write_bytes(
                tf.io.encode_png(pixels).numpy()
            )
    run_dir = tmp_path / "run"
    argv = ["train", "--dataset", str(tmp_path / "imgs"), "--image-size", "8", "--batch-size"]
    argv += ["6", "--epochs", "1", "--no-jit-compile", "--run-dir", str(run_dir)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Validation accuracy:" in out and "no test split" in out
    resolved = json.loads((run_dir / "config.json").read_text())["resolved"]
    assert resolved["train_split"] == "train[:90%]" and resolved["test_split"] is None
    assert (resolved["num_train_examples"], resolved["num_validation_examples"]) == (18, 2)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert "test" not in metrics and "accuracy" in metrics["validation"]
    assert metrics["steps"] == 18 // 6


@pytest.mark.parametrize("nested", [False, True])
def test_a_folder_with_one_class_is_refused_before_the_run_directory(tmp_path, capsys, nested):
    """One class sub-folder (flat `imgs/<class>/` or `imgs/<split>/<class>/`): one line naming
    the folder, the class found and the rule, exit 2, no run directory (not an error blaming
    the batch size, nor one from inside Keras after writing the run directory)."""
    import numpy as np
    from PIL import Image

    root = tmp_path / "imgs"
    folders = [root / "train" / "cats", root / "test" / "cats"] if nested else [root / "cats"]
    for folder in folders:
        folder.mkdir(parents=True)
        for index in range(12):
            pixels = np.random.default_rng(index).integers(0, 256, (8, 8), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{index}.png")
    run_dir = tmp_path / "run"
    argv = ["train", "--dataset", str(root), "--batch-size", "4", "--run-dir", str(run_dir)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"keras-vit train: error: The folder {str(root)!r} has 1 class ('cats'); training a "
        "classifier needs at least two classes (an image folder: one sub-folder per class)."
    )
    assert not run_dir.exists()


@pytest.mark.parametrize("split", ["test", "test[:50%]"])
def test_validation_on_the_test_split_is_refused_unless_asked(capsys, tmp_path, split):
    run_dir = tmp_path / "run"
    argv = ["train", *TRAIN_ARGS[1:], "--validation-split", split, "--run-dir", str(run_dir)]
    message = f"--validation-split '{split}' shares images with the test split 'test': "
    expect_usage_error(capsys, argv, message)
    assert not run_dir.exists()


def test_allow_test_selection_is_recorded_and_warned_about(capsys, caplog, tmp_path):
    run_dir = tmp_path / "run"
    argv = ["train", *TRAIN_ARGS[1:], "--validation-split", "test", "--run-dir", str(run_dir)]
    assert main([*argv, "--allow-test-selection"]) == 0
    warned = "Selection on the test split, as asked (--allow-test-selection): "
    assert warned in caplog.text  # on stderr (main's logging), one WARNING line
    config = json.loads((run_dir / "config.json").read_text())
    assert config["run"]["allow_test_selection"] is True
    assert config["resolved"]["validation_split"] == "test"


def test_resume_refuses_flags_that_differ_from_the_stored_run(trained, capsys):
    before = (trained / "metrics.json").read_text()
    resume = ["--run-dir", str(trained), "--resume"]
    argv = ["train", *resume, "--epochs", "4", "--learning-rate", "0.5", "--stem", "patch"]
    expect_usage_error(capsys, argv, "which these flags would change: --stem patch (the run")
    expect_usage_error(capsys, argv, "--epochs 4 (the run has 1)")
    expect_usage_error(capsys, argv, "--learning-rate 0.5 (the run has 0.003)")
    expect_usage_error(capsys, argv, "--stem patch (the run has resnet), --epochs 4")
    assert (trained / "metrics.json").read_text() == before
    # the original command line with --resume added is the same run: accepted
    assert main([*TRAIN_ARGS, "--seed", "3", *resume, "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("Test accuracy: ")


def test_resume_names_flags_typed_at_their_default_value(trained, capsys):
    """The run has --seed 3, --batch-size 25 and --no-jit-compile; --seed 0, --batch-size 64
    and --jit-compile auto are the recipe's defaults, which a comparison with the default
    configuration cannot see."""
    resume = ["train", "--run-dir", str(trained), "--resume"]
    expect_usage_error(capsys, [*resume, "--seed", "0"], "--seed 0 (the run has 3)")
    expect_usage_error(capsys, [*resume, "--jit-compile", "auto"], "--jit-compile auto (the")
    expect_usage_error(capsys, [*resume, "--batch-size", "64"], "--batch-size 64 (the run has 25")
    # a typed flag equal to the stored value (here also the default) is the same run
    assert main([*resume, "--strategy", "auto", "--quiet"]) == 0
    # plain --resume (jit_compile "auto" by default) and the invocation's own flags still run
    assert main([*resume, "--quiet", "--log-every", "epoch"]) == 0
    assert capsys.readouterr().out.startswith("Test accuracy: ")


@pytest.mark.parametrize("subcommand", ["train", "finetune"])
def test_remat_flag_reaches_the_run_config_and_the_model_arguments(subcommand):
    from keras_vit.cli import finetune as finetune_command
    from keras_vit.cli import train as train_command
    from keras_vit.cli.main import build_parser
    from keras_vit.train import run_config, run_plan

    module = {"train": train_command, "finetune": finetune_command}[subcommand]
    extra = ["--weights", "Ti/16"] if subcommand == "finetune" else []
    for flags, expected in (([], False), (["--remat"], True)):
        args = build_parser().parse_args([subcommand, *extra, *flags])
        config = module.build_config(args)
        assert config.remat is expected
        assert run_config.RunConfig.from_dict(config.to_dict()).remat is expected  # config.json
    if subcommand == "train":
        kwargs = run_plan.train_model_kwargs(config, 10, 1, (28, 28))
        assert kwargs["remat"] is True
