"""Argument errors that need no TensorFlow come before it is imported, argparse's own
errors included (one line pointing at --help), and a misspelt model name gets the closest
one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_vit.spec import configs

ROOT = Path(__file__).resolve().parents[2]
# a valid 1x1 gray PNG (signature, IHDR, IDAT, IEND), written by hand
PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010800000000"
    "3a7e9b550000000a4944415478da636000000002000155b0dfe80000000049454e44ae426082"
)

# Each case: argv, and a piece of the one error line. {tmp} is a folder of the test; {run} a
# non-empty folder in it (an existing run directory), {note} a text file.
CASES = [
    (["train", "--model", "B16x"], "did you mean 'B/16'?"),
    (["train", "--model", "B/16", "--stem", "patch"], "drop --stem"),
    (["train", "--model", "B/16-384", "--image-size", "224"], "names image size 384"),
    (["train", "--resume"], "--resume needs the --run-dir"),
    (["train", "--run-dir", "{run}"], "already exists and is not empty"),
    (["train", "--run-dir", "{note}"], "exists and is not a folder"),
    (["finetune"], "--weights is required"),
    (["finetune", "--weights", "x.npz", "--run-dir", "{run}"], "already exists"),
    (["finetune", "--weights", "{tmp}/none.npz"], "Weights file not found: {tmp}/none.npz"),
    (["evaluate", "{tmp}/none"], "RUN_OR_MODEL not found"),
    (["fewshot", "{tmp}/none"], "RUN_OR_MODEL not found"),
    (["transfer-suite", "{tmp}/none.keras"], "RUN_OR_MODEL not found"),
    (["predict", "{tmp}/none", "{note}"], "RUN_OR_MODEL not found"),
    (["predict", "{run}", "{tmp}/none.png"], "Image file or folder not found"),
    (["export", "{tmp}/none", "{tmp}/out"], "SOURCE not found"),
    (["explain", "{run}", "{tmp}/none.png", "--out", "{tmp}/x.png"], "image file not found"),
    (["convert", "{tmp}/none.npz", "{tmp}/x.keras"], "SRC not found"),
    (["convert", "{note}", "{tmp}/x.npz", "--model", "B16x"], "did you mean 'B/16'?"),
    (["benchmark", "--model", "B16x"], "did you mean 'B/16'?"),
    (["predict", "{run}", "{note}"], "Cannot read {note} as an image: not image data"),
    (["predict", "{run}", "{note}", "{png}", "--bad-images", "fail"], "Bad image {note}"),
    (["train", "--batch-size", "100000"], "larger than the 3600 training images of 'mnist'"),
    (["train", "--batch-size", "3601"], "larger than the 3600 training images"),
    (["finetune", "--weights", "x.npz", "--batch-size", "5000"], "training images of 'digits'"),
    (
        ["train", "--model", "B16", "--image-size", "30"],
        "16 of --model B16; the nearest sizes that work: 16 or 32",
    ),
    (["train", "--model", "B16"], "the image size 28 (the train recipe's default"),
    (["train", "--stem", "patch", "--image-size", "30", "20"], "height 28 or 32, width 20"),
    (["train", "--dataset", "{one}"], "has 1 class ('cat'); training a classifier needs"),
    (["finetune", "--weights", "x.npz", "--dataset", "{one}"], "needs at least two classes"),
    (
        ["train", "--epochs", "abc"],
        "expected a positive integer, got 'abc' (see keras-vit train --help)",
    ),
    (["predict"], "are required: RUN_OR_MODEL, IMAGES_OR_FOLDER (see keras-vit predict --help)"),
]

PROBE = """
import contextlib, io, json, sys
from keras_vit.cli.main import main
results = []
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            code = main(argv)
        except SystemExit as stop:  # argparse's own errors
            code = stop.code
    results.append([code, err.getvalue(), "tensorflow" in sys.modules, "keras" in sys.modules])
print(json.dumps(results))
"""


def test_argument_errors_come_before_tensorflow_is_imported(tmp_path):
    """Every case ends with exit code 2 and one line naming the problem, in a process that
    never imported TensorFlow or Keras (asserted after each error, not timed)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "best.keras").write_text("not a model")
    note = tmp_path / "note.txt"
    note.write_text("hello")
    one = tmp_path / "one" / "cat"
    one.mkdir(parents=True)
    png = one / "a.png"
    png.write_bytes(PNG_1X1)
    names = {"tmp": str(tmp_path), "run": str(run), "note": str(note), "one": str(one.parent)}
    names["png"] = str(png)
    argvs = [[word.format(**names) for word in argv] for argv, _ in CASES]
    env = dict(os.environ, PYTHONPATH=str(ROOT), KERAS_VIT_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argvs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
        cwd=tmp_path,
    )
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for (argv, expected), (code, err, tensorflow, keras) in zip(CASES, results, strict=True):
        assert code == 2, (argv, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and expected.format(**names) in lines[0], (argv, err)
        assert lines[0].startswith(f"keras-vit {argv[0]}: error: "), (argv, err)
        assert not tensorflow and not keras, (argv, "imported TensorFlow/Keras before the error")
    assert not os.path.exists(tmp_path / "out") and not os.path.exists(tmp_path / "x.keras")


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(configs.valid_names(recipes=True)),
    extra=st.sampled_from("xqz0_"),
    at_end=st.booleans(),
)
def test_a_misspelt_model_name_suggests_the_intended_one(name, extra, at_end):
    """One stray character before or after any table name (in its own spelling or the
    builder's) gets that name back as the suggestion, in the error itself."""
    for spelling in {name, name.replace("/", "")}:
        typo = spelling + extra if at_end else extra + spelling
        if typo.lower() == name.lower():
            continue
        try:
            configs.resolve_model(typo, recipes=True)
        except ValueError as error:
            assert f"(did you mean {name!r}?)" in str(error), (typo, str(error))
        else:  # a spelling resolve_model accepts as is (e.g. "_B/16"): must be the same row
            assert configs.resolve_model(typo, recipes=True).name == name


def test_no_suggestion_for_a_name_like_none_of_them():
    assert configs.suggest_model("resnet") is None
    with pytest.raises(ValueError, match="Unknown model 'zebra'; expected"):
        configs.resolve_model("zebra")
