"""DINOv3 ViTs (Simeoni et al. 2025, arXiv:2508.10104): the named sizes and their options.

A DINOv3 ViT is a ViT with DINOv3's rotary position embedding (`position_embedding="rope"`,
no position table), 4 storage (register) tokens after the class token, LayerScale (1e-5),
exact-erf GELU, LayerNorm epsilon 1e-5 and, in timm's definitions
(`vit_small_patch16_dinov3` ... in timm/models/eva.py), no bias on the query, key and value
projections (timm's `*_dinov3_qkvb` definitions: query and value biases,
`qkv_bias="qv"`, as Hugging Face's `DINOv3ViTConfig` defaults). The H+/16 and 7B/16 sizes have
a gated MLP (`mlp_activation="swiglu"`: timm `swiglu_mlp=True`, HF `use_gated_mlp=True` with
`hidden_act="silu"`), their sizes in `keras_vit.spec.configs.DINOV3_GATED_CONFIGS`. Every size
builds with exactly timm's parameter count.
"""

from __future__ import annotations

from keras_vit._validation import to_pair
from keras_vit.model.vit import ViT
from keras_vit.spec import configs
from keras_vit.spec.configs import PATCH_GAP, SWIGLU

DINOV3_OPTIONS = dict(
    position_embedding="rope",
    num_register_tokens=4,
    layer_scale_init=1e-5,
    gelu_approximate=False,
    layer_norm_epsilon=1e-5,
    qkv_bias="none",
)
"""The options every DINOv3 ViT shares (timm's `vit_*_patch16_dinov3` model_args)."""

DINOV3_SIZES = ("S/16", "B/16", "L/16", "H+/16", "7B/16")
"""The DINOv3 sizes: S/B/L from `keras_vit.spec.configs.VIT_CONFIGS`, H+ and 7B (gated MLP)
from `keras_vit.spec.configs.DINOV3_GATED_CONFIGS`."""

TIMM_NAMES = {
    "S/16": "vit_small_patch16_dinov3",
    "B/16": "vit_base_patch16_dinov3",
    "L/16": "vit_large_patch16_dinov3",
    "H+/16": "vit_huge_plus_patch16_dinov3",
    "7B/16": "vit_7b_patch16_dinov3",
}
"""timm's model definition of each size."""


def dinov3_kwargs(variant: str) -> dict:
    """The `keras_vit.ViT` arguments of a DINOv3 size ("S/16", "B/16", "L/16", "H+/16",
    "7B/16"; the last two with `mlp_activation="swiglu"`).

    Raises:
        ValueError: an unknown size, naming the known ones.
    """
    if variant not in DINOV3_SIZES:
        raise ValueError(f"Unknown DINOv3 size {variant!r}. Known: {list(DINOV3_SIZES)}.")
    gated = configs.DINOV3_GATED_CONFIGS.get(variant)
    if gated is None:
        return {**configs.get_config(variant).as_kwargs(), **DINOV3_OPTIONS}
    return {**gated.as_kwargs(), **DINOV3_OPTIONS, "mlp_activation": SWIGLU}


def DINOv3(variant="B/16", num_classes=1000, image_size=224, **kwargs):
    """Builds a DINOv3 ViT of a named size (`DINOV3_SIZES`) as `keras_vit.ViT`.

    Any `keras_vit.ViT` argument may be given and overrides the size's (e.g.
    `qkv_bias="qv"` for timm's `*_dinov3_qkvb` definitions and Hugging Face's layout,
    `include_top=False` for the backbone, `dynamic_image_size=True`). Default name
    "dinov3_" + the size ("dinov3_b16", "dinov3_hplus16"). 7B/16 holds 6.7e9 weights (27 GB
    in float32); count a size's parameters without building it with
    `keras_vit.model.dinov3.count_params`.

    Returns:
        A functional `keras.Model` with input `images`.

    Raises:
        ValueError: an unknown size, or a bad argument of `keras_vit.ViT`.
    """
    arguments = dict(dinov3_kwargs(variant), name="dinov3_" + _short(variant).lower())
    arguments.update(kwargs)
    return ViT(num_classes=num_classes, image_size=image_size, **arguments)


# Arguments that change no weight's shape (or that `count_params` reads itself).
_SHAPELESS = {
    "image_size",
    "dropout_rate",
    "attention_dropout_rate",
    "drop_path_rate",
    "classifier_activation",
    "gelu_approximate",
    "layer_norm_epsilon",
    "input_preprocessing",
    "dynamic_image_size",
    "remat",
    "name",
    "pooling",
    "position_embedding",
    "return_sequence",
}
_COUNTED = {
    "patch_size",
    "hidden_dim",
    "mlp_dim",
    "num_heads",
    "num_layers",
    "channels",
    "num_register_tokens",
    "layer_scale_init",
    "mlp_activation",
    "qkv_bias",
}


def count_params(variant="B/16", num_classes=1000, include_top=True, **kwargs) -> int:
    """The number of weights of `DINOv3(variant, num_classes, include_top=..., **kwargs)`,
    counted from the shapes alone, without building the model (7B/16: 6,720,127,976 with a
    1000-class head, 27 GB in float32).

    Per block: two LayerNorms (4D), q/k/v kernels (3D^2) and their biases ("qkv": 3D, "qv":
    2D, "none": 0), the output projection (D^2 + D), the MLP (`Dense_0` and `Dense_1`: 2DM +
    M + D; "swiglu" adds the gate, DM + M) and LayerScale (2D); once: the patch embedding
    (P_h P_w C D + D), the class and storage tokens ((1 + R) D), the final LayerNorm (2D) and
    the head (DK + K). RoPE has no weights.

    Args:
        variant, num_classes, include_top, **kwargs: as `DINOv3`.

    Raises:
        ValueError: an unknown size, a pooling other than "token" / "patch_gap", a position
            embedding other than "rope", or an argument that adds weights this count does not
            know (build the model and call `count_params()` then).
    """
    unknown = sorted(set(kwargs) - _SHAPELESS - _COUNTED)
    if unknown:
        raise ValueError(
            f"count_params counts DINOv3's weights; it does not count {unknown}. Build the "
            "model and call its count_params() instead."
        )
    arguments = {**dinov3_kwargs(variant), **kwargs}
    if arguments.get("pooling", "token") not in ("token", PATCH_GAP) or (
        arguments["position_embedding"] != "rope"
    ):
        raise ValueError(
            "count_params counts DINOv3 models (pooling 'token' or 'patch_gap', "
            "position_embedding 'rope'). Received: "
            f"pooling={arguments.get('pooling')!r}, "
            f"position_embedding={arguments['position_embedding']!r}"
        )
    width, mlp = arguments["hidden_dim"], arguments["mlp_dim"]
    patch = to_pair("patch_size", arguments["patch_size"])
    biases = {"qkv": 3, "qv": 2, "none": 0}[arguments["qkv_bias"]] * width
    projections = 3 if arguments.get("mlp_activation") == SWIGLU else 2
    block = (
        4 * width
        + 4 * width * width
        + biases
        + width
        + (projections - 1) * (width * mlp + mlp)
        + mlp * width
        + width
        + (2 * width if arguments.get("layer_scale_init") is not None else 0)
    )
    once = (
        patch[0] * patch[1] * arguments.get("channels", 3) * width
        + width
        + (1 + arguments.get("num_register_tokens", 0)) * width
        + 2 * width
    )
    head = width * num_classes + num_classes if include_top else 0
    return arguments["num_layers"] * block + once + head


def _named(variant: str):
    def builder(num_classes=1000, image_size=224, **kwargs):
        return DINOv3(variant, num_classes=num_classes, image_size=image_size, **kwargs)

    name = "DINOv3_" + _short(variant)
    builder.__name__ = builder.__qualname__ = name
    builder.__doc__ = (
        f"DINOv3 {variant}: `keras_vit.model.dinov3.DINOv3({variant!r}, ...)`, timm's "
        f"`{TIMM_NAMES[variant]}`.\n\n"
        "Takes the arguments of `keras_vit.ViT`.\n"
    )
    return name, builder


def _short(variant: str) -> str:
    """ "B16" for "B/16", "Hplus16" for "H+/16" (a Python name)."""
    return variant.replace("/", "").replace("+", "plus")


NAMED_BUILDERS = dict(_named(v) for v in DINOV3_SIZES)
"""`DINOv3_S16`, `DINOv3_B16`, `DINOv3_L16`, `DINOv3_Hplus16`, `DINOv3_7B16`."""
globals().update(NAMED_BUILDERS)
