"""Hugging Face ViT folders against keras-hub's own Hugging Face ViT converter.

The state dicts are random tensors in transformers' layout written with numpy + safetensors
(tests/checkpoints/torch_state.py); keras-hub reads them with its `convert_vit.py`, keras_vit
with `hf_io`, and the two models' outputs are compared.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints import CheckpointError, model_contents, read_checkpoint, write_checkpoint
from tests.checkpoints.torch_state import TINY, hf_config, hf_state, write_hf

keras_hub = pytest.importorskip("keras_hub")


def _images(seed=1, size=32):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


def _not_constant(values):
    assert np.abs(values).max() > 1e-2
    assert np.std(values) > 1e-3


@pytest.fixture
def hf_folder(tmp_path):
    state = hf_state(np.random.default_rng(0))
    return write_hf(tmp_path / "hf", state, hf_config())


def test_logits_and_features_match_keras_hub(hf_folder):
    reference = keras_hub.models.ImageClassifier.from_preset(str(hf_folder))
    x = _images()
    ref_logits = np.asarray(reference(x))
    ref_sequence = np.asarray(reference.backbone(x))
    model = keras_vit.from_checkpoint(hf_folder)
    logits = model.predict(x, verbose=0)
    _not_constant(logits)
    assert logits.shape == (2, TINY["classes"])
    np.testing.assert_allclose(logits, ref_logits, atol=1e-5, rtol=0)
    features = keras_vit.from_checkpoint(
        hf_folder, include_top=False, return_sequence=True
    ).predict(x, verbose=0)
    np.testing.assert_allclose(features, ref_sequence, atol=1e-5, rtol=0)


def test_numerics_and_architecture_come_from_config(tmp_path):
    state = hf_state(np.random.default_rng(0))
    folder = write_hf(
        tmp_path / "hf", state, hf_config(hidden_act="gelu_new", layer_norm_eps=1e-12)
    )
    contents = read_checkpoint(folder)
    assert contents.format == "hf"
    assert contents.gelu_approximate is True
    assert contents.layer_norm_epsilon == 1e-12
    model = keras_vit.from_checkpoint(folder)
    block = model.get_layer("encoderblock_0")
    assert block.gelu_approximate is True and block.layer_norm_epsilon == 1e-12
    assert block.num_heads == TINY["heads"]


def test_without_prefix_and_with_pooler(tmp_path):
    rng = np.random.default_rng(0)
    prefixed = hf_state(rng, prefix="vit.", classifier=False)
    pooler = {"pooler.dense.weight": rng.standard_normal((32, 32)).astype("float32")}
    pooler["pooler.dense.bias"] = rng.standard_normal(32).astype("float32")
    plain = {k.removeprefix("vit."): v for k, v in prefixed.items()} | pooler
    config = hf_config(classifier=False)
    a = write_hf(tmp_path / "prefixed", prefixed, config)
    b = write_hf(tmp_path / "plain", plain, config)
    reference = keras_hub.models.ViTBackbone.from_preset(str(a))
    x = _images()
    cls = np.asarray(reference(x))[:, 0]
    expected = np.tanh(cls @ pooler["pooler.dense.weight"].T + pooler["pooler.dense.bias"])
    model = keras_vit.from_checkpoint(b)
    assert model.get_layer("pre_logits").units == 32
    got = model.predict(x, verbose=0)
    _not_constant(got)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_written_folder_is_read_by_keras_hub(tmp_path, tiny_vit_kwargs):
    model = keras_vit.ViT(**tiny_vit_kwargs, gelu_approximate=False)
    rng = np.random.default_rng(3)
    for variable in model.weights:
        variable.assign(rng.standard_normal(variable.shape).astype("float32") * 0.2)
    write_checkpoint(model_contents(model), tmp_path / "out", "hf")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["hidden_act"] == "gelu" and config["architectures"] == [
        "ViTForImageClassification"
    ]
    reference = keras_hub.models.ImageClassifier.from_preset(str(tmp_path / "out"))
    x = _images()
    ours = model.predict(x, verbose=0)
    _not_constant(ours)
    np.testing.assert_allclose(np.asarray(reference(x)), ours, atol=1e-5, rtol=0)


def test_gap_model_cannot_be_written_as_hf(tmp_path, tiny_vit_kwargs):
    model = keras_vit.ViT(**tiny_vit_kwargs, pooling="gap")
    with pytest.raises(CheckpointError, match="class token"):
        write_checkpoint(model_contents(model), tmp_path / "out", "hf")
    assert not (tmp_path / "out").exists()


def test_foreign_tensors_are_named(tmp_path):
    state = hf_state(np.random.default_rng(0))
    state["decoder.0.weight"] = np.zeros((2, 2), np.float32)
    folder = write_hf(tmp_path / "hf", state, hf_config())
    with pytest.raises(CheckpointError, match="decoder.0.weight"):
        read_checkpoint(folder)


def test_weights_argument_takes_a_hf_folder(hf_folder, tiny_vit_kwargs):
    reference = keras_hub.models.ImageClassifier.from_preset(str(hf_folder))
    model = keras_vit.ViT(**tiny_vit_kwargs, gelu_approximate=False, weights=hf_folder)
    x = _images()
    np.testing.assert_allclose(model.predict(x, verbose=0), np.asarray(reference(x)), atol=1e-5)
