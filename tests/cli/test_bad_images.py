"""Bad image files in `keras-vit train` / `evaluate` / `predict` (`--bad-images skip|fail`)."""

import logging
import os
import re

import pytest

from keras_vit.cli.main import main
from tests.helpers.bad_images import write_folder
from tests.helpers.cli_runs import pretrained_run

TRAIN = ["--image-size", "8", "--batch-size", "2", "--epochs", "1", "--no-jit-compile"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """root/train with the bad files, root/test with good images only."""
    root = tmp_path_factory.mktemp("bad_images") / "data"
    good, bad = write_folder(root / "train")
    write_folder_good_only(root / "test")
    return root, good, bad


def write_folder_good_only(root):
    _, bad = write_folder(root)
    for path in bad:
        path.unlink()


def one_error_line(capsys, command):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"keras-vit {command}: error:"), err
    return err


class Messages(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def folder_run(dataset, tmp_path_factory):
    """`keras-vit train` on the folder with the default --bad-images (skip)."""
    root, _, _ = dataset
    run_dir = tmp_path_factory.mktemp("bad_train") / "run"
    handler = Messages()
    logging.getLogger("keras_vit").addHandler(handler)
    try:
        status = main(["train", "--dataset", str(root), *TRAIN, "--run-dir", str(run_dir)])
    finally:
        logging.getLogger("keras_vit").removeHandler(handler)
    return status, run_dir, handler.messages


def test_train_skips_bad_files_by_default_and_logs_them(dataset, folder_run):
    _, good, bad = dataset
    status, run_dir, messages = folder_run
    assert status == 0 and (run_dir / "last.keras").is_file()
    # One line per split read: the training part and the validation part carved from it.
    skipped = [m for m in messages if "bad image file" in m]
    counts = [re.search(r"Skipped (\d+) bad image file\(s\) of (\d+)", m) for m in skipped]
    assert sum(int(c.group(1)) for c in counts) == len(bad), skipped
    assert sum(int(c.group(2)) for c in counts) == len(good) + len(bad), skipped
    assert all(any(str(path) in m for m in skipped) for path in bad)


def test_train_with_fail_stops_naming_the_file(dataset, tmp_path, capsys):
    root, _, bad = dataset
    argv = ["train", "--dataset", str(root), *TRAIN, "--bad-images", "fail"]
    assert main([*argv, "--run-dir", str(tmp_path / "r")]) == 2
    err = one_error_line(capsys, "train")
    assert any(f"Bad image {path}:" in err for path in bad), err
    assert not (tmp_path / "r" / "last.keras").exists()


def test_evaluate_skips_by_default_as_train_and_predict_and_fails_on_request(
    dataset, folder_run, capsys, caplog
):
    root, _, bad = dataset
    _, model_run, _ = folder_run
    argv = ["evaluate", str(model_run), "--dataset", str(root), "--split", "train"]
    with caplog.at_level(logging.WARNING, logger="keras_vit"):
        assert main(argv) == 0
    assert "accuracy" in capsys.readouterr().out
    skipped = [r.getMessage() for r in caplog.records if "bad image file" in r.getMessage()]
    assert skipped and all(any(str(path) in m for m in skipped) for path in bad), skipped
    assert main([*argv, "--bad-images", "fail"]) == 2
    assert "Bad image" in one_error_line(capsys, "evaluate")


def test_predict_over_a_folder_with_an_unreadable_file_predicts_the_others(
    dataset, tmp_path_factory, tmp_path, capsys, caplog
):
    root, good, bad = dataset
    run_dir = pretrained_run(tmp_path_factory)
    folder = tmp_path / "mixed"
    folder.mkdir()
    keep = sorted(good)[:2]
    for path in keep:
        (folder / path.name).write_bytes(path.read_bytes())
    os.symlink(tmp_path / "gone.png", folder / "unreadable.png")  # open() fails: ENOENT
    (folder / "empty.png").write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="keras_vit"):
        assert main(["predict", str(run_dir), str(folder)]) == 0
    captured = capsys.readouterr()
    for path in keep:
        assert f"{folder / path.name}: " in captured.out
    assert "Predicted 2 images" in captured.out and "skipped 2 bad file(s)" in captured.out
    (report,) = [r.getMessage() for r in caplog.records if "bad image file" in r.getMessage()]
    assert report.startswith("Skipped 2 bad image file(s) of 4: "), report  # as train's
    assert f"{folder / 'unreadable.png'} (cannot be read" in report
    assert f"{folder / 'empty.png'} (empty file" in report
    assert main(["predict", str(run_dir), str(folder), "--bad-images", "fail"]) == 2
    assert "Bad image" in one_error_line(capsys, "predict")
