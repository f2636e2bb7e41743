"""DINOv3 ViTs (Simeoni et al. 2025, arXiv:2508.10104): the named sizes and their options.

A DINOv3 ViT is a ViT with DINOv3's rotary position embedding (`position_embedding="rope"`,
no position table), 4 storage (register) tokens after the class token, LayerScale (1e-5),
exact-erf GELU, LayerNorm epsilon 1e-5 and, in timm's definitions
(`vit_small_patch16_dinov3` ... in timm/models/eva.py), no bias on the query, key and value
projections (timm's `*_dinov3_qkvb` definitions: query and value biases,
`qkv_bias="qv"`, as Hugging Face's `DINOv3ViTConfig` defaults). S/16, B/16 and L/16 build with
exactly timm's parameter counts. The H+/16 and 7B/16 sizes have a SwiGLU MLP (timm
`swiglu_mlp=True`, HF `use_gated_mlp=True`), which keras_vit's MLP does not have: they are
refused by name.
"""

from __future__ import annotations

from keras_vit.model.vit import ViT
from keras_vit.spec import configs

DINOV3_OPTIONS = dict(
    position_embedding="rope",
    num_register_tokens=4,
    layer_scale_init=1e-5,
    gelu_approximate=False,
    layer_norm_epsilon=1e-5,
    qkv_bias="none",
)
"""The options every DINOv3 ViT shares (timm's `vit_*_patch16_dinov3` model_args)."""

DINOV3_SIZES = {"S/16": "S/16", "B/16": "B/16", "L/16": "L/16"}
"""DINOv3 size -> the row of `keras_vit.spec.configs.VIT_CONFIGS` with its sizes."""

TIMM_NAMES = {
    "S/16": "vit_small_patch16_dinov3",
    "B/16": "vit_base_patch16_dinov3",
    "L/16": "vit_large_patch16_dinov3",
}
"""timm's model definition of each size built."""

DINOV3_UNBUILT = {
    "H+/16": "hidden 1280, 32 blocks, 20 heads and a SwiGLU MLP (timm "
    "vit_huge_plus_patch16_dinov3, swiglu_mlp=True)",
    "7B/16": "hidden 4096, 40 blocks, 32 heads and a SwiGLU MLP (timm vit_7b_patch16_dinov3, "
    "swiglu_mlp=True)",
}
"""The DINOv3 sizes keras_vit does not build, with what they need."""


def dinov3_kwargs(variant: str) -> dict:
    """The `keras_vit.ViT` arguments of a DINOv3 size ("S/16", "B/16", "L/16").

    Raises:
        ValueError: "H+/16" or "7B/16" (a SwiGLU MLP, named) or an unknown size.
    """
    if variant in DINOV3_UNBUILT:
        raise ValueError(
            f"DINOv3 {variant} has {DINOV3_UNBUILT[variant]}; keras_vit's MLP is "
            "Dense-GELU-Dense, so this size is not built. Sizes built: "
            f"{sorted(DINOV3_SIZES)}."
        )
    if variant not in DINOV3_SIZES:
        raise ValueError(
            f"Unknown DINOv3 size {variant!r}. Known: {sorted(DINOV3_SIZES)} (built), "
            f"{sorted(DINOV3_UNBUILT)} (refused)."
        )
    return {**configs.get_config(DINOV3_SIZES[variant]).as_kwargs(), **DINOV3_OPTIONS}


def DINOv3(variant="B/16", num_classes=1000, image_size=224, **kwargs):
    """Builds a DINOv3 ViT of a named size ("S/16", "B/16" or "L/16") as `keras_vit.ViT`.

    Any `keras_vit.ViT` argument may be given and overrides the size's (e.g.
    `qkv_bias="qv"` for timm's `*_dinov3_qkvb` definitions and Hugging Face's layout,
    `include_top=False` for the backbone, `dynamic_image_size=True`). Default name
    "dinov3_" + the size ("dinov3_b16").

    Returns:
        A functional `keras.Model` with input `images`.

    Raises:
        ValueError: "H+/16" or "7B/16" (SwiGLU, refused by name), an unknown size, or a bad
            argument of `keras_vit.ViT`.
    """
    arguments = dict(dinov3_kwargs(variant), name="dinov3_" + variant.replace("/", "").lower())
    arguments.update(kwargs)
    return ViT(num_classes=num_classes, image_size=image_size, **arguments)


def _named(variant: str):
    def builder(num_classes=1000, image_size=224, **kwargs):
        return DINOv3(variant, num_classes=num_classes, image_size=image_size, **kwargs)

    name = "DINOv3_" + variant.replace("/", "")
    builder.__name__ = builder.__qualname__ = name
    builder.__doc__ = (
        f"DINOv3 {variant}: `keras_vit.model.dinov3.DINOv3({variant!r}, ...)`, timm's "
        f"`{TIMM_NAMES[variant]}`.\n\n"
        "Takes the arguments of `keras_vit.ViT`.\n"
    )
    return name, builder


NAMED_BUILDERS = dict(_named(v) for v in DINOV3_SIZES)
"""`DINOv3_S16`, `DINOv3_B16`, `DINOv3_L16`."""
globals().update(NAMED_BUILDERS)
