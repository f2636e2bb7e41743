"""SigLIP 2 towers through the command line: `keras-vit convert` from a Hugging Face
`Siglip2VisionModel` folder (written by the test in transformers' key layout) to `.keras` and
timm and back, and `keras-vit finetune --weights` of it at a new image size on the embedded
digits; outputs compared with the NumPy forward pass (`family_state.forward`)."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import scipy.ndimage

from keras_vit.cli.main import main
from keras_vit.train import runs
from tests.checkpoints.family_state import TINY, forward, random_params
from tests.checkpoints.hf.test_hf_siglip import SIGLIP2, _config, _folder, _hf_state, _images


def _siglip2_folder(tmp_path):
    params = random_params(np.random.default_rng(8), attn_pool=True, head=False)
    return params, _folder(tmp_path / "siglip2", _hf_state(params, SIGLIP2), _config(SIGLIP2))


def test_convert_a_siglip2_folder_to_keras_and_timm_and_back(tmp_path):
    params, folder = _siglip2_folder(tmp_path)
    x = _images(9)
    want = forward(params, x, heads=TINY["heads"], activation="gelu_tanh")
    keras_file, timm_file = tmp_path / "s2.keras", tmp_path / "s2.safetensors"
    assert main(["convert", str(folder), str(keras_file)]) == 0
    assert main(["convert", str(keras_file), str(timm_file)]) == 0
    assert main(["convert", str(timm_file), str(tmp_path / "hf"), "--to", "hf"]) == 0
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["SiglipVisionModel"]
    assert config["hidden_act"] == "gelu_pytorch_tanh"
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "back.keras")]) == 0
    # NaFlex's table resize travels with the .keras file; a SiglipVisionModel has none
    for path, resize in ((keras_file, "bilinear_antialias"), (tmp_path / "back.keras", "bilinear")):
        model = keras.models.load_model(path)
        np.testing.assert_allclose(np.asarray(model(x), np.float64), want, atol=1e-5, rtol=0)
        assert model.get_layer("posembed_input").resize_method == resize


@pytest.mark.slow  # ~32 s on 2 cores
def test_finetune_a_siglip2_folder_at_a_new_image_size(tmp_path):
    """The transfer step on a SigLIP 2 tower: zero head after the MAP head, the 4x4 table
    resized to 6x6 (28 -> 42 px, patch 7) as NaFlex resizes it (enlarging, PyTorch's
    antialiased bilinear is the half-pixel linear resize with the border clamped:
    scipy.ndimage.zoom with grid_mode=True), the body carried over."""
    params, folder = _siglip2_folder(tmp_path)
    run_dir = tmp_path / "run"
    argv = [
        "finetune",
        "--weights", str(folder),
        "--dataset", "digits",
        "--image-size", "42",
        "--shots-per-class", "5",
        "--batch-size", "25",
        "--steps", "2",
        "--learning-rate", "1e-9",  # weights stay where the transfer step put them
        "--no-jit-compile",
        "--run-dir", str(run_dir),
    ]  # fmt: skip
    assert main(argv) == 0
    model = runs.load_model(run_dir / "last.keras")
    weights = {w.path: np.asarray(w) for w in model.weights}
    np.testing.assert_allclose(weights["head/kernel"], 0.0, atol=1e-6)
    assert model.get_layer("encoderblock_0").gelu_approximate is True
    assert model.get_layer("posembed_input").resize_method == "bilinear_antialias"
    np.testing.assert_allclose(weights["MAPHead_0/probe"], params["pool.latent"], atol=1e-6, rtol=0)
    table = params["pos"].reshape(4, 4, -1)
    expected = scipy.ndimage.zoom(table, (1.5, 1.5, 1), order=1, grid_mode=True, mode="nearest")
    expected = expected.reshape(1, 36, -1)
    np.testing.assert_allclose(weights["posembed_input/pos_embedding"], expected, atol=1e-5, rtol=0)
