"""The options a checkpoint format can express and the record of one format.

`OPTIONS` names every option a model has that a file may or may not hold (pooling, head,
grid, the ViT-family switches, ...); `CheckpointFormat` is one row of
`keras_vit.checkpoints.format_table.FORMAT_TABLE`: how a format is recognised, its reader and
writer, and the values of each option its files hold. `ReadOptions` is what a reader may need
that a file does not say; `Probe` what detection saw.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

ANY = "any"
# The "distillation" value of a distillation token whose model has a head on the class token
# only (`distillation_head=False`, HF DeiTForImageClassification).
CLASS_HEAD_ONLY = "class head only"
# option -> (what it means, the values a model can take). Values of "channels" are ints.
OPTIONS = {
    "pooling": (
        "token: the class token; gap: mean of the tokens; patch_gap: mean of the patch "
        "tokens beside a class token; map: attention pooling",
    ),
    "final_norm": ("tokens: LayerNorm before pooling; pooled: timm's fc_norm after it",),
    "pre_logits": ("none; feature: dense+tanh, no head; under_head: dense+tanh then head",),
    "head": ("True: a classifier after the pooling; False: the pooled feature",),
    "grid": ("square or non-square patch grid",),
    "patch": ("square or non-square patches",),
    "channels": ("image channels (1, 3, 4, ...)",),
    "hybrid": ("False: a ViT; True: a ResNet stem (R50+B/16)",),
    "preprocessing": ("the input scaling the weights expect: [-1,1] or imagenet (mean/std)",),
    "layer_scale": ("LayerScale gammas on both residual branches of each block (DeiT III)",),
    "registers": ("the number of register tokens (DINOv2 -reg)",),
    "distillation": (
        "DeiT's distillation token: False none; True with its head_dist (or no head); "
        f"{CLASS_HEAD_ONLY!r} without head_dist, one head on the class token",
    ),
    "no_embed_class": ("a position table without the class row (timm no_embed_class)",),
    "norm_pre": ("a LayerNorm before the blocks (timm norm_pre, CLIP towers)",),
    "mlp_activation": (
        "the MLP's activation: gelu, quick_gelu (OpenAI CLIP) or swiglu (the gated MLP of "
        "DINOv3 H+/7B)",
    ),
    "resnet_groups": (
        "a hybrid's GroupNorm groups (None for a ViT); a file records none, and is read "
        "with the release's 32",
    ),
    "rope": ("DINOv3's rotary position embedding instead of a position table",),
    "qkv_bias": ("the attention projections with a bias: qkv, qv (no key bias) or none",),
}
# A file records no GroupNorm groups: its readers build a hybrid with the release's 32.
RELEASE_GROUPS = {"resnet_groups": (None, 32)}
# What a format that holds none of the ViT-family switches expresses of them.
PLAIN_FAMILY = {
    "layer_scale": (False,),
    "registers": (0,),
    "distillation": (False,),
    "no_embed_class": (False,),
    "norm_pre": (False,),
    "mlp_activation": ("gelu",),
    "rope": (False,),
    "qkv_bias": ("qkv",),
}
# A plain ViT writer (not DINOv3's layout) writes q, k and v biases.
ALL_QKV_BIASES = tuple(
    ({"rope": False, "qkv_bias": bias}, "only its DINOv3 layout has other q/k/v biases")
    for bias in ("qv", "none")
)
# What DINOv3's layouts (timm's Eva, HF DINOv3ViTModel) cannot hold: see `base.dinov3`.
DINOV3_PARTS = tuple(
    ({"rope": True, option: value}, "DINOv3's layout: class token, storage tokens, RoPE")
    for option, value in (
        ("pooling", "gap"),
        ("pooling", "map"),
        ("final_norm", "pooled"),
        ("pre_logits", "feature"),
        ("pre_logits", "under_head"),
        ("distillation", True),
        ("norm_pre", True),
    )
)


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """What a reader may need that a file does not always say.

    Attributes:
        num_heads: heads of a timm file (a state dict does not record them).
        no_embed_class: True/False for a timm class-token file that does not say.
        image_size: `(height, width)` of the model the file is loaded into (a hint for
            timm's `no_embed_class` only).
    """

    num_heads: int | None = None
    no_embed_class: bool | None = None
    image_size: tuple | None = None


@dataclasses.dataclass(frozen=True)
class Probe:
    """What detection saw: `container` ("zip", "safetensors" or "folder") and the member,
    tensor or file `names` in it."""

    container: str
    names: tuple


@dataclasses.dataclass(frozen=True)
class CheckpointFormat:
    """One checkpoint format.

    Attributes:
        name: the format's name ("npz", "big_vision", "hf", "timm", "keras").
        title: for messages and docs.
        recognised_by: how detection recognises it (prose, for docs).
        recognise: `Probe -> bool`.
        reader: `(path, ReadOptions) -> CheckpointContents`.
        writer: `(path, CheckpointContents) -> ...`, or None (read only, or written by a
            model's `save`: see `from_model`).
        suffix: the default file suffix ("" for a folder).
        expresses: `{option: values}` (`ANY` for every value) of the options in `OPTIONS`.
        reads: other things it holds, for docs: `{what: how}`.
        excludes: combinations it cannot hold although it holds each value:
            `({option: value, ...}, why)` pairs.
        from_model: written by a built model's own `save` (`.keras`), not from arrays.
    """

    name: str
    title: str
    recognised_by: str
    recognise: Callable[[Probe], bool]
    reader: Callable
    writer: Callable | None
    suffix: str
    expresses: dict
    reads: dict = dataclasses.field(default_factory=dict)
    excludes: tuple = ()
    from_model: bool = False

    @property
    def writable(self) -> bool:
        """True when `keras-vit convert` can write it (from arrays, or through a model)."""
        return self.writer is not None or self.from_model

    def can_express(self, option: str, value) -> bool:
        allowed = self.expresses.get(option, ANY)
        return allowed == ANY or value in allowed
