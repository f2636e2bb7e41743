"""keras_vit's `.npz` (`save_npz`, `write_checkpoint(..., "npz")`): what the release's keys
cannot say travels in the `keras_vit/metadata` member, so a DINOv3 fine-tune's best.npz
reloads to the same logits, built from the file alone or into the run's model; a plain model's
file stays the release's; a member keras_vit cannot read is refused by name."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints import CheckpointError, read_checkpoint
from keras_vit.checkpoints.base.npz_io import read_npz, write_npz
from tests.checkpoints.random_models import images_for, logits, randomise, tiny_vit

DINOV3 = dict(patch_size=4, hidden_dim=16, num_heads=2, mlp_dim=32, num_layers=2, num_classes=5)
SIZE = (8, 12)


def _dinov3(pooling="token", seed=3):
    """A tiny DINOv3 (RoPE, 4 storage tokens, LayerScale, no q/k/v bias, exact GELU, eps
    1e-5, ImageNet scaling), every weight random."""
    model = keras_vit.DINOv3("S/16", image_size=SIZE, pooling=pooling, **DINOV3)
    return randomise(model, seed)


@pytest.mark.parametrize("pooling", ["token", "patch_gap"])
def test_a_dinov3_npz_reloads_to_the_same_logits(tmp_path, pooling):
    model = _dinov3(pooling)
    path = tmp_path / "best.npz"
    keras_vit.save_npz(model, path)
    x = images_for(model)
    want = logits(model, x)
    back = keras_vit.from_checkpoint(path)
    np.testing.assert_allclose(logits(back, x), want, atol=1e-6, rtol=0)
    contents = read_checkpoint(path)
    assert (contents.position_embedding, contents.image_size) == ("rope", SIZE)
    assert (contents.gelu_approximate, contents.layer_norm_epsilon) == (False, 1e-5)
    run_model = randomise(_dinov3(pooling, seed=9), seed=9)  # the run's config, rebuilt
    keras_vit.load_weights(run_model, path)
    np.testing.assert_allclose(logits(run_model, x), want, atol=1e-6, rtol=0)


def test_a_release_like_model_writes_only_the_release_keys(tmp_path):
    model = tiny_vit()
    keras_vit.save_npz(model, tmp_path / "plain.npz")
    with zipfile.ZipFile(tmp_path / "plain.npz") as archive:
        assert not any(name.startswith("keras_vit") for name in archive.namelist())


@pytest.mark.parametrize(
    "recorded, message",
    [
        ({"rotary": "rope"}, "records 'rotary', which keras_vit does not know"),
        ({"position_embedding": "sincos"}, "position_embedding='sincos'"),
        ({"layer_norm_epsilon": -1.0}, "layer_norm_epsilon=-1.0"),
        ({"gelu_approximate": 0}, "gelu_approximate=0"),
        ({"image_size": [8]}, r"image_size=\[8\]"),
        ([1, 2], "is not a JSON object"),
    ],
)
def test_metadata_keras_vit_cannot_read_is_refused_by_name(tmp_path, recorded, message):
    keras_vit.save_npz(tiny_vit(), tmp_path / "plain.npz")
    arrays = read_npz(tmp_path / "plain.npz")
    text = json.dumps(recorded).encode("utf-8")
    arrays["keras_vit/metadata"] = np.frombuffer(text, np.uint8)
    write_npz(tmp_path / "edited.npz", arrays)
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(tmp_path / "edited.npz")
