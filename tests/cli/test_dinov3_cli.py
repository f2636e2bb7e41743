"""DINOv3 towers through the command line: a timm file and a Hugging Face `DINOv3ViTModel`
folder (written by the tests in the libraries' key layouts, tests/checkpoints/timm/
test_timm_dinov3.py) detected as a folder and as a bare `model.safetensors`, converted with
`keras-vit convert` both ways (outputs against the NumPy forward pass with RoPE), and
`keras-vit finetune --weights FILE --image-size N` on the embedded digits."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from keras_vit.checkpoints import read_checkpoint
from keras_vit.cli.main import main
from keras_vit.train import runs
from tests.checkpoints.timm.test_timm_dinov3 import _hf_folder, _images, _params, _timm_file, _want


def test_a_dinov3_folder_and_its_bare_weights_file_are_read_as_hugging_face(tmp_path):
    folder = _hf_folder(tmp_path / "hf", _params(qkv_bias="qv", head=False))
    for path in (folder, folder / "model.safetensors"):
        contents = read_checkpoint(path)
        assert (contents.format, contents.position_embedding) == ("hf", "rope")


def test_convert_a_timm_dinov3_to_keras_hf_and_back_to_timm(tmp_path):
    p = _params(qkv_bias="qv", head=False)
    x = _images()
    want = _want(p, x)
    timm_file = _timm_file(tmp_path / "timm", p)
    keras_file, hf, back = tmp_path / "d.keras", tmp_path / "hf", tmp_path / "back.safetensors"
    assert main(["convert", str(timm_file), str(keras_file)]) == 0
    assert main(["convert", str(keras_file), str(hf), "--to", "hf"]) == 0
    assert json.loads((hf / "config.json").read_text())["model_type"] == "dinov3_vit"
    assert main(["convert", str(hf / "model.safetensors"), str(back), "--to", "timm"]) == 0
    assert main(["convert", str(back), str(tmp_path / "back.keras")]) == 0
    for path in (keras_file, tmp_path / "back.keras"):
        model = keras.models.load_model(path)
        np.testing.assert_allclose(np.asarray(model(x), np.float64), want, atol=2e-5, rtol=0)


@pytest.mark.large  # ~25-35 s each on 2 cores: the large lane (.ci/run_large)
@pytest.mark.parametrize("source", ["timm", "hf"])
def test_finetune_a_dinov3_file_at_a_new_image_size(tmp_path, source):
    """The transfer step on a DINOv3: zero head, the body carried over, RoPE at the new
    grid with nothing to resize."""
    p = _params(qkv_bias="qv", head=False)
    if source == "timm":
        weights = _timm_file(tmp_path / "timm", p)
    else:
        weights = _hf_folder(tmp_path / "hf", p)
    run_dir = tmp_path / "run"
    argv = [
        "finetune",
        "--weights", str(weights),
        "--dataset", "digits",
        "--image-size", "16",
        "--shots-per-class", "5",
        "--batch-size", "25",
        "--steps", "1",
        "--learning-rate", "1e-9",  # weights stay where the transfer step put them
        "--no-jit-compile",
        "--run-dir", str(run_dir),
    ]  # fmt: skip
    assert main(argv) == 0
    model = runs.load_model(run_dir / "last.keras")
    weights = {w.path: np.asarray(w) for w in model.weights}
    np.testing.assert_allclose(weights["head/kernel"], 0.0, atol=1e-6)
    np.testing.assert_allclose(weights["reg/reg"], p["reg"], atol=1e-6, rtol=0)
    assert model.get_layer("encoderblock_0").rope is not None
