"""`keras-vit export SOURCE DIR --format F [--quantize Q]`: a checkpoint exported to ONNX and
checked against the NumPy-scaled Keras model in onnxruntime; flag refusals before any work."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints import save_npz
from keras_vit.cli.main import main
from tests.checkpoints.random_models import TINY_SIZES, randomise


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="no export extra")
def test_a_checkpoint_exports_to_onnx(tmp_path, capsys):
    import onnxruntime

    model = randomise(keras_vit.ViT(patch_size=8, image_size=32, num_classes=5, **TINY_SIZES))
    save_npz(model, tmp_path / "m.npz")
    assert main(["export", str(tmp_path / "m.npz"), str(tmp_path / "out"), "--format", "onnx"]) == 0
    assert "within" in capsys.readouterr().out
    session = onnxruntime.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    pixels = np.random.default_rng(0).uniform(0, 255, (5, 32, 32, 3)).astype("float32")
    got = session.run(None, {session.get_inputs()[0].name: pixels})[0]
    expected = np.asarray(model(pixels / 127.5 - 1.0))
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--format", "litert", "--quantize", "int8"], "does not take"),
        (["--format", "onnx", "--quantize", "float8"], "does not take"),
        (["--format", "openvino", "--quantize", "int4"], "weight compression"),
        (["--format", "tflite"], "invalid choice"),
    ],
)
def test_refusals_are_usage_errors(tmp_path, capsys, extra, message):
    (tmp_path / "m.keras").write_bytes(b"")
    try:
        code = main(["export", str(tmp_path / "m.keras"), str(tmp_path / "out"), *extra])
    except SystemExit as exit:
        code = exit.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("format, extra", [("openvino", "export"), ("torch", "torch")])
def test_a_missing_runtime_is_refused_naming_the_extra(
    tmp_path, capsys, monkeypatch, format, extra
):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == format else real(name)
    )
    (tmp_path / "m.keras").write_bytes(b"")
    assert main(["export", str(tmp_path / "m.keras"), str(tmp_path / "o"), "--format", format]) == 2
    error = capsys.readouterr().err
    assert f"keras_vit[{extra}]" in error and len(error.strip().splitlines()) == 1, error
    assert not (tmp_path / "o").exists()
