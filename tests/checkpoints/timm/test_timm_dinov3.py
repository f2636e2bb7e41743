"""DINOv3 files (timm's and Hugging Face's) without torch: state dicts the tests spell in
timm's (eva.py `Eva`, DINOv3 definitions) and transformers' (`DINOv3ViTModel`) key layouts
from the libraries' documented names, read by `from_checkpoint` and compared with the NumPy
forward pass from the equations (tests/numpy_family_reference.py, `rope=True`); written back
by keras_vit and read again; and the refusals, each by name. (The PyTorch lane,
tests/checkpoints/test_pytorch_dinov3.py, compares with the libraries' own forward passes.)"""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
from safetensors.numpy import save_file

import keras_vit
from keras_vit.checkpoints import CheckpointError, model_contents, read_checkpoint, write_checkpoint
from keras_vit.checkpoints.base.architecture import Architecture
from tests.numpy_family_reference import family_forward

D, HEADS, MLP, PATCH, LAYERS, REGISTERS, CLASSES = 16, 2, 32, 4, 2, 3, 5
SIZE = (8, 12)


def _r(rng, *shape):
    return (rng.standard_normal(shape) * 0.3).astype(np.float32)


def _params(seed=0, qkv_bias="none", head=True, gated=False):
    """Release-style keys (the NumPy reference's) of a tiny DINOv3; kernels (in, out);
    `gated`: the SwiGLU MLP's gate (`Dense_gate`) too."""
    rng = np.random.default_rng(seed)
    p = {
        "embedding/kernel": _r(rng, PATCH, PATCH, 3, D),
        "embedding/bias": _r(rng, D),
        "cls": _r(rng, 1, 1, D),
        "reg": _r(rng, 1, REGISTERS, D),
        "Transformer/encoder_norm/scale": 1 + _r(rng, D),
        "Transformer/encoder_norm/bias": _r(rng, D),
    }
    for i in range(LAYERS):
        b = f"Transformer/encoderblock_{i}/"
        a = b + "MultiHeadDotProductAttention_1/"
        for ln in ("LayerNorm_0", "LayerNorm_2"):
            p[b + ln + "/scale"], p[b + ln + "/bias"] = 1 + _r(rng, D), _r(rng, D)
        for name in ("query", "key", "value", "out"):
            p[a + name + "/kernel"] = _r(rng, D, D)
        for name in ("query", "value") if qkv_bias == "qv" else ():
            p[a + name + "/bias"] = _r(rng, D)
        p[a + "out/bias"] = _r(rng, D)
        p[b + "MlpBlock_3/Dense_0/kernel"], p[b + "MlpBlock_3/Dense_0/bias"] = (
            _r(rng, D, MLP),
            _r(rng, MLP),
        )
        p[b + "MlpBlock_3/Dense_1/kernel"], p[b + "MlpBlock_3/Dense_1/bias"] = (
            _r(rng, MLP, D),
            _r(rng, D),
        )
        if gated:
            p[b + "MlpBlock_3/Dense_gate/kernel"] = _r(rng, D, MLP)
            p[b + "MlpBlock_3/Dense_gate/bias"] = _r(rng, MLP)
        p[b + "LayerScale_1/scale"], p[b + "LayerScale_3/scale"] = 1 + _r(rng, D), 1 + _r(rng, D)
    if head:
        p["head/kernel"], p["head/bias"] = _r(rng, D, CLASSES), _r(rng, CLASSES)
    return p


def _to_timm(p, packed=False):
    """timm's Eva state dict: fused qkv weight (3D, D), q_bias / v_bias, gamma_1 / gamma_2; a
    gated MLP as timm's `SwiGLU` (`fc1_g`, `fc1_x`, `fc2`) or, `packed`, its `GluMlp`
    (`fc1` = [gate; x] rows, `gate_last=False`)."""
    s = {
        "patch_embed.proj.weight": p["embedding/kernel"].transpose(3, 2, 0, 1),
        "patch_embed.proj.bias": p["embedding/bias"],
        "cls_token": p["cls"],
        "reg_token": p["reg"],
        "norm.weight": p["Transformer/encoder_norm/scale"],
        "norm.bias": p["Transformer/encoder_norm/bias"],
    }
    for i in range(LAYERS):
        b, t = f"Transformer/encoderblock_{i}/", f"blocks.{i}."
        a = b + "MultiHeadDotProductAttention_1/"
        s[t + "attn.qkv.weight"] = np.concatenate(
            [p[a + n + "/kernel"].T for n in "query key value".split()]
        )
        if a + "query/bias" in p:
            s[t + "attn.q_bias"], s[t + "attn.v_bias"] = p[a + "query/bias"], p[a + "value/bias"]
        s[t + "attn.proj.weight"], s[t + "attn.proj.bias"] = (
            p[a + "out/kernel"].T,
            p[a + "out/bias"],
        )
        for ln, timm in (("LayerNorm_0", "norm1"), ("LayerNorm_2", "norm2")):
            s[t + timm + ".weight"], s[t + timm + ".bias"] = (
                p[b + ln + "/scale"],
                p[b + ln + "/bias"],
            )
        gated = b + "MlpBlock_3/Dense_gate/kernel" in p
        fc1 = "mlp.fc1_x" if gated and not packed else "mlp.fc1"
        denses = [("Dense_0", fc1), ("Dense_1", "mlp.fc2")]
        if gated and not packed:
            denses.append(("Dense_gate", "mlp.fc1_g"))
        for dense, timm in denses:
            s[t + timm + ".weight"] = p[b + "MlpBlock_3/" + dense + "/kernel"].T
            s[t + timm + ".bias"] = p[b + "MlpBlock_3/" + dense + "/bias"]
        if gated and packed:
            m = b + "MlpBlock_3/"
            s[t + "mlp.fc1.weight"] = np.concatenate(
                [p[m + "Dense_gate/kernel"].T, p[m + "Dense_0/kernel"].T]
            )
            s[t + "mlp.fc1.bias"] = np.concatenate(
                [p[m + "Dense_gate/bias"], p[m + "Dense_0/bias"]]
            )
        s[t + "gamma_1"], s[t + "gamma_2"] = (
            p[b + "LayerScale_1/scale"],
            p[b + "LayerScale_3/scale"],
        )
    if "head/kernel" in p:
        s["head.weight"], s["head.bias"] = p["head/kernel"].T, p["head/bias"]
    return {k: np.ascontiguousarray(v) for k, v in s.items()}


def _to_hf(p):
    """transformers' DINOv3ViTModel state dict (`model.layer.{i}`, q/k/v/o_proj)."""
    e = "embeddings."
    s = {
        e + "patch_embeddings.weight": p["embedding/kernel"].transpose(3, 2, 0, 1),
        e + "patch_embeddings.bias": p["embedding/bias"],
        e + "cls_token": p["cls"],
        e + "register_tokens": p["reg"],
        e + "mask_token": np.zeros((1, 1, D), np.float32),
        "norm.weight": p["Transformer/encoder_norm/scale"],
        "norm.bias": p["Transformer/encoder_norm/bias"],
    }
    for i in range(LAYERS):
        b, h = f"Transformer/encoderblock_{i}/", f"model.layer.{i}."
        a = b + "MultiHeadDotProductAttention_1/"
        for name, hf in (("query", "q"), ("key", "k"), ("value", "v"), ("out", "o")):
            s[h + f"attention.{hf}_proj.weight"] = p[a + name + "/kernel"].T
            if a + name + "/bias" in p:
                s[h + f"attention.{hf}_proj.bias"] = p[a + name + "/bias"]
        for ln, hf in (("LayerNorm_0", "norm1"), ("LayerNorm_2", "norm2")):
            s[h + hf + ".weight"], s[h + hf + ".bias"] = p[b + ln + "/scale"], p[b + ln + "/bias"]
        denses = [("Dense_0", "mlp.up_proj"), ("Dense_1", "mlp.down_proj")]
        if b + "MlpBlock_3/Dense_gate/kernel" in p:
            denses.append(("Dense_gate", "mlp.gate_proj"))
        for dense, hf in denses:
            s[h + hf + ".weight"] = p[b + "MlpBlock_3/" + dense + "/kernel"].T
            s[h + hf + ".bias"] = p[b + "MlpBlock_3/" + dense + "/bias"]
        s[h + "layer_scale1.lambda1"] = p[b + "LayerScale_1/scale"]
        s[h + "layer_scale2.lambda1"] = p[b + "LayerScale_3/scale"]
    return {k: np.ascontiguousarray(v) for k, v in s.items()}


def _timm_file(folder, p, global_pool="token", packed=False, **args):
    folder.mkdir(parents=True, exist_ok=True)
    save_file(_to_timm(p, packed), str(folder / "model.safetensors"))
    config = {
        "architecture": "vit_small_patch16_dinov3",
        "model_args": {"embed_dim": D, "num_heads": HEADS, "depth": LAYERS, **args},
        "pretrained_cfg": {"input_size": [3, *SIZE]},
    }
    if global_pool is not None:  # timm's save_for_hf records the model's global_pool
        config["global_pool"] = global_pool
    (folder / "config.json").write_text(json.dumps(config))
    return folder / "model.safetensors"


def _hf_folder(folder, p, **fields):
    folder.mkdir(parents=True, exist_ok=True)
    save_file(_to_hf(p), str(folder / "model.safetensors"), metadata={"format": "pt"})
    biased = "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/bias" in p
    config = {
        "model_type": "dinov3_vit",
        "hidden_size": D,
        "intermediate_size": MLP,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "patch_size": PATCH,
        "image_size": list(SIZE),
        "num_register_tokens": REGISTERS,
        "query_bias": biased,
        "key_bias": False,
        "value_bias": biased,
        **fields,
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _want(p, x, head=True):
    gated = "Transformer/encoderblock_0/MlpBlock_3/Dense_gate/kernel" in p
    return family_forward(
        p,
        x,
        num_heads=HEADS,
        gelu_approximate=False,
        layer_norm_epsilon=1e-5,
        rope=True,
        mlp_activation="swiglu" if gated else "gelu",
    )


def _images(size=SIZE, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (2, *size, 3)).astype("float32")


def _out(model, x):
    out = np.asarray(model(x, training=False), np.float64)
    assert np.abs(out).max() > 1e-2
    return out


@pytest.mark.parametrize("qkv_bias", ["none", "qv"])
def test_timm_dinov3_file_matches_the_numpy_forward_and_writes_back(tmp_path, qkv_bias):
    p = _params(qkv_bias=qkv_bias)
    path = _timm_file(tmp_path / "timm", p)
    model = keras_vit.from_checkpoint(path)
    x = _images()
    np.testing.assert_allclose(_out(model, x), _want(p, x), atol=2e-5)
    arch = Architecture.from_model(model)
    assert (arch.position_embedding, arch.qkv_bias, arch.num_register_tokens) == (
        "rope",
        qkv_bias,
        REGISTERS,
    )
    other = _images((16, 8), seed=2)
    dynamic = keras_vit.from_checkpoint(path, dynamic_image_size=True)
    np.testing.assert_allclose(_out(dynamic, other), _want(p, other), atol=2e-5)
    write_checkpoint(model_contents(model), tmp_path / "back.safetensors", "timm")
    back = read_checkpoint(tmp_path / "back.safetensors")
    assert back.position_embedding == "rope"
    assert sorted(back.arrays) == sorted(model_contents(model).arrays)


def test_hf_dinov3_folder_matches_the_numpy_forward_and_writes_back(tmp_path):
    p = _params(qkv_bias="qv", head=False)
    model = keras_vit.from_checkpoint(_hf_folder(tmp_path / "hf", p))
    x = _images()
    np.testing.assert_allclose(_out(model, x), _want(p, x), atol=2e-5)
    write_checkpoint(model_contents(model), tmp_path / "back", "hf")
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["model_type"] == "dinov3_vit" and config["key_bias"] is False
    back = keras_vit.from_checkpoint(tmp_path / "back")
    np.testing.assert_allclose(_out(back, x), _want(p, x), atol=2e-5)


def test_timm_dinov3_avg_pool_is_the_mean_of_the_patch_tokens_and_round_trips(tmp_path):
    """timm's DINOv3 default `global_pool="avg"` (also what a config naming none means):
    the mean of the patch tokens, the class and storage tokens left out (eva.py `Eva.pool`)."""
    p = _params()
    unnamed = _timm_file(tmp_path / "unnamed", p, global_pool=None)
    assert read_checkpoint(unnamed).pooling == "patch_gap"
    model = keras_vit.from_checkpoint(_timm_file(tmp_path / "timm", p, global_pool="avg"))
    x = _images()
    want = family_forward(
        p,
        x,
        num_heads=HEADS,
        gelu_approximate=False,
        layer_norm_epsilon=1e-5,
        rope=True,
        pooling="gap",
        pool_patches=True,
    )
    np.testing.assert_allclose(_out(model, x), want, atol=2e-5)
    assert Architecture.from_model(model).pooling == "patch_gap"
    write_checkpoint(model_contents(model), tmp_path / "back.safetensors", "timm")
    back = keras_vit.from_checkpoint(tmp_path / "back.safetensors")
    np.testing.assert_allclose(_out(back, x), want, atol=2e-5)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert Architecture.from_model(loaded).pooling == "patch_gap"
    np.testing.assert_allclose(_out(loaded, x), want, atol=2e-5)
    with pytest.raises(CheckpointError, match="pooling='patch_gap'"):
        write_checkpoint(model_contents(model), tmp_path / "hf", "hf")


@pytest.mark.parametrize(
    "args,message",
    [
        ({"rope_temperature": 10000}, "rope_temperature=10000"),
        ({"swiglu_mlp": True}, "swiglu_mlp=True but blocks.0.mlp is not a gated"),
        ({"rope_rotate_half": False}, "rope_rotate_half=False"),
        ({"global_pool": "max"}, "global_pool='max'"),
    ],
)
def test_timm_dinov3_options_keras_vit_does_not_build_are_refused(tmp_path, args, message):
    path = _timm_file(tmp_path, _params(), **args)
    with pytest.raises(CheckpointError, match=message):
        keras_vit.from_checkpoint(path)


def test_an_eva_file_not_named_dinov3_is_refused(tmp_path):
    save_file(_to_timm(_params()), str(tmp_path / "eva.safetensors"))
    with pytest.raises(CheckpointError, match="looks like a timm EVA model"):
        keras_vit.from_checkpoint(tmp_path / "eva.safetensors")


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"use_gated_mlp": True}, "use_gated_mlp=true with hidden_act='gelu'"),
        ({"use_gated_mlp": True, "hidden_act": "silu"}, "mlp.gate_proj"),
        ({"rope_theta": 10000.0}, "rope_theta"),
    ],
)
def test_hf_dinov3_configs_keras_vit_does_not_build_are_refused(tmp_path, fields, message):
    folder = _hf_folder(tmp_path, _params(head=False), **fields)
    with pytest.raises(CheckpointError, match=message):
        keras_vit.from_checkpoint(folder)


def test_a_dinov3_file_does_not_load_into_a_model_with_another_position_scheme(tmp_path):
    path = _timm_file(tmp_path, _params())
    other = keras_vit.ViT(
        patch_size=PATCH,
        hidden_dim=D,
        num_heads=HEADS,
        mlp_dim=MLP,
        num_layers=LAYERS,
        image_size=SIZE,
        num_classes=CLASSES,
        position_embedding="none",
        num_register_tokens=REGISTERS,
        layer_scale_init=1e-5,
        qkv_bias="none",
    )
    with pytest.raises(CheckpointError, match="is a DINOv3 file"):
        keras_vit.load_weights(other, path)


def test_hf_writer_refuses_a_dinov3_with_a_head(tmp_path):
    model = keras_vit.from_checkpoint(_timm_file(tmp_path / "timm", _params()))
    with pytest.raises(CheckpointError, match="rope=True, head=True together"):
        write_checkpoint(model_contents(model), tmp_path / "hf", "hf")


@pytest.mark.parametrize("packed", [False, True], ids=["swiglu", "glu_packed"])
def test_timm_swiglu_dinov3_matches_the_numpy_forward_and_writes_back(tmp_path, packed):
    """The H+ / 7B MLP: timm's `SwiGLU` (`fc1_g`, `fc1_x`) and its packed `GluMlp` (one `fc1`,
    gate rows first) both read; written back as `SwiGLU`, the keys timm's named sizes have."""
    p = _params(qkv_bias="qv", gated=True)
    path = _timm_file(tmp_path / "timm", p, packed=packed, swiglu_mlp=True)
    model = keras_vit.from_checkpoint(path)
    assert model.get_layer("encoderblock_0").mlp_activation == "swiglu"
    x = _images()
    want = _want(p, x)
    np.testing.assert_allclose(_out(model, x), want, atol=2e-5)
    write_checkpoint(model_contents(model), tmp_path / "back.safetensors", "timm")
    from safetensors.numpy import load_file

    written = load_file(str(tmp_path / "back.safetensors"))
    assert sorted(written) == sorted(_to_timm(p))
    for key, value in _to_timm(p).items():
        np.testing.assert_array_equal(written[key], value, err_msg=key)
    np.testing.assert_allclose(
        _out(keras_vit.from_checkpoint(tmp_path / "back.safetensors"), x), want, atol=2e-5
    )


def test_hf_gated_dinov3_folder_matches_the_numpy_forward_and_writes_back(tmp_path):
    p = _params(qkv_bias="qv", head=False, gated=True)
    folder = _hf_folder(tmp_path / "hf", p, use_gated_mlp=True, hidden_act="silu")
    model = keras_vit.from_checkpoint(folder)
    x = _images()
    np.testing.assert_allclose(_out(model, x), _want(p, x), atol=2e-5)
    write_checkpoint(model_contents(model), tmp_path / "back", "hf")
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert (config["use_gated_mlp"], config["hidden_act"]) == (True, "silu")
    assert config["intermediate_size"] == MLP
    from safetensors.numpy import load_file

    written = load_file(str(tmp_path / "back" / "model.safetensors"))
    for key, value in _to_hf(p).items():
        np.testing.assert_array_equal(written[key], value, err_msg=key)
    assert sorted(written) == sorted(_to_hf(p))


def test_timm_mlp_of_another_shape_and_original_key_names_are_refused(tmp_path):
    p = _params()
    state = _to_timm(p)
    state["blocks.0.mlp.fc1.weight"] = np.zeros((3 * MLP, D), np.float32)
    folder = tmp_path / "odd"
    _timm_file(folder, p)
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match="neither timm's Mlp nor its packed SwiGLU"):
        keras_vit.from_checkpoint(folder / "model.safetensors")
    state = _to_timm(p)
    state["blocks.0.mlp.w12.weight"] = state.pop("blocks.0.mlp.fc1.weight")
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match="original DINOv3 / EVA key names"):
        keras_vit.from_checkpoint(folder / "model.safetensors")


@pytest.mark.parametrize("width,heads", [(384, 6), (1024, 16), (1280, 20), (4096, 32), (192, 3)])
def test_heads_of_a_timm_file_that_does_not_say_are_the_dinov3_sizes(width, heads):
    """timm's hub files carry no `num_heads`: the DINOv3 size of the width (7B/16 has 128-wide
    heads, the others 64-wide)."""
    from keras_vit.checkpoints.timm.timm_dinov3 import _num_heads

    assert _num_heads({}, {"architecture": "x"}, width, None, "f") == heads
