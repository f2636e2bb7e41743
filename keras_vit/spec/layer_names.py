"""The names of a keras_vit model's layers and of the release's checkpoint keys, defined once.

Layer names mirror the official checkpoint (the release's ``vit_jax/models_vit.py`` and
``models_resnet.py``), so `keras_vit.checkpoints` maps variables to keys by rule. Builders,
checkpoint code, fine-tuning and run plans all spell them through this module.
"""

from __future__ import annotations

import re

EMBEDDING = "embedding"
CLASS_TOKEN = "cls"
# DeiT's distillation token (timm deit.py `dist_token`) and its head, and the register tokens
# (Darcet et al. 2024, DINOv2 "-reg"; timm `reg_token`): layers and release-style keys alike.
DIST_TOKEN = "dist"
REGISTERS = "reg"
HEAD_DIST = "head_dist"
POOL_DIST = "pool_dist"  # reads the distillation token (token 1) for `head_dist`
HEAD_MEAN = "head_mean"  # (head + head_dist) / 2, the logits of a distilled model
HEAD_ACTIVATION = "head_activation"  # a distilled model's classifier_activation on head_mean
# The layers whose output is a classifier's output, first found wins (export, finetune).
CLASSIFIER_OUTPUTS = (HEAD_ACTIVATION, HEAD_MEAN, "head")
# The LayerNorm after the position embedding, before the blocks (timm `norm_pre`, CLIP).
NORM_PRE = "norm_pre"
# LayerScale gammas inside each block (CaiT / DeiT III; timm `ls1`, `ls2`), named after the
# block sublayer they follow: the attention (`..._1`) and the MLP (`..._3`).
LAYER_SCALE_ATTENTION = "LayerScale_1"
LAYER_SCALE_MLP = "LayerScale_3"
POSITION_EMBEDDING = "posembed_input"
ENCODER_NORM = "encoder_norm"
# The LayerNorm after pooling that replaces `encoder_norm` in timm's `fc_norm` models
# (final_norm="pooled"); no release key, so keras_vit's files use the layer name.
POOLED_NORM = "fc_norm"
FINAL_NORMS = ("tokens", "pooled")
POOL = "pool"
MAP_HEAD = "MAPHead_0"
PRE_LOGITS = "pre_logits"
HEAD = "head"
# The layers whose output is the pooled representation (features for probes and the export),
# first found wins: the pre-logits dense, timm's fc_norm after pooling, the pooling itself.
FEATURE_LAYERS = (PRE_LOGITS, POOLED_NORM, POOL, MAP_HEAD)
ROOT_CONV = "conv_root"
ROOT_NORM = "gn_root"

BLOCK_PATTERN = r"encoderblock_(\d+)"
UNIT_PATTERN = r"block(\d+)_unit(\d+)"

# Keys of the release's flat `.npz` layout (joined with "/").
TRANSFORMER = "Transformer"
POSITION_KEY = f"{TRANSFORMER}/{POSITION_EMBEDDING}/pos_embedding"
BLOCK_KEY_PATTERN = rf"{TRANSFORMER}/{BLOCK_PATTERN}/"
QUERY_KERNEL = "MultiHeadDotProductAttention_1/query/kernel"
MLP_IN_KERNEL = "MlpBlock_3/Dense_0/kernel"
MLP_GATE = "Dense_gate"  # the gated (SwiGLU) MLP's gate projection, inside its MlpBlock
MLP_GATE_KERNEL = f"MlpBlock_3/{MLP_GATE}/kernel"
LAYER_SCALE_KEY = f"{LAYER_SCALE_ATTENTION}/scale"  # inside a block: block_key(i, ...)
NORM_PRE_KEY = f"{TRANSFORMER}/{NORM_PRE}/scale"
HEAD_DIST_KERNEL = f"{HEAD_DIST}/kernel"


def block_name(index: int) -> str:
    """The layer name of Transformer block `index` (0-based): "encoderblock_3"."""
    return f"encoderblock_{index}"


def unit_name(stage: int, unit: int) -> str:
    """The layer name of ResNet unit `unit` of stage `stage` (both 1-based): "block1_unit2"."""
    return f"block{stage}_unit{unit}"


def block_index(name: str) -> int | None:
    """3 for "encoderblock_3"; None for any other name."""
    match = re.fullmatch(BLOCK_PATTERN, name)
    return int(match[1]) if match else None


def block_key(index: int, inner: str = "") -> str:
    """The checkpoint key of block `index`'s variable `inner`:
    "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"."""
    return f"{TRANSFORMER}/{block_name(index)}/{inner}"
