"""Format detection by content (keras_vit.checkpoints.detect), whatever the file is named."""

from __future__ import annotations

import json
import pickle
import zipfile

import numpy as np
import pytest
from safetensors.numpy import save_file

from keras_vit.checkpoints import UnsupportedCheckpointError, detect_format
from tests.checkpoints.torch_state import hf_config, hf_state, timm_state


def test_formats_are_found_by_content_not_name(tmp_path):
    rng = np.random.default_rng(0)
    npz = tmp_path / "weights.safetensors"  # an .npz under a misleading name
    with open(npz, "wb") as stream:
        np.savez(stream, cls=np.zeros((1, 1, 4), np.float32))
    timm = tmp_path / "timm.npz"
    save_file(timm_state(rng), str(timm))
    hf = tmp_path / "hf"
    hf.mkdir()
    save_file(hf_state(rng), str(hf / "model.safetensors"))
    (hf / "config.json").write_text(json.dumps(hf_config()))
    assert detect_format(npz) == "npz"
    assert detect_format(timm) == "timm"
    assert detect_format(hf) == "hf"
    assert detect_format(hf / "model.safetensors") == "hf"


def test_pytorch_pickles_are_refused_with_conversion_advice(tmp_path):
    legacy = tmp_path / "pytorch_model.bin"
    legacy.write_bytes(pickle.dumps({"a": 1}, protocol=2))
    with pytest.raises(UnsupportedCheckpointError, match="pickle.*safetensors.torch.save_file"):
        detect_format(legacy)
    torch_zip = tmp_path / "model.pth"
    with zipfile.ZipFile(torch_zip, "w") as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        archive.writestr("archive/data/0", b"\x00" * 8)
    with pytest.raises(UnsupportedCheckpointError, match="PyTorch checkpoint.*data.pkl"):
        detect_format(torch_zip)
    folder = tmp_path / "hub"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({}))
    with pytest.raises(UnsupportedCheckpointError, match="pytorch_model.bin.*save_pretrained"):
        detect_format(folder)


@pytest.mark.parametrize(
    "content, found",
    [
        (b"<!DOCTYPE html><html><body>403 Forbidden</body></html>", "HTML"),
        (b"", "empty file"),
        (b"\x89HDF\r\n\x1a\n" + b"\x00" * 32, "HDF5"),
        (b"GIF89a" + b"\x00" * 20, "unknown file"),
    ],
    ids=["html", "empty", "hdf5", "other"],
)
def test_other_files_name_what_they_are(tmp_path, content, found):
    path = tmp_path / "ViT-B_16.npz"
    path.write_bytes(content)
    with pytest.raises(UnsupportedCheckpointError, match=found):
        detect_format(path)


def test_truncated_files_are_named_truncated(tmp_path):
    rng = np.random.default_rng(0)
    full = tmp_path / "full.npz"
    np.savez(full, a=rng.standard_normal(20000).astype(np.float32))
    cut = tmp_path / "cut.npz"
    cut.write_bytes(full.read_bytes()[:30000])
    with pytest.raises(UnsupportedCheckpointError, match="truncated"):
        detect_format(cut)
    st = tmp_path / "full.safetensors"
    save_file(timm_state(rng), str(st))
    cut_st = tmp_path / "cut.safetensors"
    cut_st.write_bytes(st.read_bytes()[:-100])
    with pytest.raises(UnsupportedCheckpointError, match="truncated safetensors"):
        detect_format(cut_st)


def test_hf_weights_without_config_say_what_is_missing(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file(hf_state(np.random.default_rng(0)), str(path))
    with pytest.raises(UnsupportedCheckpointError, match="config.json"):
        detect_format(path)


def test_a_timm_naflexvit_file_is_refused_by_name(tmp_path):
    """timm's NaFlexVit layout (`embeds.proj`, `embeds.pos_embed` (1, H, W, D)) is not read;
    the message names the SigLIP 2 NaFlex tower keras_vit does read."""
    path = tmp_path / "model.safetensors"
    save_file(
        {
            "embeds.proj.weight": np.zeros((8, 12), np.float32),
            "embeds.pos_embed": np.zeros((1, 2, 2, 8), np.float32),
            "blocks.0.attn.qkv.weight": np.zeros((24, 8), np.float32),
        },
        str(path),
    )
    with pytest.raises(UnsupportedCheckpointError, match="timm NaFlexVit file") as error:
        detect_format(str(path))
    assert "\n" not in str(error.value) and "Siglip2VisionModel folder" in str(error.value)
