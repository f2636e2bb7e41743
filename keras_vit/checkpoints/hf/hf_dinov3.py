"""Hugging Face `DINOv3ViTModel` folders (transformers' modeling_dinov3_vit.py,
`model_type` "dinov3_vit"), read into and written from the release layout (what they share
with timm's layout: `keras_vit.checkpoints.base.dinov3`).

Keys: `embeddings.cls_token`, `embeddings.register_tokens`, `embeddings.mask_token`
(pre-training only: ignored on read, written as zeros), `embeddings.patch_embeddings` (a
Conv2d), `model.layer.{i}.norm1`, `.attention.{q,k,v}_proj` (biases as config.json's
`query_bias`, `key_bias`, `value_bias`), `.attention.o_proj`, `.layer_scale1.lambda1`,
`.norm2`, `.mlp.up_proj`, `.mlp.down_proj`, `.layer_scale2.lambda1`, `norm`. With
`use_gated_mlp=true` (the H+/16 and 7B/16 sizes, `DINOv3ViTGatedMLP`) also `.mlp.gate_proj`:
`down_proj(silu(gate_proj(x)) * up_proj(x))`, keras_vit's `mlp_activation="swiglu"` (its
`hidden_act` must be "silu"); `intermediate_size` is the gated width, keras_vit's `mlp_dim`.
`DINOv3ViTModel` has no classification head: its `pooler_output` is the normalised class
token, keras_vit's `include_top=False` model with pooling "token".
"""

from __future__ import annotations

import os
import re

import numpy as np

from keras_vit.checkpoints.base import torch_layout as tl
from keras_vit.checkpoints.base.contents import CheckpointContents
from keras_vit.checkpoints.base.dinov3 import (
    EPSILON,
    LAYER_SCALES,
    NORMS,
    QKV,
    ROPE,
    check_dinov3_model,
)
from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.layers.rotary import ROPE_TEMPERATURE
from keras_vit.spec import layer_names as names
from keras_vit.spec.configs import SWIGLU

HF_MODEL_TYPE = "dinov3_vit"
DENSES = {"mlp.up_proj": "Dense_0", "mlp.down_proj": "Dense_1"}
GATED_DENSES = {"mlp.gate_proj": names.MLP_GATE, **DENSES}
SILU = ("silu", "swish")  # transformers' ACT2FN names of x * sigmoid(x)


def hf_dinov3_to_release(state: dict, num_heads: int, config: dict, path) -> dict:
    """A `DINOv3ViTModel` state dict in release keys.

    Raises:
        CheckpointError: a missing tensor, or tensors no release key covers.
    """
    used = set()

    def get(key):
        used.add(key)
        return tl.take(state, key, path)

    embed = "embeddings."
    out = {
        "embedding/kernel": tl.conv_to_kernel(get(embed + "patch_embeddings.weight")),
        "embedding/bias": get(embed + "patch_embeddings.bias"),
        "cls": get(embed + "cls_token"),
        tl.ENCODER_NORM + "scale": get("norm.weight"),
        tl.ENCODER_NORM + "bias": get("norm.bias"),
    }
    registers = get(embed + "register_tokens") if embed + "register_tokens" in state else None
    if registers is not None and registers.shape[1]:
        out[names.REGISTERS] = registers
    if embed + "mask_token" in state:
        get(embed + "mask_token")  # pre-training only
    prefix = "model.layer." if "model.layer.0.norm1.weight" in state else "layer."
    denses = GATED_DENSES if config.get("use_gated_mlp") else DENSES
    for i in range(tl.num_blocks(state, re.escape(prefix) + r"(\d+)\.")):
        hf, block = f"{prefix}{i}.", tl.BLOCK.format(i)
        attention = block + tl.ATTENTION
        out.update(tl.norms_and_mlp_from_torch(get, hf, block, NORMS, denses))
        for name in QKV:
            projection = f"{hf}attention.{name[0]}_proj."
            out[f"{attention}{name}/kernel"] = tl.head_kernel(get(projection + "weight"), num_heads)
            if projection + "bias" in state:
                out[f"{attention}{name}/bias"] = tl.head_bias(get(projection + "bias"), num_heads)
        out[attention + "out/kernel"] = tl.out_kernel(
            get(f"{hf}attention.o_proj.weight"), num_heads
        )
        out[attention + "out/bias"] = get(f"{hf}attention.o_proj.bias")
        for scale, release in zip(("layer_scale1", "layer_scale2"), LAYER_SCALES, strict=True):
            out[f"{block}{release}/scale"] = get(f"{hf}{scale}.lambda1")
    left = sorted(set(state) - used)
    if left:
        raise CheckpointError(
            f"{path} has tensors that are not part of a DINOv3ViTModel ({len(left)}): "
            f"{', '.join(left[:8])}{', ...' if len(left) > 8 else ''}"
        )
    return out


def check_hf_config(config: dict, path) -> None:
    """Refuses a `DINOv3ViTConfig` keras_vit does not build, by the field's name.

    Raises:
        CheckpointError: no projection or MLP biases, a `rope_theta` other than 100, a gated
            MLP whose `hidden_act` is not SiLU.
    """
    fixed = {"proj_bias": True, "mlp_bias": True}
    for field, value in fixed.items():
        if field in config and config[field] != value:
            raise CheckpointError(
                f"{path}: {field}={config[field]!r}; keras_vit's DINOv3 has {field}={value!r}."
            )
    gated_numerics(config, path)
    theta = config.get("rope_theta", ROPE_TEMPERATURE)
    if float(theta) != ROPE_TEMPERATURE:
        raise CheckpointError(
            f"{path}: rope_theta={theta!r}; keras_vit's DINOv3 RoPE has base {ROPE_TEMPERATURE}."
        )


def gated_numerics(config: dict, path) -> dict | None:
    """`{"mlp_activation": "swiglu", "gelu_approximate": False}` for a `DINOv3ViTConfig` with
    `use_gated_mlp=true`, None without.

    Raises:
        CheckpointError: a gated MLP whose `hidden_act` is not SiLU (keras_vit's gated MLP is
            SwiGLU only), named.
    """
    if not config.get("use_gated_mlp"):
        return None
    act = config.get("hidden_act", "gelu")
    if act not in SILU:
        raise CheckpointError(
            f"{path}: use_gated_mlp=true with hidden_act={act!r}; keras_vit's gated MLP is "
            f"SwiGLU (hidden_act 'silu')."
        )
    return {"mlp_activation": SWIGLU, "gelu_approximate": False}


def hf_qkv_bias(config: dict) -> str:
    """`qkv_bias` of a `DINOv3ViTConfig` (defaults: query and value bias, no key bias).

    Raises:
        CheckpointError: a combination keras_vit has no name for (only q/k/v all, q and v,
            or none).
    """
    flags = tuple(
        bool(config.get(f"{n}_bias", default))
        for n, default in (("query", True), ("key", False), ("value", True))
    )
    choices = {(True, True, True): "qkv", (True, False, True): "qv", (False, False, False): "none"}
    if flags not in choices:
        raise CheckpointError(
            f"query_bias, key_bias, value_bias = {flags}; keras_vit's attention has all three, "
            "query and value, or none."
        )
    return choices[flags]


def read_hf_dinov3(state, config, path, preprocessing, numerics) -> CheckpointContents:
    """A Hugging Face `DINOv3ViTModel` folder's contents (no head: a feature model);
    `numerics`: `gelu_approximate` and `mlp_activation` of its `hidden_act` (`hf_io`)."""
    check_hf_config(config, path)
    hf_qkv_bias(config)
    heads = int(config.get("num_attention_heads", 6))
    size = config.get("image_size", 224)
    image_size = tuple(size) if isinstance(size, (list, tuple)) else (int(size), int(size))
    return CheckpointContents(
        path=os.fspath(path),
        format="hf",
        arrays=hf_dinov3_to_release(state, heads, config, path),
        num_heads=heads,
        layer_norm_epsilon=float(config.get("layer_norm_eps", EPSILON)),
        preprocessing=preprocessing,
        image_size=image_size,
        position_embedding=ROPE,
        **numerics,
    )


def release_to_hf_dinov3(arrays: dict, hidden: int) -> dict:
    """Release-layout arrays -> a `DINOv3ViTModel` state dict (`mask_token` zeros)."""
    embed = "embeddings."
    registers = arrays.get(names.REGISTERS, np.zeros((1, 0, hidden), np.float32))
    out = {
        embed + "patch_embeddings.weight": tl.kernel_to_conv(arrays["embedding/kernel"]),
        embed + "patch_embeddings.bias": arrays["embedding/bias"],
        embed + "cls_token": arrays["cls"],
        embed + "register_tokens": registers,
        embed + "mask_token": np.zeros((1, 1, hidden), np.float32),
        "norm.weight": arrays[tl.ENCODER_NORM + "scale"],
        "norm.bias": arrays[tl.ENCODER_NORM + "bias"],
    }
    for i in range(tl.num_release_blocks(arrays)):
        hf, block = f"model.layer.{i}.", tl.BLOCK.format(i)
        attention = block + tl.ATTENTION
        gated = f"{block}{tl.MLP}{names.MLP_GATE}/kernel" in arrays
        denses = GATED_DENSES if gated else DENSES
        out.update(tl.norms_and_mlp_to_torch(arrays, hf, block, NORMS, denses))
        for name in QKV:
            projection = f"{hf}attention.{name[0]}_proj."
            out[projection + "weight"] = tl.flat_head_linear(arrays[f"{attention}{name}/kernel"])
            if f"{attention}{name}/bias" in arrays:
                out[projection + "bias"] = arrays[f"{attention}{name}/bias"].reshape(-1)
        out[f"{hf}attention.o_proj.weight"] = tl.flat_linear(arrays[attention + "out/kernel"])
        out[f"{hf}attention.o_proj.bias"] = arrays[attention + "out/bias"]
        for scale, release in zip(("layer_scale1", "layer_scale2"), LAYER_SCALES, strict=True):
            out[f"{hf}{scale}.lambda1"] = np.asarray(arrays[f"{block}{release}/scale"])
    return out


def hf_dinov3_config(contents: CheckpointContents, arch, hidden_act: str) -> dict:
    """The `config.json` of a `DINOv3ViTModel` holding `contents` (`arch`: its
    `Architecture`; `hidden_act`: transformers' name of its GELU; a gated MLP is written with
    `use_gated_mlp=true` and "silu").

    Raises:
        CheckpointError: a model `DINOv3ViTModel` cannot hold: a head (it has none), no
            LayerScale (it always has one), non-square patches, the mean of the patch tokens
            as its pooled output (`pooler_output` is the class token), or see
            `check_dinov3_model`.
    """
    check_dinov3_model(contents, "Hugging Face's DINOv3ViTModel")
    problems = [
        text
        for present, text in (
            ("head/kernel" in contents.arrays, "a classification head (write include_top=False)"),
            (not arch.layer_scale, "no LayerScale"),
            (arch.patch_size[0] != arch.patch_size[1], "non-square patches"),
            (
                contents.pooling == "patch_gap",
                "pooling='patch_gap' (its pooler_output is the class token)",
            ),
        )
        if present
    ]
    if problems:
        raise CheckpointError(
            f"Hugging Face's DINOv3ViTModel (no head, LayerScale) cannot hold "
            f"this model: {', '.join(problems)}. Write it as timm or keras."
        )
    size = contents.image_size or (224, 224)
    gated = arch.mlp_activation == SWIGLU
    return {
        "model_type": HF_MODEL_TYPE,
        "architectures": ["DINOv3ViTModel"],
        "hidden_size": arch.hidden_dim,
        "intermediate_size": arch.mlp_dim,
        "num_hidden_layers": arch.num_layers,
        "num_attention_heads": contents.num_heads,
        "num_channels": arch.channels,
        "patch_size": arch.patch_size[0],
        "image_size": int(size[0]) if size[0] == size[1] else [int(s) for s in size],
        "hidden_act": "silu" if gated else hidden_act,
        "layer_norm_eps": float(contents.layer_norm_epsilon),
        "rope_theta": ROPE_TEMPERATURE,
        "num_register_tokens": arch.num_register_tokens,
        "query_bias": arch.qkv_bias in ("qkv", "qv"),
        "key_bias": arch.qkv_bias == "qkv",
        "value_bias": arch.qkv_bias in ("qkv", "qv"),
        "proj_bias": True,
        "mlp_bias": True,
        "use_gated_mlp": gated,
        "layerscale_value": 1.0,
    }
