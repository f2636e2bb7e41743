"""What any checkpoint file gives keras_vit: the release-layout arrays plus what the file says.

Every format reader (`npz`, `hf`, `timm`, `keras`) returns a `CheckpointContents`, so loading,
building a model from a file and converting share one path whatever the source.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class CheckpointContents:
    """A checkpoint read into the release's layout (vit_jax/checkpoint.py).

    Attributes:
        path: the file or folder read.
        format: "npz", "hf", "timm" or "keras".
        arrays: `{release key: array}` (float32 unless the file stored float16/float64).
        num_heads: attention heads (HF: config.json; npz: the query kernel's shape; timm:
            the file's metadata, or the variant table; None if unknown).
        gelu_approximate: True for the tanh GELU (release, AugReg), False for exact erf
            (Hugging Face "gelu", timm).
        layer_norm_epsilon: LayerNorm epsilon the weights were trained with.
        preprocessing: the input scaling the weights expect: "[-1,1]" ((x - 127.5) / 127.5,
            the release's) or "imagenet" ((x / 255 - mean) / std with ImageNet's mean/std).
        image_size: (height, width) the file names (HF config.json), else None (then the
            position table's grid gives it).
        layout_steps: layout normalisations applied to the file (logged at INFO).
        no_embed_class: True when the position table has rows for the patch tokens only
            (timm `no_embed_class=True`: DeiT III, timm's register models); the class and
            distillation tokens then get no position. The arrays cannot say it (a table's
            row count fits both readings), so the reader records it.
        mlp_activation: the MLP's activation: "gelu" (its form as `gelu_approximate` says)
            or "quick_gelu" (x * sigmoid(1.702 x), OpenAI CLIP; timm `act_layer="quick_gelu"`).
        position_embedding: None (as the arrays say: a position table, or none) or "rope"
            (DINOv3's rotary embedding, no table: the timm and Hugging Face DINOv3 files,
            `keras_vit.checkpoints.timm.timm_dinov3`, `keras_vit.checkpoints.hf.hf_dinov3`, and
            models built with it).
        pooling: None (as the arrays say: "token" with a `cls` array, "gap" without, "map"
            with a MAP head) or "patch_gap" (a class token that is not pooled: the mean of
            the patch tokens past every prefix token, timm's `global_pool="avg"` of a
            class-token model), which the arrays cannot say, so the reader records it.
        resize_method: None (the caller's choice, default "bilinear") or the one position-table
            resize the source library runs at every grid, which loading at another grid
            then uses (a name of `keras_vit.spec.resize_methods`): "bilinear_antialias"
            for SigLIP 2's NaFlex tower (`keras_vit.checkpoints.hf.hf_siglip`).
        resnet_groups: a hybrid model's GroupNorm groups (`model_contents`); None when read
            from a file: no format but `.keras` records them, and a hybrid is built with the
            release's 32 (the writers refuse other counts, `format_table.refusal`).

    LayerScale, register tokens, the distillation token and `norm_pre` are seen from the
    keys (`Transformer/encoderblock_{i}/LayerScale_1/scale`, `reg`, `dist`,
    `Transformer/norm_pre/scale`; see `keras_vit.checkpoints.base.naming`).
    """

    path: str
    format: str
    arrays: dict
    num_heads: int | None = None
    gelu_approximate: bool = True
    layer_norm_epsilon: float = 1e-6
    preprocessing: str = "[-1,1]"
    image_size: tuple | None = None
    layout_steps: list = dataclasses.field(default_factory=list)
    no_embed_class: bool = False
    mlp_activation: str = "gelu"
    resnet_groups: int | None = None
    position_embedding: str | None = None
    pooling: str | None = None
    resize_method: str | None = None

    @property
    def numerics(self) -> dict:
        """`{"gelu_approximate": ..., "layer_norm_epsilon": ...}` as builder arguments, with
        `"mlp_activation"` too when it is not "gelu"."""
        numerics = {
            "gelu_approximate": self.gelu_approximate,
            "layer_norm_epsilon": self.layer_norm_epsilon,
        }
        if self.mlp_activation != "gelu":
            numerics["mlp_activation"] = self.mlp_activation
        return numerics
