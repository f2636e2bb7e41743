"""The ViT family's extra tensors and options in timm's layout: DeiT, DeiT III, DINOv2, CLIP.

timm builds them all from `VisionTransformer` (vision_transformer.py) and, for distilled DeiT,
`VisionTransformerDistilled` (deit.py). Beside the plain ViT's keys (see `timm_io`) they add:

- `dist_token` (1, 1, D) and `head_dist` (distilled DeiT; `pos_embed` then has 2 prefix rows
  unless `no_embed_class`) -> the release-style keys `dist`, `head_dist/{kernel,bias}`;
- `reg_token` (1, R, D) (DINOv2 "-reg", `reg_tokens=R`, always with `no_embed_class=True`:
  timm gives registers position rows otherwise) -> `reg`;
- `blocks.{i}.ls1.gamma` / `ls2.gamma` (LayerScale, `init_values`; DeiT III, DINOv2) ->
  `Transformer/encoderblock_{i}/LayerScale_1/scale` / `LayerScale_3/scale`;
- `norm_pre` (`pre_norm=True`, CLIP towers) -> `Transformer/norm_pre/{scale,bias}`.

The MLP activation and the LayerNorm epsilon are not in a state dict: they come from keras_vit's
metadata, the `config.json` beside the file (`architecture`, `model_args.act_layer`) or timm's
model definitions (`*_clip_*` towers: LayerNorm eps 1e-5; `*_clip_quickgelu_*`:
`act_layer="quick_gelu"`, x * sigmoid(1.702 x)).
"""

from __future__ import annotations

import logging

import numpy as np

from keras_vit.checkpoints.base import torch_layout as tl
from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.checkpoints.timm import timm_options

logger = logging.getLogger(__name__)

META = "keras_vit."
DIST, REG, HEAD_DIST, NORM_PRE = tl.DIST, tl.REG, tl.HEAD_DIST, tl.NORM_PRE
# timm sub-layer of a block -> the release-style LayerScale key inside the block.
LAYER_SCALES = {"ls1.gamma": tl.LAYER_SCALE_ATTENTION, "ls2.gamma": tl.LAYER_SCALE_MLP}
# Tensors of timm ViT variants keras_vit has no layer for, refused by name.
UNSUPPORTED = {
    "blocks.0.attn.q_norm.weight": "q/k normalisation (qk_norm=True)",
    "blocks.0.mlp.fc1_g.weight": "a SwiGLU MLP (mlp_layer=SwiGLU)",
    "blocks.0.mlp.norm.weight": "a LayerNorm inside the MLP (scale_mlp_norm=True)",
    "blocks.0.attn.norm.weight": "a LayerNorm inside the attention (scale_attn_norm=True)",
    "patch_embed.norm.weight": "a LayerNorm after the patch embedding (embed_norm_layer)",
}
# keras_vit's name of each timm `act_layer` it has.
ACTIVATIONS = {"gelu": "gelu", "quick_gelu": "quick_gelu"}
IGNORED = ("mask_token",)  # DINOv2's masked-token embedding (pre-training only)


def check_supported(state: dict, config: dict, path) -> None:
    """Refuses, by name, a timm ViT variant keras_vit does not build.

    Raises:
        CheckpointError: q/k norm, SwiGLU (also DINOv2 giant's packed one:
            `mlp.fc1` twice as wide as `mlp.fc2`'s input), extra norms; `mlp_layer` in the
            config's `model_args`.
    """
    for key, what in UNSUPPORTED.items():
        if key in state:
            raise CheckpointError(
                f"{path} is a timm ViT with {what} ({key!r}), which keras_vit's ViT does not have."
            )
    fc1, fc2 = state.get("blocks.0.mlp.fc1.weight"), state.get("blocks.0.mlp.fc2.weight")
    if fc1 is not None and fc2 is not None and fc1.shape[0] != fc2.shape[-1]:
        raise CheckpointError(
            f"{path} is a timm ViT with a gated (SwiGLU) MLP: blocks.0.mlp.fc1 has "
            f"{fc1.shape[0]} outputs for fc2's {fc2.shape[-1]} inputs (e.g. DINOv2 giant, "
            "vit_giant_patch14_dinov2, SwiGLUPacked); keras_vit's MLP is Dense-GELU-Dense."
        )
    mlp_layer = timm_options.model_args(config).get("mlp_layer")
    if mlp_layer is not None:
        raise CheckpointError(f"{path}: model_args.mlp_layer={mlp_layer!r} is not keras_vit's MLP.")


def extras_from_timm(get, state: dict, depth: int) -> dict:
    """The family's extra tensors of a timm state dict in release-style keys.

    Args:
        get: returns the tensor of a timm key (and records it as used).
        state: the state dict (to see which keys exist).
        depth: number of blocks.
    """
    out = {}
    if "dist_token" in state:
        out[DIST] = get("dist_token")
    if "reg_token" in state:
        out[REG] = get("reg_token")
    if "head_dist.weight" in state:
        out[HEAD_DIST + "kernel"] = tl.linear_to_kernel(get("head_dist.weight"))
        out[HEAD_DIST + "bias"] = get("head_dist.bias")
    if "norm_pre.weight" in state:
        out[NORM_PRE + "scale"] = get("norm_pre.weight")
        out[NORM_PRE + "bias"] = get("norm_pre.bias")
    for i in range(depth):
        for timm, release in LAYER_SCALES.items():
            if f"blocks.{i}.{timm}" in state:
                out[tl.BLOCK.format(i) + release] = get(f"blocks.{i}.{timm}")
    for key in IGNORED:
        if key in state:
            get(key)
    return out


def patch_bias(get, state: dict, path):
    """`patch_embed.proj.bias`, or zeros for timm's `pre_norm` models (CLIP towers), whose
    patch embedding has no bias (`PatchEmbed(bias=not pre_norm)`).

    Raises:
        CheckpointError: no bias in a model without `norm_pre`.
    """
    if "patch_embed.proj.bias" in state or "norm_pre.weight" not in state:
        return get("patch_embed.proj.bias")
    width = state["patch_embed.proj.weight"].shape[0]
    return np.zeros((width,), state["patch_embed.proj.weight"].dtype)


def drop_patch_bias(state: dict, arrays: dict) -> None:
    """Removes the patch-embedding bias of a `norm_pre` model from a timm state dict (timm's
    `pre_norm=True` builds its patch embedding without one).

    Raises:
        CheckpointError: a non-zero bias, which timm's layout would lose.
    """
    if NORM_PRE + "scale" not in arrays:
        return
    bias = state.pop("patch_embed.proj.bias")
    if np.any(np.asarray(bias) != 0):
        raise CheckpointError(
            "timm's pre_norm models (norm_pre, CLIP towers) have no patch-embedding bias; "
            "this model's is not zero, so timm's layout cannot hold it. Write it as .keras."
        )


def extras_to_timm(arrays: dict, depth: int) -> dict:
    """The inverse of `extras_from_timm`: `{timm key: tensor}` of the family's extras."""
    out = {}
    if DIST in arrays:
        out["dist_token"] = arrays[DIST]
    if REG in arrays:
        out["reg_token"] = arrays[REG]
    if HEAD_DIST + "kernel" in arrays:
        out["head_dist.weight"] = tl.kernel_to_linear(arrays[HEAD_DIST + "kernel"])
        out["head_dist.bias"] = arrays[HEAD_DIST + "bias"]
    if NORM_PRE + "scale" in arrays:
        out["norm_pre.weight"] = arrays[NORM_PRE + "scale"]
        out["norm_pre.bias"] = arrays[NORM_PRE + "bias"]
    for i in range(depth):
        for timm, release in LAYER_SCALES.items():
            if tl.BLOCK.format(i) + release in arrays:
                out[f"blocks.{i}.{timm}"] = np.asarray(arrays[tl.BLOCK.format(i) + release])
    return out


def class_rows(state: dict) -> int:
    """Rows the class and distillation tokens have in `pos_embed` when it has them."""
    return ("cls_token" in state) + ("dist_token" in state)


def check_registers(state: dict, no_embed_class: bool, path) -> None:
    """timm gives register tokens position rows unless `no_embed_class=True`, a layout
    keras_vit's registers (never in the position table) do not have.

    Raises:
        CheckpointError: a `reg_token` with `no_embed_class=False`.
    """
    if "reg_token" in state and not no_embed_class:
        raise CheckpointError(
            f"{path} has register tokens (reg_token) and no_embed_class=False: timm then gives "
            "the registers rows of pos_embed, which keras_vit's register tokens (never in the "
            "position table) do not have. timm's DINOv2 '-reg' models use no_embed_class=True."
        )


def mlp_activation_of(metadata: dict, config: dict, path) -> str:
    """keras_vit's MLP activation of a timm file: "gelu" or "quick_gelu".

    Sources, first that says: keras_vit's metadata, the config's `model_args.act_layer`, its
    `architecture` (timm's `*_quickgelu*` definitions set `act_layer="quick_gelu"`). timm runs
    the OpenAI CLIP weights of a non-quickgelu architecture (`vit_base_patch16_clip_224.openai`)
    with GELU, as does keras_vit reading them (a log line says the original used QuickGELU).

    Raises:
        CheckpointError: another `act_layer`, named.
    """
    if META + "mlp_activation" in metadata:
        return metadata[META + "mlp_activation"]
    act = timm_options.model_args(config).get("act_layer")
    architecture = str(config.get("architecture") or "")
    if act is None:
        if "quickgelu" in architecture:
            return "quick_gelu"
        tag = str((config.get("pretrained_cfg") or {}).get("tag") or "")
        if "_clip_" in architecture and tag.startswith("openai"):
            logger.info(
                "%s: OpenAI CLIP weights under timm's %s run with GELU, as timm runs them; the "
                "original model used QuickGELU (timm's *_clip_quickgelu_* architecture).",
                path,
                architecture,
            )
        return "gelu"
    if act not in ACTIVATIONS:
        raise CheckpointError(
            f"{path}: model_args.act_layer={act!r}; keras_vit's MLP has {sorted(ACTIVATIONS)}."
        )
    return ACTIVATIONS[act]


def layer_norm_epsilon_of(metadata: dict, config: dict) -> float:
    """LayerNorm epsilon: keras_vit's metadata, else 1e-5 for timm's CLIP towers (their
    `norm_layer=partial(LayerNorm, eps=1e-5)`), else timm's 1e-6."""
    if META + "layer_norm_epsilon" in metadata:
        return float(metadata[META + "layer_norm_epsilon"])
    if "_clip_" in str(config.get("architecture") or ""):
        return 1e-5
    return 1e-6
