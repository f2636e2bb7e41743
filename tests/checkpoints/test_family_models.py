"""The ViT family read into keras_vit models (no torch): files the tests write in timm's and
Hugging Face's layouts (tests/checkpoints/family_state.py) -> `from_checkpoint` -> forward
pass compared with the NumPy forward pass from the equations; then keras_vit writes the
model back and the file reads back to the same arrays (within 1e-6)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

import keras_vit
from keras_vit.checkpoints import model_contents, read_checkpoint, write_checkpoint
from tests.checkpoints.family_state import TINY, forward, hf_config, random_params, to_hf, to_timm
from tests.checkpoints.test_family_keys import timm_members

ATOL = 1e-4  # float32 keras vs float64 NumPy


def _images(seed=1, size=TINY["image_size"]):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


def _timm_file(folder, params, *, no_embed_class, architecture="vit_tiny_family"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.safetensors"
    save_file(to_timm(params), str(path))
    config = {
        "architecture": architecture,
        "model_args": {"num_heads": TINY["heads"], "no_embed_class": no_embed_class},
        "pretrained_cfg": {"input_size": [3, TINY["image_size"], TINY["image_size"]]},
    }
    (folder / "config.json").write_text(json.dumps(config))
    return path


def _write_back_reads_the_same(model, path, fmt):
    written = model_contents(model)
    write_checkpoint(written, path, fmt)
    back = read_checkpoint(path)
    assert sorted(back.arrays) == sorted(written.arrays)
    for key, value in written.arrays.items():
        np.testing.assert_allclose(back.arrays[key], value, atol=1e-6, rtol=0, err_msg=key)
    assert back.no_embed_class == written.no_embed_class
    assert back.mlp_activation == written.mlp_activation


def _output(model, x):
    out = np.asarray(model(x, training=False), np.float64)
    assert np.abs(out).max() > 1e-2, "the output is ~0: weights not randomised?"
    return out


@settings(max_examples=4, deadline=None)
@given(timm_members(), st.integers(0, 2**16))
def test_timm_family_file_matches_the_numpy_forward_and_writes_back(
    tmp_path_factory, options, seed
):
    folder = tmp_path_factory.mktemp("timm")
    params = random_params(np.random.default_rng(seed), **options)
    path = _timm_file(folder, params, no_embed_class=options["no_embed_class"])
    model = keras_vit.from_checkpoint(path)
    x = _images()
    want = forward(params, x, heads=TINY["heads"], no_embed_class=options["no_embed_class"])
    np.testing.assert_allclose(_output(model, x), want, atol=ATOL, rtol=0)
    _write_back_reads_the_same(model, folder / "back.safetensors", "timm")


def test_timm_clip_quick_gelu_tower_matches_the_numpy_forward(tmp_path):
    """A CLIP tower: norm_pre, no patch bias, QuickGELU and LayerNorm eps 1e-5, the last
    two known from the architecture's name only."""
    params = random_params(np.random.default_rng(3), norm_pre=True)
    path = _timm_file(
        tmp_path, params, no_embed_class=False, architecture="vit_base_patch16_clip_quickgelu_224"
    )
    model = keras_vit.from_checkpoint(path)
    x = _images()
    want = forward(params, x, heads=TINY["heads"], eps=1e-5, activation="quick_gelu")
    np.testing.assert_allclose(_output(model, x), want, atol=ATOL, rtol=0)
    gelu = forward(params, x, heads=TINY["heads"], eps=1e-5)
    assert np.abs(gelu - want).max() > 1e-2  # the activation matters to the comparison


HF_CASES = {
    "deit-with-teacher": ("deit", dict(dist=True, head=True), {}),
    "deit-model": ("deit", dict(dist=True, head=False), {}),
    # One classifier on the class token beside the distillation token: distillation_head=False.
    "deit-classification": (
        "deit",
        dict(dist=True, head=True, head_dist=False),
        {"architecture": "DeiTForImageClassification"},
    ),
    # DeiTModel with its pooler (24 wide, not the hidden 32): pre_logits of a feature model.
    "deit-model-pooler": ("deit", dict(dist=True, head=False, pooler=24), {"pooler": 24}),
    "dinov2": ("dinov2", dict(layer_scale=True, head=False), {}),
    "dinov2-quick_gelu": (
        "dinov2",
        dict(layer_scale=True, head=False),
        {"hidden_act": "quick_gelu"},
    ),
    "dinov2-registers": (
        "dinov2_with_registers",
        dict(layer_scale=True, registers=4, head=False),
        {},
    ),
}


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_hf_family_folder_matches_the_numpy_forward_and_writes_back(tmp_path, case):
    model_type, options, extra = HF_CASES[case]
    params = random_params(np.random.default_rng(4), **options)
    folder = tmp_path / "hf"
    folder.mkdir()
    save_file(
        to_hf(params, model_type), str(folder / "model.safetensors"), metadata={"format": "pt"}
    )
    config = hf_config(
        model_type, registers=options.get("registers", 0), head=options["head"], **extra
    )
    (folder / "config.json").write_text(json.dumps(config))
    model = keras_vit.from_checkpoint(folder)
    x = _images()
    activation = extra.get("hidden_act", "gelu")
    want = forward(params, x, heads=TINY["heads"], activation=activation)
    np.testing.assert_allclose(_output(model, x), want, atol=ATOL, rtol=0)
    _write_back_reads_the_same(model, tmp_path / "back", "hf")
    written = json.loads((tmp_path / "back" / "config.json").read_text())
    for key in ("architectures", "pooler_output_size"):
        assert written.get(key) == config.get(key, written.get(key)), key
