"""Published ViT-family names (keras_vit/checkpoints/family_checkpoints.py): each names its
architecture, source library and file, and resolves to a local folder in the cache."""

from __future__ import annotations

import pytest

from keras_vit.checkpoints import registry
from keras_vit.checkpoints.family_checkpoints import FAMILY_CHECKPOINTS, family_entry


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
    assert registry.family_entry(name) is entry and entry.name in FAMILY_CHECKPOINTS


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
