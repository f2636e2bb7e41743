"""The key layouts of the Hugging Face ViT family: ViT, DeiT, DINOv2, DINOv2 with registers.

One `HFLayout` per `config.json` `model_type` (transformers' `modeling_vit.py`,
`modeling_deit.py`, `modeling_dinov2.py`, `modeling_dinov2_with_registers.py`, in the key
names their hub files and `save_pretrained` use):

- "vit": `embeddings.cls_token`, blocks `encoder.layer.{i}.layernorm_before/after`,
  `intermediate.dense`, `output.dense`; `ViTForImageClassification` prefixes `vit.` and adds
  `classifier`.
- "deit": as "vit" plus `embeddings.distillation_token` (position table with 2 prefix rows);
  under `deit.`, `DeiTForImageClassificationWithTeacher` has `cls_classifier` (class token)
  and `distillation_classifier` (distillation token), logits their mean;
  `DeiTForImageClassification` one `classifier` on the class token (keras_vit's
  `distillation_head=False`); `DeiTModel` optionally `pooler.dense` (`DeiTPooler`: dense +
  `pooler_act` on token 0 of the final LayerNorm's output, keras_vit's `pre_logits`).
- "dinov2" / "dinov2_with_registers": blocks `norm1`, `norm2`, `mlp.fc1`, `mlp.fc2` and
  LayerScale `layer_scale1.lambda1` / `layer_scale2.lambda1`; `embeddings.mask_token` (1, D)
  (masked pre-training only: ignored when read, written as zeros);
  `embeddings.register_tokens` (1, R, D) after the class token, without position rows.
  `Dinov2Model`'s pooled output is the final LayerNorm's class token.

Every model type shares the attention keys `attention.attention.{query,key,value}` and
`attention.output.dense`, and the patch embedding `embeddings.patch_embeddings.projection`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from keras_vit.checkpoints.base import torch_layout as tl
from keras_vit.checkpoints.base.errors import CheckpointError

MODEL_TYPES = ("vit", "deit", "dinov2", "dinov2_with_registers")
LAYER_SCALE_1, LAYER_SCALE_3 = tl.LAYER_SCALE_ATTENTION, tl.LAYER_SCALE_MLP


@dataclasses.dataclass(frozen=True)
class HFLayout:
    """The keys of one Hugging Face model type.

    Attributes:
        model_type: config.json `model_type`.
        prefix: the base model's prefix in the classification models ("vit.", ...).
        norms, denses: `{HF sub-layer of a block: release sub-layer}`.
        scales: LayerScale `{HF key inside a block: release key inside the block}`.
        tokens: `{HF key: release key}` of the learned tokens besides the patches.
        ignored: keys read and dropped (mask tokens).
    """

    model_type: str
    prefix: str
    norms: dict
    denses: dict
    scales: dict = dataclasses.field(default_factory=dict)
    tokens: dict = dataclasses.field(default_factory=dict)
    ignored: tuple = ("embeddings.mask_token",)


_VIT_NORMS = {"layernorm_before": "LayerNorm_0", "layernorm_after": "LayerNorm_2"}
_VIT_DENSES = {"intermediate.dense": "Dense_0", "output.dense": "Dense_1"}
_DINO_NORMS = {"norm1": "LayerNorm_0", "norm2": "LayerNorm_2"}
_DINO_DENSES = {"mlp.fc1": "Dense_0", "mlp.fc2": "Dense_1"}
_DINO_SCALES = {"layer_scale1.lambda1": LAYER_SCALE_1, "layer_scale2.lambda1": LAYER_SCALE_3}
_CLS = {"embeddings.cls_token": "cls"}

LAYOUTS = {
    "vit": HFLayout("vit", "vit.", _VIT_NORMS, _VIT_DENSES, tokens=_CLS),
    "deit": HFLayout(
        "deit",
        "deit.",
        _VIT_NORMS,
        _VIT_DENSES,
        tokens={**_CLS, "embeddings.distillation_token": tl.DIST},
    ),
    "dinov2": HFLayout("dinov2", "dinov2.", _DINO_NORMS, _DINO_DENSES, _DINO_SCALES, _CLS),
    "dinov2_with_registers": HFLayout(
        "dinov2_with_registers",
        "dinov2_with_registers.",
        _DINO_NORMS,
        _DINO_DENSES,
        _DINO_SCALES,
        tokens={**_CLS, "embeddings.register_tokens": tl.REG},
    ),
}
# Head tensors of each model type's classification models: {HF layer: release layer}.
HEADS = {
    "vit": {"classifier": "head"},
    "deit": {"cls_classifier": "head", "distillation_classifier": "head_dist"},
    "dinov2": {},
    "dinov2_with_registers": {},
}
# DeiTForImageClassification's one head, on the class token (no `head_dist`).
CLASS_HEAD = {"classifier": "head"}


def heads_of(layout: HFLayout, arrays: dict) -> dict:
    """The `{HF layer: release layer}` heads `arrays` are written with: `CLASS_HEAD` for a
    DeiT without `head_dist` (DeiTForImageClassification), else `HEADS[model type]`."""
    if layout.model_type == "deit" and tl.HEAD_DIST + "kernel" not in arrays:
        return CLASS_HEAD
    return HEADS[layout.model_type]


def layout_of(config: dict, path) -> HFLayout:
    """The layout of a config.json (`model_type`, default "vit").

    Raises:
        CheckpointError: another model type, or a DINOv2 with a SwiGLU MLP
            (`use_swiglu_ffn=true`, DINOv2 giant), named.
    """
    model_type = config.get("model_type", "vit")
    if model_type not in LAYOUTS:
        raise CheckpointError(
            f"{path} describes model_type={model_type!r}; keras_vit reads {MODEL_TYPES} "
            "(ViT*, DeiT*, Dinov2Model, Dinov2WithRegistersModel)."
        )
    if config.get("use_swiglu_ffn"):
        raise CheckpointError(
            f"{path}: use_swiglu_ffn=true (a SwiGLU MLP, e.g. facebook/dinov2-giant); "
            "keras_vit's MLP is Dense-GELU-Dense."
        )
    return LAYOUTS[model_type]


def check_classifier(state: dict, layout: HFLayout, path) -> None:
    """Refuses the classifiers keras_vit's heads do not compute.

    `Dinov2ForImageClassification`'s head reads the class token concatenated with the mean
    of the patch tokens (2D inputs). (`DeiTForImageClassification`'s one `classifier` on
    the class token is read: `distillation_head=False`.)

    Raises:
        CheckpointError: naming the class; a DeiT with both `classifier` and
            `cls_classifier` (no transformers class has both).
    """
    if layout.model_type == "deit" and {"classifier.weight", "cls_classifier.weight"} <= set(state):
        raise CheckpointError(
            f"{path} has both `classifier` (DeiTForImageClassification) and `cls_classifier` "
            "(DeiTForImageClassificationWithTeacher); it is neither model."
        )
    if layout.model_type.startswith("dinov2") and "classifier.weight" in state:
        raise CheckpointError(
            f"{path} is a Dinov2ForImageClassification: its classifier reads the class token "
            "and the patch mean concatenated (2D inputs), which keras_vit's head does not; "
            "read the Dinov2Model (its backbone) instead."
        )


def writing_layout(arrays: dict) -> HFLayout:
    """The model type that holds release-style `arrays`: "deit" with a distillation token,
    "dinov2_with_registers" with register tokens, "dinov2" with LayerScale, else "vit".

    Raises:
        CheckpointError: what none of them holds (named): a pre-encoder LayerNorm
            (norm_pre), a distillation token with LayerScale or registers, a head on a
            DINOv2 (Dinov2Model has none), a pre_logits layer on a DINOv2.
    """
    if tl.NORM_PRE + "scale" in arrays:
        raise CheckpointError(
            "No Hugging Face ViT/DeiT/DINOv2 has a LayerNorm before the encoder (norm_pre, "
            "CLIP towers); write this model as timm or .keras."
        )
    scaled = any(key.endswith(LAYER_SCALE_1) for key in arrays)
    registers = tl.REG in arrays
    if tl.DIST in arrays:
        if scaled or registers:
            raise CheckpointError(
                "DeiT (the Hugging Face model with a distillation token) has no LayerScale "
                "and no register tokens; write this model as timm or .keras."
            )
        return LAYOUTS["deit"]
    if not (scaled or registers):
        return LAYOUTS["vit"]
    for key, what in (("head/kernel", "a head"), ("pre_logits/kernel", "a pre_logits layer")):
        if key in arrays:
            raise CheckpointError(
                f"Dinov2Model has no {what.split(' ', 1)[1]}; a DINOv2 (LayerScale or register "
                f"tokens) with {what} cannot be written in the Hugging Face layout. Drop it "
                "(include_top=False) or write the model as timm or .keras."
            )
    return LAYOUTS["dinov2_with_registers" if registers else "dinov2"]


def mlp_ratio(hidden: int, mlp: int) -> int | float:
    """DINOv2's `mlp_ratio` (its MLP width is `int(hidden * mlp_ratio)`): an int when whole
    (transformers 5's `Dinov2Config` takes only ints), else a float.

    Raises:
        CheckpointError: an MLP width that no ratio reproduces exactly.
    """
    ratio = mlp / hidden
    if int(hidden * ratio) != mlp:
        raise CheckpointError(
            f"DINOv2 sizes its MLP as int(hidden_size * mlp_ratio); {mlp} from {hidden} is "
            "not reproduced exactly."
        )
    return int(ratio) if ratio == int(ratio) else float(ratio)


def family_config(layout: HFLayout, arch, contents) -> dict:
    """The model-type-specific config.json fields of `layout` for `contents`."""
    arrays = contents.arrays
    if layout.model_type == "deit":
        name = "DeiTModel"
        if "head/kernel" in arrays:
            with_teacher = heads_of(layout, arrays) is not CLASS_HEAD
            name = "DeiTForImageClassification" + ("WithTeacher" if with_teacher else "")
        config = {"architectures": [name]}
        if "pre_logits/kernel" in arrays:
            config.update(pooler_output_size=int(arch.representation_size), pooler_act="tanh")
        return config
    if layout.model_type.startswith("dinov2"):
        registers = layout.model_type == "dinov2_with_registers"
        config = {
            "architectures": ["Dinov2WithRegistersModel" if registers else "Dinov2Model"],
            "mlp_ratio": mlp_ratio(arch.hidden_dim, arch.mlp_dim),
            "layerscale_value": 1.0,
            "drop_path_rate": 0.0,
            "use_swiglu_ffn": False,
        }
        if registers:
            config["num_register_tokens"] = int(arrays[tl.REG].shape[1])
        else:
            config["use_mask_token"] = True
        return config
    return {}


def extras_to_hf(layout: HFLayout, arrays: dict, depth: int, hidden: int) -> dict:
    """The model type's own tensors (tokens, LayerScale (ones where the model has none), mask
    token) in HF keys without the classification prefix."""
    out = {hf: arrays[release] for hf, release in layout.tokens.items() if release != "cls"}
    for i in range(depth):
        block = tl.BLOCK.format(i)
        for hf, release in layout.scales.items():
            scale = arrays.get(block + release)
            out[f"encoder.layer.{i}.{hf}"] = (
                np.ones((hidden,), np.float32) if scale is None else np.asarray(scale)
            )
    if layout.model_type.startswith("dinov2"):
        out["embeddings.mask_token"] = np.zeros((1, hidden), np.float32)
    return out
