"""Hugging Face SigLIP and SigLIP 2 image towers: `SiglipVisionModel` / `Siglip2VisionModel`.

A folder with `config.json` (`model_type` "siglip_vision_model" / "siglip2_vision_model", or
a whole "siglip" / "siglip2" model whose `vision_config` describes the tower) and
`model.safetensors`. Keys (transformers' `modeling_siglip.py` / `modeling_siglip2.py`;
under `vision_model.` in a whole model, beside its `text_model.*`, `logit_scale` and
`logit_bias`, which are left aside): `embeddings.patch_embedding` (SigLIP: a Conv2d
(D, C, P, P); SigLIP 2: a Linear (D, P * P * C) on patches flattened row, column, channel),
`embeddings.position_embedding.weight` (N, D), `encoder.layers.{i}.layer_norm1`,
`.self_attn.{q,k,v,out}_proj`, `.layer_norm2`, `.mlp.fc1/fc2`, `post_layernorm`, and the
attention-pooling head `head.probe` (1, 1, D), `head.attention.in_proj_{weight,bias}`
(q, k, v stacked), `head.attention.out_proj`, `head.layernorm`, `head.mlp.fc1/fc2`. The tower
is keras_vit's ViT with no class token, pooling "map" and no classifier; `hidden_act`
"gelu_pytorch_tanh" (both configs' default) is the tanh GELU.

The tensors are renamed to timm's SigLIP layout (`attn_pool.*`, fused qkv) and converted by
`timm_io`, so the two formats share one mapping to the release's keys.

SigLIP 2's `Siglip2VisionModel` is the NaFlex tower: it takes patches of any grid and resizes
its position table per image (bilinear, antialiased, padded to `max_num_patches`). keras_vit
reads it as a fixed-resolution tower at its own square grid (`sqrt(num_patches)` per side),
where that resize is the identity and the two models are equal. NaFlex's per-image variable
resolution is not built: a model built at another size resizes the table once with
keras_vit's `resize_method` (as for fine-tuning), which is not NaFlex's resize.
"""

from __future__ import annotations

import json
import logging
import math
import os

import numpy as np

from keras_vit.checkpoints.base import torch_layout as tl
from keras_vit.checkpoints.base.architecture import Architecture
from keras_vit.checkpoints.base.contents import CheckpointContents
from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.checkpoints.base.safetensors_io import read_safetensors, write_safetensors
from keras_vit.checkpoints.hf import hf_io
from keras_vit.checkpoints.hf.hf_files import CONFIG, PREPROCESSOR, WEIGHTS
from keras_vit.checkpoints.timm import timm_family, timm_io, timm_map

logger = logging.getLogger(__name__)

SIGLIP, SIGLIP2 = "siglip_vision_model", "siglip2_vision_model"
ARCHITECTURES = {SIGLIP: "SiglipVisionModel", SIGLIP2: "Siglip2VisionModel"}
# A whole model's type -> its image tower's.
WHOLE_MODELS = {"siglip": SIGLIP, "siglip2": SIGLIP2}
VISION = "vision_model."
# Tensors of a whole model that are not the image tower's.
OTHER_TOWERS = ("text_model.", "logit_scale", "logit_bias")
TANH_GELU = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")
# HF block sub-layer -> timm's.
BLOCK_NAMES = {
    "layer_norm1": "norm1",
    "layer_norm2": "norm2",
    "mlp.fc1": "mlp.fc1",
    "mlp.fc2": "mlp.fc2",
    "self_attn.out_proj": "attn.proj",
}
HEAD_NAMES = {
    "head.attention.out_proj": "attn_pool.proj",
    "head.layernorm": "attn_pool.norm",
    "head.mlp.fc1": "attn_pool.mlp.fc1",
    "head.mlp.fc2": "attn_pool.mlp.fc2",
}


def is_siglip(config: dict) -> bool:
    """True for a SigLIP / SigLIP 2 config.json (the tower's or a whole model's)."""
    return config.get("model_type") in (*ARCHITECTURES, *WHOLE_MODELS)


def tower_config(config: dict, path) -> tuple[str, dict]:
    """`(model type, vision config)` of a SigLIP config.json.

    Raises:
        CheckpointError: a whole model without a `vision_config` object, or a tower
            without its attention-pooling head (`vision_use_head=false`), named.
    """
    model_type = config.get("model_type")
    if model_type in WHOLE_MODELS:
        vision = config.get("vision_config")
        if not isinstance(vision, dict):
            raise CheckpointError(f"{path}: model_type={model_type!r} without a vision_config.")
        model_type, config = WHOLE_MODELS[model_type], vision
    if config.get("vision_use_head") is False:
        raise CheckpointError(
            f"{path}: vision_use_head=false (a SigLIP tower without its attention-pooling "
            "head, whose output is the token sequence); keras_vit reads the towers that pool "
            "with it."
        )
    return model_type, config


def gelu_approximate_of(config: dict, path) -> bool:
    """True for the tanh GELU (`hidden_act`, default "gelu_pytorch_tanh"), False for "gelu".

    Raises:
        CheckpointError: another activation, named.
    """
    act = config.get("hidden_act", "gelu_pytorch_tanh")
    if act not in (*TANH_GELU, "gelu"):
        raise CheckpointError(
            f"{path}: hidden_act={act!r}; keras_vit's SigLIP tower has 'gelu' or the tanh "
            f"forms {TANH_GELU}."
        )
    return act in TANH_GELU


def native_grid(model_type: str, config: dict, path) -> int:
    """Patches per side of the tower's position table.

    Raises:
        CheckpointError: a SigLIP 2 `num_patches` that is no square.
    """
    if model_type == SIGLIP:
        return int(config.get("image_size", 224)) // int(config.get("patch_size", 16))
    count = int(config.get("num_patches", 256))
    side = math.isqrt(count)
    if side * side != count:
        raise CheckpointError(f"{path}: num_patches={count} is not a square grid.")
    return side


def _tower_state(state: dict, path) -> dict:
    """The image tower's tensors without the `vision_model.` prefix."""
    if not any(key.startswith(VISION) for key in state):
        return state
    tower = {}
    for key, value in state.items():
        if key.startswith(VISION):
            tower[key[len(VISION) :]] = value
        elif not key.startswith(OTHER_TOWERS):
            raise CheckpointError(f"{path}: {key!r} is not part of a SigLIP model.")
    return tower


def _patch_from_hf(weight, model_type, patch, channels):
    """The patch embedding as a Conv2d weight (D, C, P, P)."""
    weight = np.asarray(weight)
    if model_type == SIGLIP:
        return weight
    return weight.reshape(weight.shape[0], patch, patch, channels).transpose(0, 3, 1, 2)


def hf_to_timm(state: dict, model_type: str, config: dict, path) -> dict:
    """A SigLIP tower's HF state dict as timm's SigLIP state dict (`attn_pool.*`).

    Raises:
        CheckpointError: a missing tensor, or tensors of neither tower, named.
    """
    state = dict(_tower_state(state, path))

    def take(key):
        return tl.take(state, key, path)

    patch, channels = int(config.get("patch_size", 16)), int(config.get("num_channels", 3))
    out = {
        "patch_embed.proj.weight": _patch_from_hf(
            take("embeddings.patch_embedding.weight"), model_type, patch, channels
        ),
        "patch_embed.proj.bias": take("embeddings.patch_embedding.bias"),
        "pos_embed": np.asarray(take("embeddings.position_embedding.weight"))[None],
        "norm.weight": take("post_layernorm.weight"),
        "norm.bias": take("post_layernorm.bias"),
        "attn_pool.latent": take("head.probe"),
    }
    depth = tl.num_blocks(state, r"encoder\.layers\.(\d+)\.")
    for i in range(depth):
        hf, timm = f"encoder.layers.{i}.", f"blocks.{i}."
        for leaf in ("weight", "bias"):
            for name, timm_name in BLOCK_NAMES.items():
                out[f"{timm}{timm_name}.{leaf}"] = take(f"{hf}{name}.{leaf}")
            out[f"{timm}attn.qkv.{leaf}"] = np.concatenate(
                [take(f"{hf}self_attn.{n}_proj.{leaf}") for n in "qkv"]
            )
    hidden = int(out["norm.weight"].shape[0])
    for leaf in ("weight", "bias"):
        fused = np.asarray(take(f"head.attention.in_proj_{leaf}"))
        out[f"attn_pool.q.{leaf}"], out[f"attn_pool.kv.{leaf}"] = fused[:hidden], fused[hidden:]
        for name, timm_name in HEAD_NAMES.items():
            out[f"{timm_name}.{leaf}"] = take(f"{name}.{leaf}")
    left = sorted(set(state) - _hf_keys(depth))
    if left:
        raise CheckpointError(
            f"{path} has tensors that are not part of a SigLIP image tower ({len(left)}): "
            f"{', '.join(left[:8])}{', ...' if len(left) > 8 else ''}"
        )
    return out


def _hf_keys(depth: int) -> set:
    """Every key of a SigLIP image tower of `depth` blocks."""
    keys = {
        "embeddings.position_embedding.weight",
        "head.probe",
        *(f"{name}.{leaf}" for name in ("embeddings.patch_embedding", "post_layernorm")
          for leaf in ("weight", "bias")),
        *(f"head.attention.in_proj_{leaf}" for leaf in ("weight", "bias")),
        *(f"{name}.{leaf}" for name in HEAD_NAMES for leaf in ("weight", "bias")),
    }  # fmt: skip
    for i in range(depth):
        names = [*BLOCK_NAMES, *(f"self_attn.{n}_proj" for n in "qkv")]
        keys.update(f"encoder.layers.{i}.{n}.{leaf}" for n in names for leaf in ("weight", "bias"))
    return keys


def timm_to_hf(state: dict, model_type: str) -> dict:
    """The inverse of `hf_to_timm` (a tower's own keys, no prefix)."""
    weight = np.asarray(state["patch_embed.proj.weight"])
    if model_type == SIGLIP2:
        weight = weight.transpose(0, 2, 3, 1).reshape(weight.shape[0], -1)
    out = {
        "embeddings.patch_embedding.weight": weight,
        "embeddings.patch_embedding.bias": state["patch_embed.proj.bias"],
        "embeddings.position_embedding.weight": np.asarray(state["pos_embed"])[0],
        "post_layernorm.weight": state["norm.weight"],
        "post_layernorm.bias": state["norm.bias"],
        "head.probe": state["attn_pool.latent"],
    }
    depth = tl.num_blocks(state, r"blocks\.(\d+)\.")
    hidden = int(np.shape(state["norm.weight"])[0])
    for i in range(depth):
        hf, timm = f"encoder.layers.{i}.", f"blocks.{i}."
        for leaf in ("weight", "bias"):
            for name, timm_name in BLOCK_NAMES.items():
                out[f"{hf}{name}.{leaf}"] = state[f"{timm}{timm_name}.{leaf}"]
            fused = np.asarray(state[f"{timm}attn.qkv.{leaf}"])
            for j, n in enumerate("qkv"):
                out[f"{hf}self_attn.{n}_proj.{leaf}"] = fused[j * hidden : (j + 1) * hidden]
    for leaf in ("weight", "bias"):
        out[f"head.attention.in_proj_{leaf}"] = np.concatenate(
            [state[f"attn_pool.q.{leaf}"], state[f"attn_pool.kv.{leaf}"]]
        )
        for name, timm_name in HEAD_NAMES.items():
            out[f"{name}.{leaf}"] = state[f"{timm_name}.{leaf}"]
    return out


def read_siglip(path, weights_path, state: dict, config: dict, preprocessing: str):
    """A SigLIP / SigLIP 2 image tower's folder as `CheckpointContents` (`format="hf"`).

    Args:
        path: the folder (or weights file) given.
        weights_path: the `model.safetensors` read, for messages.
        state: its tensors.
        config: its config.json.
        preprocessing: the input scaling of its preprocessor config.

    Raises:
        CheckpointError: see `tower_config`, `gelu_approximate_of`, `native_grid` and
            `hf_to_timm`.
    """
    model_type, vision = tower_config(config, path)
    timm_state = hf_to_timm(state, model_type, vision, weights_path)
    heads = int(vision.get("num_attention_heads", 12))
    arrays, _ = timm_io.timm_to_release(timm_state, heads, weights_path, no_embed_class=False)
    side = native_grid(model_type, vision, path) * int(vision.get("patch_size", 16))
    if model_type == SIGLIP2:
        logger.info(
            "%s: a Siglip2VisionModel (NaFlex) read as a fixed-resolution tower at %dx%d; "
            "NaFlex's per-image variable resolution is not built.",
            path,
            side,
            side,
        )
    return CheckpointContents(
        path=str(path),
        format="hf",
        arrays=arrays,
        num_heads=heads,
        gelu_approximate=gelu_approximate_of(vision, path),
        layer_norm_epsilon=float(vision.get("layer_norm_eps", 1e-6)),
        preprocessing=preprocessing,
        image_size=(side, side),
    )


def is_tower(arrays: dict) -> bool:
    """True for release arrays of a SigLIP-shaped tower: a MAP head and no class token."""
    return timm_map.MAP + "probe" in arrays and "cls" not in arrays


def siglip_state(contents: CheckpointContents, model_type: str = SIGLIP) -> dict:
    """The HF state dict of a SigLIP-shaped keras_vit model (`is_tower`).

    Raises:
        CheckpointError: a model the tower cannot hold (named): a classifier or pre-logits
            after the pooling, LayerScale, registers, `norm_pre`, a pooled LayerNorm, a
            hybrid, QuickGELU.
    """
    arrays = contents.arrays
    extras = {
        "head/kernel": "a classifier (SiglipVisionModel has none; build include_top=False)",
        "pre_logits/kernel": "a pre_logits layer",
        tl.POOLED_NORM + "scale": "a LayerNorm after pooling (fc_norm)",
        timm_family.NORM_PRE + "scale": "a LayerNorm before the blocks (norm_pre)",
        timm_family.REG: "register tokens",
        "conv_root/kernel": "a ResNet stem",
    }
    for key, what in extras.items():
        if key in arrays:
            raise CheckpointError(
                f"A Hugging Face SigLIP tower has no {what}; write this model as timm or .keras."
            )
    if any("LayerScale" in key for key in arrays):
        raise CheckpointError(
            "A Hugging Face SigLIP tower has no LayerScale; write this model as timm or .keras."
        )
    if contents.mlp_activation != "gelu":
        raise CheckpointError(
            f"A Hugging Face SigLIP tower's hidden_act is a GELU; this model's MLP runs "
            f"{contents.mlp_activation!r}. Write it as timm or .keras."
        )
    return timm_to_hf(timm_io.release_to_timm(arrays), model_type)


def siglip_config(contents: CheckpointContents, model_type: str = SIGLIP) -> dict:
    """The config.json of `contents` as a SigLIP (`model_type=SIGLIP`) or SigLIP 2 tower.

    Raises:
        CheckpointError: a non-square patch or grid.
    """
    arch = Architecture.from_arrays(contents.arrays)
    patch, grid = arch.patch_size, arch.grid
    if patch[0] != patch[1] or grid is None or grid[0] != grid[1]:
        raise CheckpointError(
            f"A Hugging Face SigLIP tower has square patches on a square grid; this model "
            f"has patch {patch} on grid {grid}."
        )
    config = {
        "architectures": [ARCHITECTURES[model_type]],
        "model_type": model_type,
        "hidden_size": arch.hidden_dim,
        "intermediate_size": arch.mlp_dim,
        "num_hidden_layers": arch.num_layers,
        "num_attention_heads": int(contents.num_heads),
        "num_channels": arch.channels,
        "patch_size": int(patch[0]),
        "hidden_act": "gelu_pytorch_tanh" if contents.gelu_approximate else "gelu",
        "layer_norm_eps": float(contents.layer_norm_epsilon),
        "attention_dropout": 0.0,
        "vision_use_head": True,
    }
    if model_type == SIGLIP2:
        config["num_patches"] = int(grid[0] * grid[1])
    else:
        config["image_size"] = int(grid[0] * patch[0])
    return config


def read_siglip_folder(path) -> CheckpointContents:
    """Reads a SigLIP / SigLIP 2 folder (or its `model.safetensors`): `read_siglip` on the
    folder's config.json, weights and preprocessor config.

    Raises:
        FileNotFoundError: no weights file.
        CheckpointError: no config.json, or see `read_siglip`.
    """
    folder, weights = hf_io._paths(path)
    config = hf_io._read_json(os.path.join(folder, CONFIG))
    if config is None:
        raise CheckpointError(f"{folder} has no {CONFIG}; a Hugging Face SigLIP tower needs it.")
    state, _ = read_safetensors(weights)
    return read_siglip(path, weights, state, config, hf_io._preprocessing(folder, config))


def is_siglip_folder(path) -> bool:
    """True when `path` (a folder or its weights file) has a SigLIP config.json."""
    folder, _ = hf_io._paths(path)
    config = hf_io._read_json(os.path.join(folder, CONFIG))
    return config is not None and is_siglip(config)


def write_siglip(folder, contents: CheckpointContents, model_type=SIGLIP) -> dict:
    """Writes a SigLIP-shaped model (MAP pooling, no class token, no classifier) as a Hugging
    Face `SiglipVisionModel` folder (`model_type=SIGLIP`, what the "hf" format writes for
    such a model) or a `Siglip2VisionModel` one (`SIGLIP2`), atomically.

    Returns:
        The `config.json` written.

    Raises:
        CheckpointError: a model the tower cannot hold (see `siglip_state`,
            `siglip_config`), or an unknown `model_type`.
    """
    if model_type not in ARCHITECTURES:
        raise CheckpointError(
            f"model_type must be one of {tuple(ARCHITECTURES)}. Received: {model_type!r}"
        )
    config = siglip_config(contents, model_type)
    state = siglip_state(contents, model_type)
    side = (state["embeddings.position_embedding.weight"].shape[0] ** 0.5) * config["patch_size"]
    processor = hf_io._preprocessor_config(
        contents, (int(side), int(side)), config["num_channels"], "SiglipImageProcessor"
    )
    with hf_io._atomic_folder(folder) as temporary:
        write_safetensors(os.path.join(temporary, WEIGHTS), state, metadata={"format": "pt"})
        for name, data in ((CONFIG, config), (PREPROCESSOR, processor)):
            with open(os.path.join(temporary, name), "w", encoding="utf-8") as stream:
                json.dump(data, stream, indent=2)
    logger.info("Wrote a Hugging Face %s to %s", config["architectures"][0], folder)
    return config
