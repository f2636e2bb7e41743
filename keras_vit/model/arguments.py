"""The argument checks of the builder core (`keras_vit.model.builder.vision_transformer`), run
before any layer is built: sizes, rates and choices (`check_arguments`), the ViT-family
switches and how they combine (`FAMILY_DEFAULTS`, `check_family_arguments`), the class count
(`check_num_classes`), a stem's feature grid against the patch size and the dynamic image
size. Each raises a one-line ValueError naming the argument, its value and the rule.
"""

from __future__ import annotations

from keras_vit._validation import (
    check_choice,
    check_heads,
    check_positive_int,
    check_rate,
    to_pair,
)
from keras_vit.layers.attention import QKV_BIASES
from keras_vit.layers.layer_scale import check_layer_scale_init
from keras_vit.layers.position_embedding import POSITION_EMBEDDINGS
from keras_vit.layers.rotary import check_rope_head_dim
from keras_vit.spec import layer_names as names
from keras_vit.spec.configs import (
    CLASSIFIER_POOLINGS,
    MLP_ACTIVATIONS,
    SWIGLU,
    has_class_token,
)

FAMILY_DEFAULTS = {
    "layer_scale_init": None,
    "num_register_tokens": 0,
    "distilled": False,
    "distillation_head": True,
    "no_embed_class": False,
    "norm_pre": False,
    "mlp_activation": "gelu",
    "qkv_bias": "qkv",
}
"""The ViT-family switches (DeiT, DeiT III, DINOv2, CLIP towers, DINOv3) and their default values
(`distillation_head` only matters with `distilled=True`); see `keras_vit.ViT` for each."""


ONE_CLASS_HINT = (
    "num_classes=1 gives a single logit, whose softmax is 1.0 for every image. Spell a "
    "two-class task as num_classes=2 (softmax; what keras_vit's training, evaluation, "
    "predict and export handle), or, for one sigmoid output with a binary loss, build "
    "include_top=False and add keras.layers.Dense(1, activation='sigmoid') yourself "
    "(keras_vit's export and CLI serve softmax classifiers only)."
)


def check_num_classes(num_classes, include_top=True):
    """`num_classes`, a positive integer; at least 2 for a model with a head.

    Raises:
        ValueError: not a positive integer, or 1 with a head (`ONE_CLASS_HINT` names the two
            spellings that work).
    """
    check_positive_int("num_classes", num_classes)
    if include_top and num_classes == 1:
        raise ValueError(f"{ONE_CLASS_HINT} Received: num_classes=1")
    return num_classes


def check_arguments(
    *,
    patch_size,
    image_size,
    hidden_dim,
    num_heads,
    mlp_dim,
    num_layers,
    channels,
    num_classes,
    pooling,
    representation_size,
    include_top,
    return_sequence,
    position_embedding,
    dropout_rate,
    attention_dropout_rate,
    drop_path_rate,
    final_norm="tokens",
):
    """Checks the arguments every builder shares; returns `(patch, size)` as pairs.

    Raises:
        ValueError: naming the argument and the rule.
    """
    patch = to_pair("patch_size", patch_size)
    size = to_pair("image_size", image_size)
    for arg, value in (
        ("hidden_dim", hidden_dim),
        ("num_heads", num_heads),
        ("mlp_dim", mlp_dim),
        ("num_layers", num_layers),
        ("channels", channels),
    ):
        check_positive_int(arg, value)
    check_heads(hidden_dim, num_heads)
    check_num_classes(num_classes, include_top)
    check_choice("pooling", pooling, CLASSIFIER_POOLINGS)
    check_choice("position_embedding", position_embedding, POSITION_EMBEDDINGS)
    if position_embedding == "rope":
        check_rope_head_dim(hidden_dim // num_heads)
    check_choice("final_norm", final_norm, names.FINAL_NORMS)
    if final_norm == "pooled" and (pooling == "map" or return_sequence):
        raise ValueError(
            "final_norm='pooled' normalises the pooled feature (timm's fc_norm) and needs "
            "pooling 'token', 'gap' or 'patch_gap' and return_sequence=False. Received: "
            f"pooling={pooling!r}, return_sequence={return_sequence}"
        )
    if representation_size is not None:
        check_positive_int("representation_size", representation_size)
    if include_top and return_sequence:
        raise ValueError(
            "`return_sequence=True` returns the token sequence and needs include_top=False. "
            f"Received: include_top={include_top}, return_sequence={return_sequence}"
        )
    for name, value in (
        ("dropout_rate", dropout_rate),
        ("attention_dropout_rate", attention_dropout_rate),
        ("drop_path_rate", drop_path_rate),
    ):
        check_rate(name, value)
    return patch, size


def check_family_arguments(
    *,
    layer_scale_init,
    num_register_tokens,
    distilled,
    no_embed_class,
    norm_pre,
    mlp_activation,
    qkv_bias="qkv",
    distillation_head=True,
    pooling="token",
    representation_size=None,
    final_norm="tokens",
    position_embedding="learned",
    include_top=True,
):
    """Checks the ViT-family switches (`FAMILY_DEFAULTS`) and how they combine.

    Raises:
        ValueError: naming the argument and the rule: a LayerScale value that is not a
            positive number, a register count that is not an int >= 0, a switch that is not
            True/False, an unknown `mlp_activation`; `distilled` without pooling "token",
            with `final_norm="pooled"` or with `representation_size` under a head (DeiT's
            heads read the normalised tokens; only HF `DeiTModel`'s pooler, a feature
            model, has a dense + tanh); `distillation_head=False` without `distilled`;
            `no_embed_class` without a class token or a position table; registers or
            `mlp_activation="swiglu"` with pooling "map".
    """
    if layer_scale_init is not None:
        check_layer_scale_init(layer_scale_init)
    if (
        isinstance(num_register_tokens, bool)
        or not isinstance(num_register_tokens, int)
        or num_register_tokens < 0
    ):
        raise ValueError(
            "`num_register_tokens` must be an int >= 0. "
            f"Received: num_register_tokens={num_register_tokens!r}"
        )
    for name, value in (
        ("distilled", distilled),
        ("distillation_head", distillation_head),
        ("no_embed_class", no_embed_class),
        ("norm_pre", norm_pre),
    ):
        if not isinstance(value, bool):
            raise ValueError(f"`{name}` must be True or False. Received: {name}={value!r}")
    check_choice("mlp_activation", mlp_activation, MLP_ACTIVATIONS)
    check_choice("qkv_bias", qkv_bias, QKV_BIASES)
    rules = (
        (distilled and pooling != "token", "distilled=True needs pooling='token'"),
        (
            distilled and final_norm != "tokens",
            "distilled=True needs final_norm='tokens' (DeiT's heads read the normalised tokens)",
        ),
        (
            distilled and representation_size is not None and include_top,
            "distilled=True takes a representation_size only with include_top=False (HF "
            "DeiTModel's pooler: dense + tanh on the class token; DeiT's heads read the "
            "normalised tokens, with no pre_logits)",
        ),
        (
            not distillation_head and not distilled,
            "distillation_head=False drops the distillation token's head and needs distilled=True",
        ),
        (
            no_embed_class
            and (not has_class_token(pooling) or position_embedding in ("none", "rope")),
            "no_embed_class=True needs a class token (pooling 'token' or 'patch_gap') and a "
            "position table",
        ),
        (
            mlp_activation == SWIGLU and pooling == "map",
            "mlp_activation='swiglu' needs pooling 'token', 'gap' or 'patch_gap' (no source "
            "has a gated MLP in a MAP head)",
        ),
        (
            num_register_tokens and pooling == "map",
            "register tokens need pooling 'token' or 'gap' (no source pools them by MAP)",
        ),
    )
    for broken, rule in rules:
        if broken:
            raise ValueError(
                f"{rule}. Received: distilled={distilled}, "
                f"distillation_head={distillation_head}, no_embed_class={no_embed_class}, "
                f"num_register_tokens={num_register_tokens}, pooling={pooling!r}, "
                f"representation_size={representation_size}, final_norm={final_norm!r}, "
                f"position_embedding={position_embedding!r}, include_top={include_top}, "
                f"mlp_activation={mlp_activation!r}"
            )


def check_feature_grid(features, patch, size):
    grid = features.shape[1:3]
    if any(g is None or g % p for g, p in zip(grid, patch, strict=True)):
        raise ValueError(
            f"Image size {size} gives a CNN feature map of {tuple(grid)}, which is not "
            f"divisible by the patch size {patch} on the feature map. Pick an image size whose "
            "feature map is a multiple of the patch (for the release's ResNet the map is the "
            "image size divided by its total stride, rounded up at each stride)."
        )


def check_dynamic(dynamic, stem, position_embedding):
    if dynamic and stem is not None:
        raise ValueError("dynamic_image_size=True is for plain ViTs (stem=None).")
    if dynamic and position_embedding == "sincos2d":
        raise ValueError(
            "dynamic_image_size=True needs position_embedding 'learned', 'none' or 'rope'. "
            f"Received: position_embedding={position_embedding!r}"
        )
