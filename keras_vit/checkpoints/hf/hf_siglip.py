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

The blocks map to the release's keys with `base/torch_layout.py`; the head is renamed to the
PyTorch pool layout that timm's SigLIP towers share (`base/map_head.py`).

SigLIP 2's `Siglip2VisionModel` is the NaFlex tower: it takes the patches of each image's own
grid (`spatial_shapes`, padded to a common length with `pixel_attention_mask`) and resizes its
square position table to that grid (`resize_positional_embeddings`: PyTorch's bilinear
`F.interpolate` with `antialias=True`, `align_corners=False`, in float32). The contents record
that resize (`resize_method="bilinear_antialias"`), which `keras_vit.from_checkpoint` and
`keras_vit.load_weights` then use at another image size, so a keras_vit model built at
(H, W) equals `Siglip2VisionModel` on that image with `spatial_shapes` (H / P, W / P) and no
padding; another `resize_method` is refused (`loading.resize_method_for`). A keras_vit model
takes one image size per call, so the batch-level NaFlex features, images of different grids
padded into one batch and the processor's `max_num_patches` budget, have no counterpart: run
each grid as its own batch (`dynamic_image_size=True` resizes per call, the same way).
"""

from __future__ import annotations

import json
import logging
import math
import os

import numpy as np

from keras_vit.checkpoints.base import map_head
from keras_vit.checkpoints.base import torch_layout as tl
from keras_vit.checkpoints.base.architecture import Architecture
from keras_vit.checkpoints.base.contents import CheckpointContents
from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.checkpoints.base.safetensors_io import read_safetensors, write_safetensors
from keras_vit.checkpoints.hf import hf_io
from keras_vit.checkpoints.hf.hf_files import CONFIG, PREPROCESSOR, WEIGHTS

logger = logging.getLogger(__name__)

SIGLIP, SIGLIP2 = "siglip_vision_model", "siglip2_vision_model"
ARCHITECTURES = {SIGLIP: "SiglipVisionModel", SIGLIP2: "Siglip2VisionModel"}
# A whole model's type -> its image tower's.
WHOLE_MODELS = {"siglip": SIGLIP, "siglip2": SIGLIP2}
VISION = "vision_model."
# Tensors of a whole model that are not the image tower's.
OTHER_TOWERS = ("text_model.", "logit_scale", "logit_bias")
TANH_GELU = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")
# Siglip2VisionEmbeddings.resize_positional_embeddings, as named in keras_vit.spec.resize_methods
NAFLEX_RESIZE = "bilinear_antialias"
# HF block sub-layer -> the release's (LayerNorms, then the MLP's denses).
NORMS = {"layer_norm1": "LayerNorm_0", "layer_norm2": "LayerNorm_2"}
DENSES = {"mlp.fc1": "Dense_0", "mlp.fc2": "Dense_1"}
QKV = {"query": "q", "key": "k", "value": "v"}
# The pool's PyTorch sub-layer (`base/map_head.py`) -> HF's head sub-layer.
HEAD_NAMES = {
    "proj": "head.attention.out_proj",
    "norm": "head.layernorm",
    "mlp.fc1": "head.mlp.fc1",
    "mlp.fc2": "head.mlp.fc2",
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


def _pool_from_hf(get, hidden: int):
    """`get` of the pool's `attn_pool.*` keys (`base/map_head.py`) read from HF's `head.*`."""

    def pool(key):
        name = key[len(map_head.POOL) :]
        if name == "latent":
            return get("head.probe")
        sub, leaf = name.rsplit(".", 1)
        if sub in ("q", "kv"):
            fused = np.asarray(get(f"head.attention.in_proj_{leaf}"))
            return fused[:hidden] if sub == "q" else fused[hidden:]
        return get(f"{HEAD_NAMES[sub]}.{leaf}")

    return pool


def hf_to_release(state: dict, model_type: str, config: dict, heads: int, path) -> dict:
    """A SigLIP tower's HF state dict as release-layout arrays (with the `MAPHead_0/*`).

    Raises:
        CheckpointError: a missing tensor, or tensors of neither tower, named.
    """
    state = _tower_state(state, path)
    used = set()

    def get(key):
        used.add(key)
        return tl.take(state, key, path)

    patch, channels = int(config.get("patch_size", 16)), int(config.get("num_channels", 3))
    weight = _patch_from_hf(get("embeddings.patch_embedding.weight"), model_type, patch, channels)
    hidden = int(weight.shape[0])
    out = {
        "embedding/kernel": tl.conv_to_kernel(weight),
        "embedding/bias": get("embeddings.patch_embedding.bias"),
        tl.POSITION: np.asarray(get("embeddings.position_embedding.weight"))[None],
        tl.ENCODER_NORM + "scale": get("post_layernorm.weight"),
        tl.ENCODER_NORM + "bias": get("post_layernorm.bias"),
    }
    for i in range(tl.num_blocks(state, r"encoder\.layers\.(\d+)\.")):
        hf, block = f"encoder.layers.{i}.", tl.BLOCK.format(i)
        attention = block + tl.ATTENTION
        out.update(tl.norms_and_mlp_from_torch(get, hf, block, NORMS, DENSES))
        for name, letter in QKV.items():
            out[f"{attention}{name}/kernel"] = tl.head_kernel(
                get(f"{hf}self_attn.{letter}_proj.weight"), heads
            )
            out[f"{attention}{name}/bias"] = tl.head_bias(
                get(f"{hf}self_attn.{letter}_proj.bias"), heads
            )
        out[attention + "out/kernel"] = tl.out_kernel(get(f"{hf}self_attn.out_proj.weight"), heads)
        out[attention + "out/bias"] = get(f"{hf}self_attn.out_proj.bias")
    out.update(map_head.map_from_torch(_pool_from_hf(get, hidden), hidden, heads))
    left = sorted(set(state) - used)
    if left:
        raise CheckpointError(
            f"{path} has tensors that are not part of a SigLIP image tower ({len(left)}): "
            f"{', '.join(left[:8])}{', ...' if len(left) > 8 else ''}"
        )
    return out


def release_to_hf(arrays: dict, model_type: str) -> dict:
    """The inverse of `hf_to_release` (a tower's own keys, no prefix)."""
    weight = tl.kernel_to_conv(arrays["embedding/kernel"])
    if model_type == SIGLIP2:
        weight = weight.transpose(0, 2, 3, 1).reshape(weight.shape[0], -1)
    out = {
        "embeddings.patch_embedding.weight": weight,
        "embeddings.patch_embedding.bias": arrays["embedding/bias"],
        "embeddings.position_embedding.weight": np.asarray(arrays[tl.POSITION])[0],
        "post_layernorm.weight": arrays[tl.ENCODER_NORM + "scale"],
        "post_layernorm.bias": arrays[tl.ENCODER_NORM + "bias"],
    }
    for i in range(tl.num_release_blocks(arrays)):
        hf, block = f"encoder.layers.{i}.", tl.BLOCK.format(i)
        attention = block + tl.ATTENTION
        out.update(tl.norms_and_mlp_to_torch(arrays, hf, block, NORMS, DENSES))
        for name, letter in QKV.items():
            out[f"{hf}self_attn.{letter}_proj.weight"] = tl.flat_head_linear(
                arrays[f"{attention}{name}/kernel"]
            )
            out[f"{hf}self_attn.{letter}_proj.bias"] = np.asarray(
                arrays[f"{attention}{name}/bias"]
            ).reshape(-1)
        out[f"{hf}self_attn.out_proj.weight"] = tl.flat_linear(arrays[attention + "out/kernel"])
        out[f"{hf}self_attn.out_proj.bias"] = arrays[attention + "out/bias"]
    pool, prefix = map_head.map_to_torch(arrays), map_head.POOL
    out["head.probe"] = pool[prefix + "latent"]
    for leaf in ("weight", "bias"):
        out[f"head.attention.in_proj_{leaf}"] = np.concatenate(
            [pool[f"{prefix}q.{leaf}"], pool[f"{prefix}kv.{leaf}"]]
        )
        for sub, name in HEAD_NAMES.items():
            out[f"{name}.{leaf}"] = pool[f"{prefix}{sub}.{leaf}"]
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
            `hf_to_release`.
    """
    model_type, vision = tower_config(config, path)
    heads = int(vision.get("num_attention_heads", 12))
    arrays = hf_to_release(state, model_type, vision, heads, weights_path)
    side = native_grid(model_type, vision, path) * int(vision.get("patch_size", 16))
    resize_method = NAFLEX_RESIZE if model_type == SIGLIP2 else None
    if resize_method:
        logger.info(
            "%s: a Siglip2VisionModel (NaFlex), table %dx%d patches, resized to other grids "
            "with %r as transformers does.",
            path,
            side // int(vision.get("patch_size", 16)),
            side // int(vision.get("patch_size", 16)),
            resize_method,
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
        resize_method=resize_method,
    )


def is_tower(arrays: dict) -> bool:
    """True for release arrays of a SigLIP-shaped tower: a MAP head and no class token."""
    return map_head.has_map_head(arrays) and "cls" not in arrays


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
        tl.NORM_PRE + "scale": "a LayerNorm before the blocks (norm_pre)",
        tl.REG: "register tokens",
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
    return release_to_hf(arrays, model_type)


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
