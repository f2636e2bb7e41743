"""timm ViT state dicts in `.safetensors` (timm's `vision_transformer.py` layout).

Keys: `cls_token` (1, 1, D) for class-token models, `pos_embed` (1, [1 +] N, D),
`patch_embed.proj.{weight,bias}` (D, C, P, P), `blocks.{i}.norm1`, `.attn.qkv` (fused
(3D, D) weight, q then k then v), `.attn.proj`, `.norm2`, `.mlp.fc1`, `.mlp.fc2`, the final
`norm`, and the head as `head` or `head.fc`; older files have `pre_logits.fc` (the release's
representation layer). Global-average-pooling models without a class token
(`class_token=False, global_pool="avg", fc_norm=False`) map to the release's "gap" models;
with timm's default `fc_norm` (`norm` is then Identity and a LayerNorm `fc_norm` follows the
pooling) to keras_vit's `final_norm="pooled"` (key `fc_norm/scale`). Hybrids
(`vit_base_r50_s16_224`, `vit_small_r26_s32_224`, ...: `HybridEmbed` over a ResNetV2 with
`preact=False`) keep their ResNet under `patch_embed.backbone.` (`stem.conv`, `stem.norm`,
`stages.{s}.blocks.{u}.conv1-3/norm1-3`, `downsample.conv/norm`), mapped to the release's
`conv_root`, `gn_root`, `block{s+1}/unit{u+1}/conv1-3/gn1-3`, `conv_proj/gn_proj`; timm
standardises their conv weights with eps 1e-8 inside the square root and uses GroupNorm eps
1e-5, where the release (and keras_vit) use 1e-5 outside it and 1e-6.

The ViT family's extra tensors (distilled DeiT's `dist_token` / `head_dist`, DINOv2's
`reg_token`, LayerScale `ls1` / `ls2`, CLIP's `norm_pre`) and options (QuickGELU, CLIP's
LayerNorm eps) are mapped by `timm_family`; `no_embed_class` is recorded in the contents.
Attention pooling (`global_pool="map"`, `attn_pool.*`: SigLIP towers) is keras_vit's MAP
head (`timm_map`).

A state dict does not record the number of heads; it is taken from the file's metadata
(files keras_vit writes), a timm `config.json` beside the file, the variant table (by
width, MLP width and depth), or else head_dim 64 (every timm ViT but H/14). timm models use
LayerNorm eps 1e-6 and the GELU of their `act_layer` (default exact; "gelu_tanh" for the
SigLIP 2 towers: `timm_family.gelu_approximate_of`).
"""

from __future__ import annotations

import json
import logging
import os
import re

import numpy as np

from keras_vit.checkpoints.base import limits, map_head
from keras_vit.checkpoints.base import torch_layout as tl
from keras_vit.checkpoints.base.contents import CheckpointContents
from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.checkpoints.base.safetensors_io import read_safetensors, write_safetensors
from keras_vit.checkpoints.timm import timm_dinov3, timm_family, timm_map, timm_options
from keras_vit.spec import configs

logger = logging.getLogger(__name__)

META = "keras_vit."
NORMS = {"norm1": "LayerNorm_0", "norm2": "LayerNorm_2"}
DENSES = {"mlp.fc1": "Dense_0", "mlp.fc2": "Dense_1"}
HEAD_NAMES = ("head", "head.fc")
# timm's hybrids (vision_transformer_hybrid.py: `HybridEmbed` over a non-pre-activation
# `ResNetV2`, e.g. vit_base_r50_s16_224): the ResNet under `patch_embed.backbone.`, its
# sub-layers -> the release's (models_resnet.py) names.
BACKBONE = "patch_embed.backbone."
RESNET_LAYERS = {
    "conv1": "conv1",
    "norm1": "gn1",
    "conv2": "conv2",
    "norm2": "gn2",
    "conv3": "conv3",
    "norm3": "gn3",
    "downsample.conv": "conv_proj",
    "downsample.norm": "gn_proj",
}
TIMM_RESNET_KEY = re.compile(
    r"(?:stem\.(?P<stem>conv|norm)|stages\.(?P<stage>\d+)\.blocks\.(?P<unit>\d+)\."
    r"(?P<layer>conv[123]|norm[123]|downsample\.conv|downsample\.norm))\.(?P<leaf>weight|bias)"
)
RELEASE_RESNET_KEY = re.compile(
    r"(?:(?P<root>conv_root|gn_root)|block(?P<stage>\d+)/unit(?P<unit>\d+)/"
    r"(?P<layer>conv[123]|gn[123]|conv_proj|gn_proj))/(?P<leaf>kernel|scale|bias)"
)


def _sibling_config(path):
    config = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
    try:
        with open(config, encoding="utf-8") as stream:
            data = json.load(stream)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):  # a folder too: no config
        return {}
    return data if isinstance(data, dict) else {}


def _num_heads(hidden, mlp, depth, metadata, config) -> int:
    if META + "num_heads" in metadata:
        return int(metadata[META + "num_heads"])
    model_args = config.get("model_args") or {}
    if "num_heads" in model_args:
        return int(model_args["num_heads"])
    for variant in configs.VIT_CONFIGS.values():
        if (variant.hidden_dim, variant.mlp_dim, variant.num_layers) == (hidden, mlp, depth):
            return variant.num_heads
    if hidden % 64:
        raise CheckpointError(
            f"The number of heads of this timm file (width {hidden}) is unknown; pass num_heads=."
        )
    logger.warning(
        "The timm file does not record its number of heads; assuming head_dim 64 (%d heads).",
        hidden // 64,
    )
    return hidden // 64


def _preprocessing(metadata, config) -> str:
    if META + "preprocessing" in metadata:
        return metadata[META + "preprocessing"]
    pretrained = config.get("pretrained_cfg") or {}
    if "mean" in pretrained and "std" in pretrained:
        return tl.preprocessing_from_mean_std(pretrained["mean"], pretrained["std"])
    logger.info(
        "The timm file names no input mean/std; assuming [-1, 1] (AugReg). Pass "
        "preprocessing='imagenet' for ImageNet-normalised models."
    )
    return "[-1,1]"


def timm_to_release(
    state: dict,
    num_heads=None,
    path="checkpoint",
    metadata=None,
    config=None,
    no_embed_class=False,
):
    """Converts a timm ViT state dict (and the family's extras: `timm_family`) to release keys.

    `pos_embed` is kept as it is: with `no_embed_class=True` (DeiT III, DINOv2 "-reg": no
    class row) the arrays' table has patch rows only, which `CheckpointContents.no_embed_class`
    records; see `timm_options.no_embed_class_of` for where the choice comes from.

    Returns:
        `(arrays, num_heads)`.

    Raises:
        CheckpointError: a feature keras_vit's ViT lacks (named), a missing tensor, or
            tensors no release key covers.
    """
    timm_family.check_supported(state, config or {}, path)
    timm_family.check_registers(state, no_embed_class, path)
    used = set()

    def get(key):
        used.add(key)
        return tl.take(state, key, path)

    depth = tl.num_blocks(state, r"blocks\.(\d+)\.")
    hidden = int(get("patch_embed.proj.weight").shape[0])
    mlp = int(get("blocks.0.mlp.fc1.weight").shape[0])
    heads = num_heads or _num_heads(hidden, mlp, depth, metadata or {}, config or {})
    final_norm = tl.POOLED_NORM if "fc_norm.weight" in state else tl.ENCODER_NORM
    torch_norm = "fc_norm" if final_norm == tl.POOLED_NORM else "norm"
    out = {
        "embedding/kernel": tl.conv_to_kernel(get("patch_embed.proj.weight")),
        "embedding/bias": timm_family.patch_bias(get, state, path),
        final_norm + "scale": get(torch_norm + ".weight"),
        final_norm + "bias": get(torch_norm + ".bias"),
    }
    if "cls_token" in state:
        out["cls"] = get("cls_token")
    out[tl.POSITION] = get("pos_embed")
    out.update(timm_family.extras_from_timm(get, state, depth))
    for i in range(depth):
        timm, block = f"blocks.{i}.", tl.BLOCK.format(i)
        out.update(tl.norms_and_mlp_from_torch(get, timm, block, NORMS, DENSES))
        qkv = get(f"{timm}attn.qkv.weight")
        qkv_bias = get(f"{timm}attn.qkv.bias")
        for j, name in enumerate(("query", "key", "value")):
            rows = slice(j * hidden, (j + 1) * hidden)
            out[f"{block}{tl.ATTENTION}{name}/kernel"] = tl.head_kernel(qkv[rows], heads)
            out[f"{block}{tl.ATTENTION}{name}/bias"] = tl.head_bias(qkv_bias[rows], heads)
        out[f"{block}{tl.ATTENTION}out/kernel"] = tl.out_kernel(
            get(f"{timm}attn.proj.weight"), heads
        )
        out[f"{block}{tl.ATTENTION}out/bias"] = get(f"{timm}attn.proj.bias")
    for key in [k for k in state if k.startswith(BACKBONE)]:
        out.update(_resnet_to_release(key[len(BACKBONE) :], get(key), path))
    if timm_map.has_map(state):
        timm_map.check_map(state, path)
        out.update(map_head.map_from_torch(get, hidden, heads))
    if "pre_logits.fc.weight" in state:
        out["pre_logits/kernel"] = tl.linear_to_kernel(get("pre_logits.fc.weight"))
        out["pre_logits/bias"] = get("pre_logits.fc.bias")
    for head in HEAD_NAMES:
        if f"{head}.weight" in state:
            out["head/kernel"] = tl.linear_to_kernel(get(f"{head}.weight"))
            out["head/bias"] = get(f"{head}.bias")
    left = sorted(set(state) - used)
    if left:
        raise CheckpointError(
            f"{path} has tensors that are not part of a plain timm ViT ({len(left)}): "
            f"{', '.join(left[:8])}{', ...' if len(left) > 8 else ''}"
        )
    return out, heads


def _resnet_to_release(key: str, tensor, path) -> dict:
    """One tensor of timm's hybrid backbone (`key` without `patch_embed.backbone.`) as its
    release key: `stem.conv` -> `conv_root`, `stages.{s}.blocks.{u}.norm2` ->
    `block{s+1}/unit{u+1}/gn2`, `downsample.conv` -> `conv_proj`; convs (O, I, kh, kw) ->
    (kh, kw, I, O), norm weights -> `scale`.

    Raises:
        CheckpointError: a backbone tensor of another kind (e.g. a pre-activation ResNet's).
    """
    match = TIMM_RESNET_KEY.fullmatch(key)
    if match is None:
        raise CheckpointError(
            f"{path}: {BACKBONE}{key} is not part of the ResNet of timm's ViT hybrids "
            "(ResNetV2 with preact=False: stem.conv/norm, stages.*.blocks.*.conv1-3/norm1-3, "
            "downsample.conv/norm)."
        )
    if match["stem"]:
        layer = "conv_root" if match["stem"] == "conv" else "gn_root"
    else:
        unit = f"block{int(match['stage']) + 1}/unit{int(match['unit']) + 1}/"
        layer = unit + RESNET_LAYERS[match["layer"]]
    if layer.split("/")[-1].startswith("conv"):
        return {layer + "/kernel": tl.conv_to_kernel(tensor)}
    return {f"{layer}/{'scale' if match['leaf'] == 'weight' else 'bias'}": tensor}


def _resnet_to_timm(key: str, array) -> dict:
    """The inverse of `_resnet_to_release` for one release key; {} for a key of the ViT."""
    match = RELEASE_RESNET_KEY.fullmatch(key)
    if match is None:
        return {}
    if match["root"]:
        layer = "stem.conv" if match["root"] == "conv_root" else "stem.norm"
    else:
        timm_layer = {release: timm for timm, release in RESNET_LAYERS.items()}[match["layer"]]
        layer = f"stages.{int(match['stage']) - 1}.blocks.{int(match['unit']) - 1}.{timm_layer}"
    if match["leaf"] == "kernel":
        return {f"{BACKBONE}{layer}.weight": tl.kernel_to_conv(array)}
    leaf = "weight" if match["leaf"] == "scale" else "bias"
    return {f"{BACKBONE}{layer}.{leaf}": np.asarray(array).reshape(-1)}


def read_timm(path, num_heads=None, *, no_embed_class=None, image_size=None) -> CheckpointContents:
    """Reads a timm ViT `.safetensors` state dict into the release layout.

    The class token is the `cls_token` key; `global_pool` and `no_embed_class` come from
    the file's metadata or the `config.json` beside it (see `timm_options`).

    Args:
        path: the `.safetensors` file.
        num_heads: overrides the number of heads (which a state dict does not record).
        no_embed_class: True/False settles whether `pos_embed` has a class row when the file
            does not say; default None (read it from the file).
        image_size: `(height, width)` of the model the file is loaded into, used for
            `no_embed_class` only when the file names no image size.

    Raises:
        FileNotFoundError, CheckpointError: see `timm_to_release` and
            `timm_options.no_embed_class_of` / `check_global_pool`.
    """
    state, metadata = read_safetensors(path)
    config = _sibling_config(path)
    limits.check_timm_config(path, config, state, metadata)
    if timm_dinov3.is_timm_dinov3(state, metadata, config):
        return timm_dinov3.read_timm_dinov3(path, state, metadata, config, num_heads)
    timm_dinov3.check_timm_eva(state, path)
    class_token = "cls_token" in state
    timm_options.check_global_pool(metadata, config, class_token, path, timm_map.has_map(state))
    no_embed_class = _no_embed_class(state, metadata, config, no_embed_class, image_size, path)
    arrays, heads = timm_to_release(
        state, num_heads, path, metadata, config, no_embed_class=no_embed_class
    )
    return CheckpointContents(
        path=os.fspath(path),
        format="timm",
        arrays=arrays,
        num_heads=heads,
        gelu_approximate=timm_family.gelu_approximate_of(metadata, config, path),
        layer_norm_epsilon=timm_family.layer_norm_epsilon_of(metadata, config),
        preprocessing=_preprocessing(metadata, config),
        image_size=timm_options.image_size_of(metadata, config),
        no_embed_class=no_embed_class,
        mlp_activation=timm_family.mlp_activation_of(metadata, config, path),
    )


def _no_embed_class(state, metadata, config, given, image_size, path) -> bool:
    """Whether `pos_embed` lacks the class (and distillation) rows (`no_embed_class_of`);
    a file without a class token: True with register tokens (their only timm layout
    keras_vit holds), else False."""
    table, kernel = state.get("pos_embed"), state.get("patch_embed.proj.weight")
    if "cls_token" not in state or table is None or table.ndim != 3:
        return "reg_token" in state if given is None else bool(given)
    patch = None if kernel is None else tuple(int(s) for s in kernel.shape[2:])
    return timm_options.no_embed_class_of(
        int(table.shape[1]),
        patch,
        metadata,
        config,
        given=given,
        image_size=image_size,
        path=path,
        prefix=timm_family.class_rows(state),
        registers="reg_token" in state,
    )


def release_to_timm(arrays: dict) -> dict:
    """Release-layout arrays -> a timm ViT state dict (fused qkv, `head`, `pre_logits.fc`;
    `fc_norm` instead of `norm` for a model with final_norm="pooled")."""
    pooled = tl.POOLED_NORM + "scale" in arrays
    final_norm, torch_norm = (tl.POOLED_NORM, "fc_norm") if pooled else (tl.ENCODER_NORM, "norm")
    out = {
        "patch_embed.proj.weight": tl.kernel_to_conv(arrays["embedding/kernel"]),
        "patch_embed.proj.bias": arrays["embedding/bias"],
        "pos_embed": arrays[tl.POSITION],
        torch_norm + ".weight": arrays[final_norm + "scale"],
        torch_norm + ".bias": arrays[final_norm + "bias"],
    }
    if "cls" in arrays:
        out["cls_token"] = arrays["cls"]
    depth = tl.num_release_blocks(arrays)
    out.update(timm_family.extras_to_timm(arrays, depth))
    for i in range(depth):
        timm, block = f"blocks.{i}.", tl.BLOCK.format(i)
        out.update(tl.norms_and_mlp_to_torch(arrays, timm, block, NORMS, DENSES))
        names = ("query", "key", "value")
        attention = block + tl.ATTENTION
        out[f"{timm}attn.qkv.weight"] = np.concatenate(
            [tl.flat_head_linear(arrays[f"{attention}{n}/kernel"]) for n in names]
        )
        out[f"{timm}attn.qkv.bias"] = np.concatenate(
            [arrays[f"{attention}{n}/bias"].reshape(-1) for n in names]
        )
        out[f"{timm}attn.proj.weight"] = tl.flat_linear(arrays[attention + "out/kernel"])
        out[f"{timm}attn.proj.bias"] = arrays[attention + "out/bias"]
    out.update(map_head.map_to_torch(arrays))
    timm_family.drop_patch_bias(out, arrays)
    for key, array in arrays.items():
        out.update(_resnet_to_timm(key, array))
    if "pre_logits/kernel" in arrays:
        out["pre_logits.fc.weight"] = tl.kernel_to_linear(arrays["pre_logits/kernel"])
        out["pre_logits.fc.bias"] = arrays["pre_logits/bias"]
    if "head/kernel" in arrays:
        out["head.weight"] = tl.kernel_to_linear(arrays["head/kernel"])
        out["head.bias"] = arrays["head/bias"]
    return out


def write_timm(path, contents: CheckpointContents) -> dict:
    """Writes `contents` as a timm `.safetensors` state dict, atomically.

    The header metadata records the number of heads, the GELU form, the LayerNorm epsilon
    and the preprocessing (timm ignores it; keras_vit reads it back). A state dict does not
    record the activation: timm's model for a tanh-GELU file takes `act_layer="gelu_tanh"`
    (as timm's SigLIP 2 towers), one for a QuickGELU file `act_layer="quick_gelu"` (logged).

    A DINOv3 model (`position_embedding="rope"`) is written in timm's DINOv3 layout
    (`timm_dinov3.write_timm_dinov3`).

    Returns:
        `{timm key: shape}` of what was written.
    """
    if contents.position_embedding == timm_dinov3.ROPE:
        return timm_dinov3.write_timm_dinov3(path, contents)
    act_layer = timm_family.act_layer_of(contents.mlp_activation, contents.gelu_approximate)
    if act_layer != "gelu":
        logger.info(
            "This model's MLP activation is timm's act_layer=%r; build the timm model with it "
            "(timm's default is the exact GELU).",
            act_layer,
        )
    if "conv_root/kernel" in contents.arrays:
        logger.info(
            "timm's hybrids standardise conv weights with eps 1e-8 and use GroupNorm eps 1e-5 "
            "(keras_vit: the release's 1e-5 and 1e-6); their outputs differ slightly."
        )
    timm_family.check_registers(
        {"reg_token": 0} if timm_family.REG in contents.arrays else {},
        _no_class_rows(contents),
        "This model",
    )
    state = release_to_timm(contents.arrays)
    metadata = {
        "format": "pt",
        META + "num_heads": str(contents.num_heads),
        META + "gelu_approximate": "true" if contents.gelu_approximate else "false",
        META + "layer_norm_epsilon": repr(float(contents.layer_norm_epsilon)),
        META + "preprocessing": contents.preprocessing,
        META + "no_embed_class": "true" if _no_class_rows(contents) else "false",
        META + "mlp_activation": contents.mlp_activation,
        META + "global_pool": _global_pool(contents.arrays),
    }
    if contents.image_size is not None:
        metadata[META + "image_size"] = ",".join(str(int(s)) for s in contents.image_size)
    write_safetensors(path, state, metadata=metadata)
    return {key: tuple(value.shape) for key, value in state.items()}


def _global_pool(arrays) -> str:
    """timm's `global_pool` of release-layout arrays: "map" with a MAP head, "token" with a
    class token, else "avg"."""
    if map_head.has_map_head(arrays):
        return "map"
    return "token" if "cls" in arrays else "avg"


def _no_class_rows(contents) -> bool:
    """timm's `no_embed_class` of `contents`: its own, or True for a model without a class
    token that has register tokens (timm then gives the registers no position either)."""
    if "cls" not in contents.arrays:
        return timm_family.REG in contents.arrays
    return bool(contents.no_embed_class)
