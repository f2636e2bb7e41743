"""`keras-vit export`: a run directory or .keras file -> EXPORT_DIR/<version>/ for TF Serving.

One export of a saved tiny ViT run is shared by the module; the written SavedModel is read
back with `tf.saved_model.load` and compared with `model.predict` on images preprocessed by
the NumPy reference of tests/test_export.py.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit.cli.export import read_class_names_file
from keras_vit.cli.main import main
from keras_vit.cli.model_files import class_names_from_run, resolve_model_path
from tests.conftest import TINY_VIT
from tests.output_checks import randomize_weights
from tests.test_export import preprocess_reference, tree_listing

CLASS_NAMES = [f"digit {i}" for i in range(TINY_VIT["num_classes"])]


@pytest.fixture(scope="module")
def run_export(tmp_path_factory):
    """A run directory (best.keras + config.json with class names) exported by the CLI."""
    run_dir = tmp_path_factory.mktemp("run")
    model = randomize_weights(keras_vit.ViT(**TINY_VIT), seed=3)
    model.save(run_dir / "best.keras")
    (run_dir / "config.json").write_text(json.dumps({"class_names": CLASS_NAMES, "epochs": 1}))
    export_dir = run_dir.parent / "serving"
    code = main(["export", str(run_dir), str(export_dir), "--top-k", "2"])
    return {"code": code, "model": model, "run_dir": run_dir, "export_dir": export_dir}


def test_run_directory_exports_version_1_with_class_names(run_export):
    assert run_export["code"] == 0
    assert sorted(os.listdir(run_export["export_dir"])) == ["1"]
    loaded = tf.saved_model.load(str(run_export["export_dir"] / "1"))
    images = np.random.default_rng(0).integers(0, 256, (2, 40, 24, 3)).astype(np.float32)
    out = loaded.signatures["serving_default"](images=tf.constant(images))
    expected = run_export["model"].predict(preprocess_reference(images, (32, 32)), verbose=0)
    np.testing.assert_allclose(out["logits"].numpy(), expected, atol=1e-4)
    best = np.argsort(-expected, axis=1)[:, :2]
    classes = [[c.decode() for c in row] for row in out["top_k_classes"].numpy().tolist()]
    assert classes == [[CLASS_NAMES[i] for i in row] for row in best]


def test_existing_version_is_a_usage_error_and_left_untouched(run_export, capsys):
    before = tree_listing(run_export["export_dir"])
    model_file = str(run_export["run_dir"] / "best.keras")
    code = main(["export", model_file, str(run_export["export_dir"]), "--version", "1"])
    assert code == 2
    assert "version 1 already exists" in capsys.readouterr().err
    assert tree_listing(run_export["export_dir"]) == before


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--version", "0"], "--version must be a positive integer"),
        (["--top-k", "0"], "--top-k must be a positive integer"),
        (["--class-names", "missing.txt"], "--class-names file not found"),
    ],
)
def test_bad_options_are_usage_errors(run_export, capsys, extra, message):
    model_file = str(run_export["run_dir"] / "best.keras")
    code = main(["export", model_file, str(run_export["export_dir"]), *extra])
    assert code == 2
    assert message in capsys.readouterr().err


def test_source_must_be_a_keras_file_a_run_directory_or_a_checkpoint(tmp_path, capsys):
    (tmp_path / "weights.h5").write_text("x")
    expected = {
        tmp_path / "nope.keras": "not found",
        tmp_path / "weights.h5": "Cannot build a model from",
        tmp_path: "Cannot build a model from",
    }
    for path, message in expected.items():
        assert main(["export", str(path), str(tmp_path / "serving")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "serving").exists()


def test_resolve_model_path(tmp_path):
    (tmp_path / "model.keras").write_text("x")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "best.keras").write_text("x")
    assert resolve_model_path(str(tmp_path / "model.keras")) == (
        str(tmp_path / "model.keras"),
        None,
    )
    # best.keras without config.json: a model outside a run
    assert resolve_model_path(str(tmp_path / "run")) == (str(tmp_path / "run" / "best.keras"), None)
    (tmp_path / "run" / "config.json").write_text("{}")
    assert resolve_model_path(str(tmp_path / "run")) == (
        str(tmp_path / "run" / "best.keras"),
        str(tmp_path / "run"),
    )


def test_class_names_files_and_run_config(tmp_path):
    (tmp_path / "names.txt").write_text("cat\n\ndog \nbird\n")
    (tmp_path / "names.json").write_text(json.dumps(["cat", "dog"]))
    assert read_class_names_file(str(tmp_path / "names.txt")) == ["cat", "dog", "bird"]
    assert read_class_names_file(str(tmp_path / "names.json")) == ["cat", "dog"]
    assert class_names_from_run(str(tmp_path)) is None  # no config.json
    (tmp_path / "config.json").write_text(json.dumps({"data": {"class_names": ["a", "b"]}}))
    assert class_names_from_run(str(tmp_path)) == ["a", "b"]


def served_logits(export_dir, images):
    loaded = tf.saved_model.load(str(export_dir / "1"))
    return loaded.signatures["serving_default"](images=tf.constant(images))["logits"].numpy()


def test_bfloat16_export_serves_logits_close_to_the_float32_export(run_export, capsys):
    """--mixed-precision mixed_bfloat16: the SavedModel computes in bfloat16 (its logits
    differ from the float32 export's) within 5% of the largest float32 logit, same top-1."""
    export_dir = run_export["run_dir"].parent / "serving_bf16"
    argv = ["export", str(run_export["run_dir"]), str(export_dir), "--mixed-precision"]
    assert main([*argv, "mixed_bfloat16"]) == 0
    out = capsys.readouterr().out
    assert "precision mixed_bfloat16, XLA off" in out
    assert "\nSignatures: serving_default (images), serving_bytes" in out  # without --quiet
    images = np.random.default_rng(5).uniform(0, 255, (16, 32, 32, 3)).astype("float32")
    reference = served_logits(run_export["export_dir"], images)
    logits = served_logits(export_dir, images)
    assert logits.dtype == np.float32 and np.abs(reference).max() > 0.5
    difference = np.abs(logits - reference).max()
    assert 0 < difference <= 0.05 * np.abs(reference).max()
    assert (logits.argmax(-1) == reference.argmax(-1)).mean() >= 0.9


def test_float32_export_with_xla_matches_the_model(run_export, capsys):
    export_dir = run_export["run_dir"].parent / "serving_xla"
    argv = ["export", str(run_export["run_dir"]), str(export_dir), "--quiet"]
    assert main([*argv, "--mixed-precision", "float32", "--jit-compile"]) == 0
    out = capsys.readouterr().out.splitlines()  # --quiet: the result line only
    assert len(out) == 1 and out[0].startswith("Exported "), out
    assert out[0].endswith(f"to {export_dir / '1'} (precision float32, XLA on)")
    images = np.random.default_rng(6).uniform(0, 255, (4, 32, 32, 3)).astype("float32")
    expected = run_export["model"].predict(preprocess_reference(images, (32, 32)), verbose=0)
    np.testing.assert_allclose(served_logits(export_dir, images), expected, atol=1e-4)


def test_the_command_exports_in_a_fresh_process(run_export, tmp_path):
    """The installed command, not `main()` in a process that already imported the layers:
    its `.keras` loads only if keras_vit's layers registered after TensorFlow's import
    (user report B01; the CLI imports TensorFlow before Keras)."""
    import subprocess
    import sys

    code = "import sys; from keras_vit.cli.main import main; sys.exit(main())"
    target = tmp_path / "serving"
    done = subprocess.run(
        [sys.executable, "-c", code, "export", str(run_export["run_dir"]), str(target)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (target / "1" / "saved_model.pb").is_file()


def _disk_full(*args, **kwargs):
    import errno

    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("parents", ["serving", "new/deeper/serving"])
def test_a_full_disk_leaves_no_export_dir_behind(
    run_export, tmp_path, monkeypatch, capsys, parents
):
    """A full disk while the SavedModel is written (the writer raises
    OSError(ENOSPC)) used to leave the empty EXPORT_DIR (and any parent it made) behind;
    the command fails naming the version folder and the cause, and the disk is as before."""
    monkeypatch.setattr(tf.saved_model, "save", _disk_full)  # ExportArchive.write_out's writer
    (tmp_path / "other").write_text("someone else's file")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    export_dir = tmp_path / parents
    code = main(["export", str(run_export["run_dir"] / "best.keras"), str(export_dir)])
    err = capsys.readouterr().err
    assert code != 0, err
    assert f"cannot write {export_dir / '1'}: No space left on device" in err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_full_disk_keeps_an_export_dir_that_was_there(run_export, tmp_path, monkeypatch):
    """An EXPORT_DIR that existed (empty) before the failed export is kept, as it was."""
    monkeypatch.setattr(tf.saved_model, "save", _disk_full)
    export_dir = tmp_path / "serving"
    export_dir.mkdir()
    code = main(["export", str(run_export["run_dir"] / "best.keras"), str(export_dir)])
    assert code != 0
    assert export_dir.is_dir() and os.listdir(export_dir) == []
