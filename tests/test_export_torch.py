"""`export_model(..., "torch")` and `keras-vit export --format torch`: the `.pt2` is written
by Keras' `model.export(format="torch")` in a KERAS_BACKEND=torch child process, loaded here
with `torch.export.load` and compared with the NumPy-scaled Keras model (this process'
TensorFlow backend) at batch 1 and 5, for a ViT (exact GELU, non-square) and a hybrid, and
with `--quantize int8 | int4 | float8` against the same model quantized here by Keras.
PyTorch lane: skipped unless torch is installed; run with `-m pytorch` (`.ci/run_pytorch`).
The quantized cases print `FIGURE <case> max|diff|=...` (and append it to the file
KERAS_VIT_FIGURES names).
The refusal without torch is in tests/test_export_formats.py and tests/cli/test_export_formats.py.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.cli.main import main
from tests.checkpoints.random_models import TINY_SIZES, randomise

pytestmark = pytest.mark.pytorch
torch = pytest.importorskip("torch")


def _vit():
    model = keras_vit.ViT(
        patch_size=8, image_size=(32, 24), num_classes=5, gelu_approximate=False, **TINY_SIZES
    )
    return randomise(model, seed=4)


def _hybrid():
    model = keras_vit.HybridViT(
        resnet_stages=(1,), resnet_width=32, patch_size=2, image_size=32, num_classes=5,
        **TINY_SIZES,
    )  # fmt: skip
    return randomise(model, seed=5)


def _torch_logits(path, pixels):
    program = torch.export.load(str(path)).module()
    with torch.no_grad():
        return program(torch.from_numpy(pixels)).numpy().astype(np.float64)


@pytest.mark.parametrize("build", [_vit, _hybrid], ids=["vit", "hybrid"])
def test_keras_vit_export_format_torch_equals_keras(tmp_path, capsys, build):
    model = build()
    model.save(tmp_path / "m.keras")
    assert (
        main(["export", str(tmp_path / "m.keras"), str(tmp_path / "out"), "--format", "torch"]) == 0
    )
    assert "model.pt2" in capsys.readouterr().out
    height, width, channels = model.input_shape[1:]
    for batch in (1, 5):
        pixels = np.random.default_rng(batch).uniform(0, 255, (batch, height, width, channels))
        pixels = pixels.astype(np.float32)
        expected = np.asarray(model(pixels / 127.5 - 1.0), np.float64)
        got = _torch_logits(tmp_path / "out" / "model.pt2", pixels)
        np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)
        assert np.abs(expected).max() > 1e-2


def _figure(text):
    line = f"FIGURE {text}"
    print(line)
    if os.environ.get("KERAS_VIT_FIGURES"):
        with open(os.environ["KERAS_VIT_FIGURES"], "a", encoding="utf-8") as stream:
            stream.write(line + "\n")


@pytest.mark.filterwarnings("ignore:Layer .* does not have a `quantize`")
@pytest.mark.parametrize("mode", ["int8", "int4", "float8"])
def test_keras_vit_export_format_torch_quantized_equals_the_quantized_keras_model(
    tmp_path, capsys, mode
):
    """The `.pt2` is quantized under the PyTorch backend and the reference here under
    TensorFlow: Keras quantizes activations per call, so a backend's rounding may move a few
    across a step; the bound is `QUANTIZED_TOLERANCE` of the logits' scale."""
    from keras_vit.export_formats import QUANTIZED_TOLERANCE

    model = _vit()
    model.save(tmp_path / "m.keras")
    argv = ["export", str(tmp_path / "m.keras"), str(tmp_path / "out"), "--format", "torch"]
    assert main([*argv, "--quantize", mode]) == 0
    assert f"torch, {mode}" in capsys.readouterr().out
    quantized = keras.models.clone_model(model)
    quantized.set_weights(model.get_weights())
    quantized.quantize(mode)
    pixels = np.random.default_rng(3).uniform(0, 255, (5, *model.input_shape[1:]))
    pixels = pixels.astype(np.float32)
    expected = np.asarray(quantized(pixels / 127.5 - 1.0), np.float64)
    got = _torch_logits(tmp_path / "out" / "model.pt2", pixels)
    bound = QUANTIZED_TOLERANCE * np.abs(expected).max()
    _figure(f"torch_{mode} max|diff|={np.abs(got - expected).max():.3g} (bound {bound:.3g})")
    np.testing.assert_allclose(got, expected, atol=bound, rtol=0)
    float_logits = np.asarray(model(pixels / 127.5 - 1.0), np.float64)
    assert np.abs(got - float_logits).max() > 1e-5  # the artifact is quantized
