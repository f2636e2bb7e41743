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
    sys.path.insert(0, os.path.abspath(STUDIES))
    try:
        yield importlib.import_module("memory")
    finally:
        sys.path.remove(os.path.abspath(STUDIES))


@pytest.mark.parametrize(
    "argv, message",
    [(["--image-size", "518"], "--image-size 518 is not a positive multiple of the patch 16"),
     (["--image-size", "224", "0"], "--image-size 0"),
     (["--variant", "X/3"], "--variant 'X/3'"),
     (["--variant", "S/14", "--image-size", "384"], "--image-size 384 is not a positive multiple"),
     (["--variant", "S/14", "--image-size", "384"], "of the patch 14"),
     (["--variant", "B/16-384", "--image-size", "224"], "names image size 384, --image-size 224")],
)  # fmt: skip
def test_bad_sizes_and_models_are_refused_naming_them(memory, argv, message, capsys):
    with pytest.raises(SystemExit) as raised:
        memory.parse_args(argv)
    assert raised.value.code == 2
    assert message in capsys.readouterr().err


def test_the_papers_sizes_parse(memory):
    args = memory.parse_args(["--image-size", "224", "384", "512", "--default-scheduler"])
    assert args.image_size == [224, 384, 512] and args.default_scheduler
    assert memory.parse_args(["--variant", "S/14", "--image-size", "518"]).image_size == [518]
