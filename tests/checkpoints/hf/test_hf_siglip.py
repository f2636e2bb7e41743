"""Hugging Face SigLIP and SigLIP 2 image towers (no torch): folders the tests write in
transformers' key layout (`modeling_siglip.py` / `modeling_siglip2.py` names, spelled here
from the neutral weights of `family_state.random_params`) -> `from_checkpoint` -> compared with
the NumPy forward pass (`family_state.forward`, timm's `AttentionPoolLatent` = SigLIP's
`SiglipMultiheadAttentionPoolingHead`); written back, the folder holds the same tensors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import keras_vit
from keras_vit.checkpoints import CheckpointError, model_contents, write_checkpoint
from keras_vit.checkpoints.hf.hf_siglip import write_siglip
from tests.checkpoints.family_state import TINY, forward, random_params

SIGLIP, SIGLIP2 = "siglip_vision_model", "siglip2_vision_model"


def _hf_state(params, model_type, prefix=""):
    """transformers' SiglipVisionModel / Siglip2VisionModel state dict of `params`."""
    d, p, c = TINY["hidden"], TINY["patch"], TINY["channels"]
    patch = params["patch.w"]  # (D, C, P, P)
    if model_type == SIGLIP2:  # a Linear on patches flattened row, column, channel
        patch = patch.transpose(0, 2, 3, 1).reshape(d, p * p * c)
    state = {
        "embeddings.patch_embedding.weight": patch,
        "embeddings.patch_embedding.bias": params["patch.b"],
        "embeddings.position_embedding.weight": params["pos"][0],
        "post_layernorm.weight": params["norm.w"],
        "post_layernorm.bias": params["norm.b"],
        "head.probe": params["pool.latent"],
        "head.attention.in_proj_weight": np.concatenate([params["pool.q.w"], params["pool.kv.w"]]),
        "head.attention.in_proj_bias": np.concatenate([params["pool.q.b"], params["pool.kv.b"]]),
    }
    for ours, hf in (("proj", "attention.out_proj"), ("norm", "layernorm"),
                     ("fc1", "mlp.fc1"), ("fc2", "mlp.fc2")):  # fmt: skip
        state[f"head.{hf}.weight"], state[f"head.{hf}.bias"] = (
            params[f"pool.{ours}.w"],
            params[f"pool.{ours}.b"],
        )
    for i, block in enumerate(params["blocks"]):
        for ours, hf in (("n1", "layer_norm1"), ("n2", "layer_norm2"), ("fc1", "mlp.fc1"),
                         ("fc2", "mlp.fc2"), ("q", "self_attn.q_proj"), ("k", "self_attn.k_proj"),
                         ("v", "self_attn.v_proj"), ("o", "self_attn.out_proj")):  # fmt: skip
            state[f"encoder.layers.{i}.{hf}.weight"] = block[ours + ".w"]
            state[f"encoder.layers.{i}.{hf}.bias"] = block[ours + ".b"]
    return {prefix + key: np.ascontiguousarray(value) for key, value in state.items()}


def _config(model_type, **changes):
    config = {
        "model_type": model_type,
        "hidden_size": TINY["hidden"],
        "intermediate_size": TINY["mlp"],
        "num_hidden_layers": TINY["layers"],
        "num_attention_heads": TINY["heads"],
        "num_channels": TINY["channels"],
        "patch_size": TINY["patch"],
        "hidden_act": "gelu_pytorch_tanh",
        "layer_norm_eps": 1e-6,
    }
    grid = TINY["image_size"] // TINY["patch"]
    if model_type == SIGLIP2:
        config["num_patches"] = grid * grid
    else:
        config["image_size"] = TINY["image_size"]
    config.update(changes)
    return config


def _folder(folder, state, config):
    folder.mkdir(parents=True, exist_ok=True)
    save_file(state, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _images(seed=1):
    size = TINY["image_size"]
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


@pytest.mark.parametrize("model_type", [SIGLIP, SIGLIP2])
@pytest.mark.parametrize(
    "hidden_act, act_layer", [("gelu_pytorch_tanh", "gelu_tanh"), ("gelu", "gelu")]
)
def test_a_siglip_tower_folder_equals_the_numpy_forward_and_writes_back(
    tmp_path, model_type, hidden_act, act_layer
):
    params = random_params(np.random.default_rng(2), attn_pool=True, head=False)
    state = _hf_state(params, model_type)
    folder = _folder(tmp_path / "hf", state, _config(model_type, hidden_act=hidden_act))
    model = keras_vit.from_checkpoint(folder)
    x = _images()
    want = forward(params, x, heads=TINY["heads"], activation=act_layer)
    np.testing.assert_allclose(np.asarray(model(x), np.float64), want, atol=1e-5, rtol=0)
    write_siglip(tmp_path / "back", model_contents(model), model_type)
    written = load_file(str(tmp_path / "back" / "model.safetensors"))
    assert sorted(written) == sorted(state)
    for key, value in state.items():
        np.testing.assert_allclose(written[key], value, atol=1e-7, rtol=0, err_msg=key)
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert {k: config[k] for k in _config(model_type)} == _config(model_type, hidden_act=hidden_act)


def test_a_whole_siglip_model_gives_its_image_tower(tmp_path):
    params = random_params(np.random.default_rng(4), attn_pool=True, head=False)
    state = _hf_state(params, SIGLIP, prefix="vision_model.")
    state["text_model.embeddings.token_embedding.weight"] = np.ones((7, 4), np.float32)
    state["logit_scale"] = np.ones((1,), np.float32)
    config = {"model_type": "siglip", "vision_config": _config(SIGLIP), "text_config": {}}
    model = keras_vit.from_checkpoint(_folder(tmp_path, state, config))
    x = _images(3)
    want = forward(params, x, heads=TINY["heads"], activation="gelu_tanh")
    np.testing.assert_allclose(np.asarray(model(x), np.float64), want, atol=1e-5, rtol=0)


def test_the_hf_writer_writes_a_map_model_without_a_head_as_a_siglip_tower(tmp_path):
    params = random_params(np.random.default_rng(5), attn_pool=True, head=False)
    model = keras_vit.from_checkpoint(
        _folder(tmp_path / "in", _hf_state(params, SIGLIP), _config(SIGLIP))
    )
    write_checkpoint(model_contents(model), tmp_path / "out", "hf")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == ["SiglipVisionModel"]
    again = keras_vit.from_checkpoint(tmp_path / "out")
    x = _images(6)
    np.testing.assert_allclose(np.asarray(again(x)), np.asarray(model(x)), atol=1e-6, rtol=0)


def _state(**changes):
    state = _hf_state(random_params(np.random.default_rng(0), attn_pool=True, head=False), SIGLIP)
    state.update(changes)
    return state


@pytest.mark.parametrize(
    "state, config, match",
    [
        (_state(), _config(SIGLIP, vision_use_head=False), "vision_use_head=false"),
        (_state(), _config(SIGLIP, hidden_act="silu"), "hidden_act='silu'"),
        (_state(), _config(SIGLIP2, num_patches=15), "num_patches=15 is not a square"),
        (_state(extra=np.ones(3, np.float32)), _config(SIGLIP), "not part of a SigLIP image tower"),
        (_state(), {"model_type": "siglip"}, "without a vision_config"),
    ],
    ids=["no_head", "activation", "naflex_grid", "extra_tensor", "whole_without_vision"],
)
def test_what_a_siglip_tower_cannot_be_is_refused_in_one_line(tmp_path, state, config, match):
    with pytest.raises(CheckpointError, match=match) as error:
        keras_vit.from_checkpoint(_folder(tmp_path, state, config))
    assert "\n" not in str(error.value)


def test_the_siglip_writer_refuses_a_classifier_by_name(tmp_path):
    model = keras_vit.ViT(
        image_size=28, patch_size=7, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=1,
        num_classes=3, pooling="map",
    )  # fmt: skip
    with pytest.raises(CheckpointError, match="head=True"):
        write_checkpoint(model_contents(model), tmp_path / "hf", "hf")
    with pytest.raises(CheckpointError, match="classifier"):
        write_siglip(tmp_path / "hf2", model_contents(model))
    assert not (tmp_path / "hf").exists() and not (tmp_path / "hf2").exists()


def test_the_weights_file_of_a_siglip_folder_is_recognised_as_hf(tmp_path):
    from keras_vit.checkpoints import detect_format

    params = random_params(np.random.default_rng(1), attn_pool=True, head=False)
    folder = _folder(tmp_path, _hf_state(params, SIGLIP), _config(SIGLIP))
    assert detect_format(str(folder / "model.safetensors")) == "hf"
    model = keras_vit.from_checkpoint(folder / "model.safetensors")
    assert model.get_layer("MAPHead_0").num_heads == TINY["heads"]


def _naflex_table(table, old, new):
    """transformers' `Siglip2VisionEmbeddings.resize_positional_embeddings` in NumPy: per
    axis, output i at (i + 0.5) * old / n - 0.5, triangle weights over every input row with
    support max(old / n, 1), each row normalised; the grid's rows then columns."""

    def weights(n):
        scale = old / n
        centre = (np.arange(n) + 0.5) * scale - 0.5
        w = np.clip(1 - np.abs(np.arange(old)[None] - centre[:, None]) / max(scale, 1.0), 0, None)
        return w / w.sum(1, keepdims=True)

    grid = np.asarray(table, np.float64).reshape(old, old, -1)
    resized = np.einsum("ir,rcd,jc->ijd", weights(new[0]), grid, weights(new[1]))
    return resized.reshape(1, new[0] * new[1], -1)


@pytest.fixture(scope="module")
def naflex_folder(tmp_path_factory):
    params = random_params(np.random.default_rng(7), attn_pool=True, head=False)
    folder = tmp_path_factory.mktemp("naflex") / "hf"
    return params, _folder(folder, _hf_state(params, SIGLIP2), _config(SIGLIP2))


def test_a_naflex_tower_at_another_grid_resizes_its_table_as_transformers(naflex_folder):
    """Siglip2VisionModel on one image of grid (H / P, W / P), no padding: the 4x4 table
    resized by NaFlex's antialiased bilinear rule to 8x2 (as many patches; enlarging the
    rows, shrinking the columns); the model records the rule for finetune and the forward
    pass, which gives the same at that size."""
    params, folder = naflex_folder
    size = (56, 14)
    model = keras_vit.from_checkpoint(folder, image_size=size)
    assert model.get_layer("posembed_input").resize_method == "bilinear_antialias"
    grid = (size[0] // TINY["patch"], size[1] // TINY["patch"])
    side = TINY["image_size"] // TINY["patch"]
    resized = dict(params, pos=_naflex_table(params["pos"][0], side, grid))
    x = np.random.default_rng(3).uniform(-1, 1, (2, *size, 3)).astype("float32")
    want = forward(resized, x, heads=TINY["heads"], activation="gelu_tanh")
    np.testing.assert_allclose(np.asarray(model(x), np.float64), want, atol=1e-5, rtol=0)
    dynamic = keras_vit.from_checkpoint(folder, dynamic_image_size=True)
    np.testing.assert_allclose(np.asarray(dynamic(x), np.float64), want, atol=1e-5, rtol=0)


def test_another_resize_method_for_a_naflex_tower_is_refused_in_one_line(naflex_folder):
    _, folder = naflex_folder
    with pytest.raises(CheckpointError, match="resize_method='bicubic' but .*'bilinear_antialias'"):
        keras_vit.from_checkpoint(folder, image_size=42, resize_method="bicubic")
    model = keras_vit.ViT(
        image_size=42, patch_size=7, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2,
        include_top=False, pooling="map", gelu_approximate=True,
    )  # fmt: skip
    before = [np.asarray(w).copy() for w in model.weights]
    with pytest.raises(CheckpointError, match="resize_method='bilinear' but") as error:
        keras_vit.load_weights(model, folder, resize_method="bilinear")
    assert "\n" not in str(error.value)
    for old, weight in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(old, np.asarray(weight))
    keras_vit.load_weights(model, folder)  # the file's own rule, unasked, and recorded
    assert model.get_layer("posembed_input").resize_method == "bilinear_antialias"


def test_a_dynamic_model_resizing_otherwise_refuses_a_naflex_tower(naflex_folder):
    """A model that resizes its table with the release's bilinear in the forward pass would
    follow neither rule; the message points to the one way that loads."""
    _, folder = naflex_folder
    model = keras_vit.ViT(
        image_size=28, patch_size=7, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2,
        include_top=False, pooling="map", gelu_approximate=True, dynamic_image_size=True,
    )  # fmt: skip
    with pytest.raises(ValueError, match="'bilinear' in the forward pass; build it with") as error:
        keras_vit.load_weights(model, folder)
    assert "load with" not in str(error.value) and "\n" not in str(error.value)
