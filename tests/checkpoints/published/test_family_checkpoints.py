"""Published ViT-family names (keras_vit/checkpoints/published/family_checkpoints.py): each
names its architecture, source library and file, and resolves to a local folder in the cache."""

from __future__ import annotations

import pytest

from keras_vit.checkpoints.published import registry
from keras_vit.checkpoints.published.family_checkpoints import FAMILY_CHECKPOINTS, family_entry


@pytest.mark.parametrize(
    "name, architecture, library",
    [
        ("deit_small_patch16_224", "deit_small_patch16_224", "timm"),
        ("deit_base_distilled_patch16_224.fb_in1k", "deit_base_distilled_patch16_224", "timm"),
        ("deit3_base_patch16_224", "deit3_base_patch16_224", "timm"),
        ("vit_small_patch14_dinov2.lvd142m", "vit_small_patch14_dinov2", "timm"),
        ("vit_base_patch14_reg4_dinov2.lvd142m", "vit_base_patch14_reg4_dinov2", "timm"),
        ("vit_base_patch16_clip_224.openai", "vit_base_patch16_clip_224", "timm"),
        ("facebook/dinov2-small", "Dinov2Model", "hf"),
        ("facebook/deit-base-distilled-patch16-224", "DeiTForImageClassificationWithTeacher", "hf"),
        ("facebook/dinov2-with-registers-base", "Dinov2WithRegistersModel", "hf"),
    ],
)
def test_published_family_names(name, architecture, library):
    entry = family_entry(name)
    assert (entry.architecture, entry.library, entry.filename) == (
        architecture,
        library,
        "model.safetensors",
    )
    assert entry.name in FAMILY_CHECKPOINTS


def test_a_family_name_resolves_to_its_local_folder(tmp_path):
    with pytest.raises(
        FileNotFoundError, match="huggingface.co/timm/deit_small_patch16_224.fb_in1k"
    ):
        registry.resolve_family("deit_small_patch16_224", cache_dir=tmp_path)
    folder = tmp_path / "keras_vit" / "deit_small_patch16_224.fb_in1k"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "config.json").write_text("{}")
    assert registry.resolve_family("deit_small_patch16_224", cache_dir=tmp_path) == str(
        folder / "model.safetensors"
    )
    hf = tmp_path / "keras_vit" / "facebook--dinov2-small"
    hf.mkdir()
    with pytest.raises(FileNotFoundError, match="config.json, model.safetensors"):
        registry.resolve_family("facebook/dinov2-small", cache_dir=tmp_path)
    (hf / "model.safetensors").write_bytes(b"")
    (hf / "config.json").write_text("{}")
    assert registry.resolve_family("facebook/dinov2-small", cache_dir=tmp_path) == str(hf)
    with pytest.raises(ValueError, match="not a published ViT-family"):
        registry.resolve_family("facebook/dinov3", cache_dir=tmp_path)


def test_from_checkpoint_and_weights_take_a_family_name(tmp_path, monkeypatch):
    """The name resolves to its folder in the cache ($KERAS_VIT_CACHE_DIR), read as any
    local folder: a hand-written HF Dinov2Model folder here."""
    import json

    import numpy as np
    from safetensors.numpy import save_file

    import keras_vit
    from tests.checkpoints.family_state import TINY, forward, hf_config, random_params, to_hf

    monkeypatch.setenv("KERAS_VIT_CACHE_DIR", str(tmp_path))
    folder = tmp_path / "keras_vit" / "facebook--dinov2-small"
    folder.mkdir(parents=True)
    params = random_params(np.random.default_rng(0), layer_scale=True, head=False)
    save_file(to_hf(params, "dinov2"), str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(hf_config("dinov2")))
    model = keras_vit.from_checkpoint("facebook/dinov2-small")
    x = np.random.default_rng(1).uniform(-1, 1, (2, 28, 28, 3)).astype("float32")
    want = forward(params, x, heads=TINY["heads"])
    np.testing.assert_allclose(np.asarray(model(x)), want, atol=1e-4, rtol=0)
    again = keras_vit.ViT(
        image_size=28, patch_size=7, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2,
        include_top=False, layer_scale_init=1.0, gelu_approximate=False,
        weights="facebook/dinov2-small",
    )  # fmt: skip
    np.testing.assert_allclose(np.asarray(again(x)), want, atol=1e-4, rtol=0)
