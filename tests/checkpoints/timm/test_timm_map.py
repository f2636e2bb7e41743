"""timm's attention pooling (`global_pool="map"`, `attn_pool.*`, no class token: the SigLIP
and SigLIP 2 image towers) read and written as keras_vit's MAP head.

The reference is a NumPy forward of timm's `AttentionPoolLatent` on the timm tensors
themselves (tests/checkpoints/family_state.py `attention_pool_latent`), with the encoder
from the equations; none of it uses keras_vit's converters.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file, save_file

import keras_vit
from keras_vit.checkpoints import CheckpointError, model_contents, write_checkpoint
from tests.checkpoints.family_state import TINY, forward, random_params, to_timm

SIGLIP_CONFIG = {
    "architecture": "vit_base_patch16_siglip_224",
    "global_pool": "map",
    "model_args": {"num_heads": TINY["heads"], "class_token": False, "global_pool": "map"},
    "pretrained_cfg": {"input_size": [3, TINY["image_size"], TINY["image_size"]]},
}


def _write_timm(folder, state, config=SIGLIP_CONFIG):
    folder.mkdir(exist_ok=True)
    path = folder / "model.safetensors"
    save_file(state, str(path))
    (folder / "config.json").write_text(json.dumps(config))
    return path


def _images(seed=1, size=TINY["image_size"]):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


@settings(max_examples=4)  # each builds a model (~1.5 s)
@given(seed=st.integers(0, 2**16), head=st.booleans())
def test_a_siglip_tower_equals_the_numpy_attention_pool(tmp_path_factory, seed, head):
    params = random_params(np.random.default_rng(seed), attn_pool=True, head=head)
    path = _write_timm(tmp_path_factory.mktemp("siglip"), to_timm(params))
    model = keras_vit.from_checkpoint(path)
    assert model.get_layer("MAPHead_0").num_heads == TINY["heads"]
    x = _images(seed)
    want = forward(params, x, heads=TINY["heads"])
    assert np.abs(want).max() > 1e-2
    np.testing.assert_allclose(np.asarray(model(x)), want, atol=1e-5, rtol=0)


def test_written_back_it_is_the_same_timm_state(tmp_path):
    params = random_params(np.random.default_rng(3), attn_pool=True)
    state = to_timm(params)
    model = keras_vit.from_checkpoint(_write_timm(tmp_path / "in", state))
    back = tmp_path / "back.safetensors"
    write_checkpoint(model_contents(model), back, "timm")
    written = load_file(str(back))
    assert sorted(written) == sorted(state)
    for key, value in state.items():
        np.testing.assert_allclose(written[key], value, atol=1e-7, rtol=0, err_msg=key)
    again = keras_vit.from_checkpoint(back)
    x = _images(4)
    np.testing.assert_allclose(np.asarray(again(x)), np.asarray(model(x)), atol=1e-6, rtol=0)


def test_a_keras_vit_map_model_round_trips_through_timm(tmp_path):
    from tests.checkpoints.random_models import randomise

    model = randomise(
        keras_vit.ViT(
            image_size=(24, 40), patch_size=8, hidden_dim=32, num_heads=4, mlp_dim=64,
            num_layers=2, num_classes=5, pooling="map",
        ),
        seed=5,
    )  # fmt: skip
    path = tmp_path / "map.safetensors"
    write_checkpoint(model_contents(model), path, "timm")
    back = keras_vit.from_checkpoint(path)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 24, 40, 3)).astype("float32")
    np.testing.assert_allclose(np.asarray(back(x)), np.asarray(model(x)), atol=1e-5, rtol=0)


def _siglip_state(**changes):
    state = to_timm(random_params(np.random.default_rng(0), attn_pool=True))
    state.update(changes)
    return state


@pytest.mark.parametrize(
    "state, config, match",
    [
        (
            _siglip_state(**{"attn_pool.latent": np.ones((1, 2, 32), np.float32)}),
            SIGLIP_CONFIG,
            r"attn_pool.latent has shape \(1, 2, 32\); keras_vit's MAP head has one probe",
        ),
        (
            _siglip_state(cls_token=np.ones((1, 1, 32), np.float32)),
            {"model_args": {"num_heads": 4, "no_embed_class": True}},
            "pools by attention .* and has a cls_token",
        ),
        (
            _siglip_state(**{"attn_pool.mlp.fc1.weight": np.ones((96, 32), np.float32)}),
            SIGLIP_CONFIG,
            r"attn_pool.mlp.fc1 has shape \(96, 32\), the blocks' mlp.fc1 \(64, 32\)",
        ),
        (
            _siglip_state(),
            dict(SIGLIP_CONFIG, global_pool="avg", model_args={}),
            "global_pool='avg' but the file has attention",
        ),
        (
            to_timm(random_params(np.random.default_rng(0), head=False)),
            {"global_pool": "map", "model_args": {"num_heads": 4}},
            "global_pool='map' but the file has no attention-pooling",
        ),
        (
            _siglip_state(**{"attn_pool.q_norm.weight": np.ones(8, np.float32)}),
            SIGLIP_CONFIG,
            "attn_pool.q_norm.weight",
        ),
    ],
    ids=["latent_len", "class_token", "mlp_width", "avg_with_pool", "map_without_pool", "qk_norm"],
)  # fmt: skip
def test_attention_pooling_keras_vit_cannot_hold_is_refused_in_one_line(
    tmp_path, state, config, match
):
    path = _write_timm(tmp_path / "bad", state, config)
    with pytest.raises(CheckpointError, match=match) as error:
        keras_vit.from_checkpoint(path)
    assert "\n" not in str(error.value)


@pytest.mark.pytorch
def test_timm_siglip_forward_matches_in_the_pytorch_lane(tmp_path):
    """timm's own SigLIP tower (random weights, tiny sizes, saved by `save_for_hf`): keras_vit
    reads it, matches timm's forward within 1e-5 at the file's size and, with
    `dynamic_image_size=True, resize_method="bicubic"`, timm's `dynamic_img_size=True` at a
    larger non-square size; written back, timm loads it strictly."""
    torch = pytest.importorskip("torch")
    timm = pytest.importorskip("timm")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    name, size, big = "vit_base_patch16_siglip_224", 28, (42, 35)
    args = dict(img_size=size, patch_size=7, embed_dim=32, depth=2, num_heads=4, mlp_ratio=2.0)
    reference = timm.create_model(name, pretrained=False, num_classes=5, **args).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2)
    timm.models.save_for_hf(
        reference, str(tmp_path / "timm"), model_args=args, safe_serialization=True
    )
    config_path = tmp_path / "timm" / "config.json"
    config = json.loads(config_path.read_text())
    config["pretrained_cfg"]["input_size"] = [3, size, size]  # the tiny model's, as real files
    config_path.write_text(json.dumps(config))
    path = tmp_path / "timm" / "model.safetensors"

    def run_torch(module, images):
        with torch.no_grad():
            return module(torch.from_numpy(images.transpose(0, 3, 1, 2).copy())).numpy()

    x = np.random.default_rng(1).uniform(-1, 1, (2, size, size, 3)).astype("float32")
    want = run_torch(reference, x)
    model = keras_vit.from_checkpoint(path)
    np.testing.assert_allclose(np.asarray(model(x)), want, atol=1e-5, rtol=0)
    dynamic = timm.create_model(
        name, pretrained=False, num_classes=5, dynamic_img_size=True, **args
    ).eval()
    dynamic.load_state_dict(reference.state_dict())
    x_big = np.random.default_rng(2).uniform(-1, 1, (2, *big, 3)).astype("float32")
    ours = keras_vit.from_checkpoint(path, dynamic_image_size=True, resize_method="bicubic")
    np.testing.assert_allclose(
        np.asarray(ours(x_big)), run_torch(dynamic, x_big), atol=1e-5, rtol=0
    )
    back = tmp_path / "back.safetensors"
    write_checkpoint(model_contents(model), back, "timm")
    loaded = timm.create_model(name, pretrained=False, num_classes=5, **args).eval()
    loaded.load_state_dict(safetensors_torch.load_file(str(back)), strict=True)
    np.testing.assert_allclose(run_torch(loaded, x), want, atol=1e-5, rtol=0)
