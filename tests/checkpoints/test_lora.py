"""LoRA adapters (Keras' `enable_lora`) reach every file keras_vit writes, merged.

A tiny ViT and a tiny hybrid get rank-4 adapters on their 12 projections and random values in
every variable (adapters included: B starts at zero in Keras); each writer's file, read back
into a plain model, must give the adapted model's own logits (Keras' `predict`, the
independent reference), which differ from the base kernels' logits.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints import load_weights, model_contents, save_npz, write_checkpoint
from keras_vit.checkpoints.base.lora import merged_kernel
from keras_vit.cli.main import main
from keras_vit.model.lora import lora_projections
from tests.checkpoints.random_models import TINY_SIZES, images_for, randomise

RANK = 4
HYBRID = dict(resnet_stages=(1,), resnet_width=32, patch_size=2, image_size=32, num_classes=5)


def _adapted(model):
    for layer in lora_projections(model):
        layer.enable_lora(RANK, lora_alpha=8)
    return randomise(model, seed=3)


@pytest.fixture(scope="module")
def vit():
    model = keras_vit.ViT(patch_size=8, image_size=(32, 24), num_classes=5, **TINY_SIZES)
    return _adapted(model)


@pytest.fixture(scope="module")
def hybrid():
    return _adapted(keras_vit.HybridViT(**HYBRID, **TINY_SIZES))


def _reference(model):
    """(images, the adapted model's predict, the same model's logits with zero adapters)."""
    x = images_for(model, batch=3)
    adapted = model.predict(x, verbose=0)
    saved = [(v, keras.ops.convert_to_numpy(v)) for v in model.weights if "lora_kernel_b" in v.path]
    for variable, _ in saved:
        variable.assign(np.zeros(variable.shape, "float32"))
    base = model.predict(x, verbose=0)
    for variable, value in saved:
        variable.assign(value)
    assert np.abs(adapted - base).max() > 1e-2, "the adapters change nothing: not randomised?"
    return x, adapted


def _reloaded(path, x, **kwargs):
    back = keras_vit.from_checkpoint(path, **kwargs)
    assert not any(getattr(layer, "lora_enabled", False) for layer in lora_projections(back))
    return back.predict(x, verbose=0)


def test_the_model_projections_are_the_twelve_of_two_blocks(vit):
    paths = [layer.path for layer in lora_projections(vit)]
    assert len(paths) == 12
    assert all(path.startswith(("encoderblock_0/", "encoderblock_1/")) for path in paths)


@pytest.mark.parametrize("kind", ["npz", "timm", "hf"])
def test_every_format_reloads_to_the_adapted_logits(vit, tmp_path, kind):
    x, expected = _reference(vit)
    path = os.fspath(tmp_path / {"npz": "m.npz", "hf": "hf", "timm": "m.safetensors"}[kind])
    write_checkpoint(model_contents(vit), path, kind)
    extra = {"image_size": (32, 24)} if kind == "npz" else {}
    np.testing.assert_allclose(_reloaded(path, x, **extra), expected, atol=1e-4, rtol=0)


def test_save_npz_and_loading_into_a_plain_model(vit, tmp_path):
    x, expected = _reference(vit)
    report = save_npz(vit, tmp_path / "m.npz")
    assert not [key for key in report.shapes if "lora" in key]
    plain = randomise(keras_vit.ViT(patch_size=8, image_size=(32, 24), num_classes=5, **TINY_SIZES))
    load_weights(plain, tmp_path / "m.npz")
    np.testing.assert_allclose(plain.predict(x, verbose=0), expected, atol=1e-4, rtol=0)


def test_a_hybrid_writes_its_adapted_kernels(hybrid, tmp_path):
    x, expected = _reference(hybrid)
    save_npz(hybrid, tmp_path / "h.npz")
    np.testing.assert_allclose(_reloaded(tmp_path / "h.npz", x), expected, atol=1e-4, rtol=0)


def test_convert_of_a_keras_file_carries_the_adaptation(vit, tmp_path):
    x, expected = _reference(vit)
    vit.save(tmp_path / "m.keras")
    assert main(["convert", str(tmp_path / "m.keras"), str(tmp_path / "m.safetensors")]) == 0
    np.testing.assert_allclose(_reloaded(tmp_path / "m.safetensors", x), expected, atol=1e-4)


def test_merged_kernel_of_an_attention_out_projection():
    rng = np.random.default_rng(0)
    kernel, a, b = rng.normal(size=(4, 8, 32)), rng.normal(size=(4, 8, 2)), rng.normal(size=(2, 32))
    expected = kernel + 0.5 * np.einsum("nhr,rd->nhd", a, b)
    np.testing.assert_allclose(merged_kernel(kernel, a, b, 0.5), expected, rtol=1e-6)


def test_loading_into_an_adapted_model_is_refused_naming_lora(vit, tmp_path):
    save_npz(vit, tmp_path / "m.npz")
    before = [keras.ops.convert_to_numpy(v) for v in vit.weights]
    with pytest.raises(ValueError, match="LoRA adapters"):
        load_weights(vit, tmp_path / "m.npz")
    for variable, value in zip(vit.weights, before, strict=True):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(variable), value)
