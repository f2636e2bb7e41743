"""benchmarks/studies/memory.py's arguments: image sizes that the model's patch does not
divide, and unknown variants, are refused before any point (each a JAX process) starts."""

from __future__ import annotations

import importlib
import os
import sys

import pytest

STUDIES = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "studies")


@pytest.fixture(scope="module")
def memory():
    return importlib.import_module("benchmarks.studies.memory")


@pytest.mark.parametrize(
    "argv, message",
    [(["--image-size", "518"], "--image-size 518 is not a positive multiple of the patch 16"),
     (["--image-size", "224", "0"], "--image-size 0"),
     (["--model", "X/3"], "--model 'X/3'"),
     (["--model", "S/14", "--image-size", "384"], "--image-size 384 is not a positive multiple"),
     (["--model", "S/14", "--image-size", "384"], "of the patch 14"),
     (["--model", "B/16-384", "--image-size", "224"], "names image size 384, --image-size 224")],
)  # fmt: skip
def test_bad_sizes_and_models_are_refused_naming_them(memory, argv, message, capsys):
    with pytest.raises(SystemExit) as raised:
        memory.parse_args(argv)
    assert raised.value.code == 2
    assert message in capsys.readouterr().err


def test_the_papers_sizes_parse(memory):
    args = memory.parse_args(["--image-size", "224", "384", "512", "--default-scheduler"])
    assert args.image_size == [224, 384, 512] and args.default_scheduler
    assert memory.parse_args(["--model", "S/14", "--image-size", "518"]).image_size == [518]


@pytest.mark.large
@pytest.mark.parametrize("variant, size, tokens", [("8,32,64,4,2", 16, 5), ("R50+B/16", 32, 5)])
def test_a_point_counts_the_tokens_the_model_sees(variant, size, tokens):
    """A hybrid's patch (1) is on the ResNet's feature map (a sixteenth of the image a side):
    32 px give 2 x 2 patches and the class token, not 32 x 32 (~23 s for the hybrid)."""
    import json
    import subprocess

    root = os.path.abspath(os.path.join(STUDIES, "..", ".."))
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "PYTHONPATH": root}
    point = json.dumps([variant, size, 1, "fused", False, False])
    argv = [sys.executable, "-m", "benchmarks.studies.memory", "--point", point]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, cwd=root)
    line = next(x for x in done.stdout.splitlines() if x.startswith("POINT "))
    assert json.loads(line[6:])["tokens"] == tokens
