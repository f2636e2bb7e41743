"""Functional ViT builders: `ViT(...)` and the named variants (paper section 3.1, table 1)."""

from __future__ import annotations

import keras

from keras_vit import configs
from keras_vit import layer_names as names
from keras_vit._validation import (
    check_choice,
    check_divisible,
    check_positive_int,
    check_rate,
    to_pair,
)
from keras_vit.layers import (
    AddPositionEmbs,
    ClassToken,
    MAPHead,
    PatchEmbed,
    TokenPooling,
    TransformerBlock,
)
from keras_vit.layers.pooling import POOLING_MODES


def encode_tokens(
    tokens,
    *,
    num_heads,
    mlp_dim,
    num_layers,
    pooling="token",
    dropout_rate=0.0,
    attention_dropout_rate=0.0,
    drop_path_rate=0.0,
    layer_norm_epsilon=1e-6,
    gelu_approximate=True,
    class_token_only=False,
    dynamic_grid=None,
    grid_images=None,
):
    """The Transformer encoder on a symbolic patch-token sequence (shared by ViT and hybrids).

    Adds the class token (for "token" pooling), the position table, dropout, `num_layers`
    blocks and the final LayerNorm. Stochastic depth grows linearly from 0 at the first block
    to `drop_path_rate` at the last. With `class_token_only=True` (token pooling only) the
    last block computes just the class token (`TransformerBlock(num_output_tokens=1)`): the
    same pooled feature for ~7% fewer FLOPs in a 12-block model.

    With `dynamic_grid=(grid_size, patch_size)` the position table (stored for `grid_size`)
    is resized in the forward pass to the grid of `grid_images` (see `AddPositionEmbs`).

    Returns:
        The symbolic `(batch, num_tokens, hidden_dim)` output of `encoder_norm`, or
        `(batch, 1, hidden_dim)` with `class_token_only=True`.
    """
    check_positive_int("num_layers", num_layers)
    if not isinstance(class_token_only, bool):
        raise ValueError(
            f"`class_token_only` must be True or False. Received: {class_token_only!r}"
        )
    if class_token_only and pooling != "token":
        raise ValueError(
            f"class_token_only=True needs pooling='token'. Received: pooling={pooling!r}"
        )
    if pooling == "token":
        tokens = ClassToken(name=names.CLASS_TOKEN)(tokens)
    if dynamic_grid is None:
        x = AddPositionEmbs(name=names.POSITION_EMBEDDING)(tokens)
    else:
        x = AddPositionEmbs(
            dynamic_image_size=True,
            grid_size=dynamic_grid[0],
            patch_size=dynamic_grid[1],
            num_prefix_tokens=int(pooling == "token"),
            name=names.POSITION_EMBEDDING,
        )(tokens, images=grid_images)
    x = keras.layers.Dropout(dropout_rate, name="dropout")(x)
    for i in range(num_layers):
        rate = drop_path_rate * i / max(num_layers - 1, 1)
        x = TransformerBlock(
            num_heads=num_heads,
            mlp_dim=mlp_dim,
            dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate,
            drop_path_rate=rate,
            layer_norm_epsilon=layer_norm_epsilon,
            gelu_approximate=gelu_approximate,
            num_output_tokens=1 if class_token_only and i == num_layers - 1 else None,
            name=names.block_name(i),
        )(x)
    return keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name=names.ENCODER_NORM)(x)


def classification_head(
    sequence,
    *,
    pooling,
    include_top,
    return_sequence,
    num_classes,
    representation_size,
    classifier_activation,
    map_head=None,
):
    """Pooling, optional pre-logits (dense + tanh) and the zero-initialised head.

    `pooling="map"` pools with big_vision's MAP head (`MAPHead(**map_head)`).
    Returns the symbolic model output: the sequence, the pooled feature or the logits.
    """
    if return_sequence:
        return sequence
    if pooling == "map":
        x = MAPHead(**map_head, name=names.MAP_HEAD)(sequence)
    else:
        x = TokenPooling(pooling, name=names.POOL)(sequence)
    if representation_size is not None:
        x = keras.layers.Dense(representation_size, activation="tanh", name=names.PRE_LOGITS)(x)
    if not include_top:
        return x
    return keras.layers.Dense(
        num_classes,
        activation=classifier_activation,
        kernel_initializer="zeros",
        bias_initializer="zeros",
        dtype="float32",
        name=names.HEAD,
    )(x)


def transformer_model(
    images,
    tokens,
    *,
    name,
    weights,
    pooling,
    include_top,
    return_sequence,
    num_classes,
    representation_size,
    classifier_activation,
    **encoder_kwargs,
):
    """Encoder + head on symbolic patch tokens, as a `keras.Model` (shared by ViT and hybrids).

    `encoder_kwargs` go to `encode_tokens`; `weights` (None, a path or a published name) is
    loaded with `keras_vit.checkpoints.load_weights_argument`.
    """
    class_token_only = pooling == "token" and not return_sequence
    sequence = encode_tokens(
        tokens, pooling=pooling, class_token_only=class_token_only, **encoder_kwargs
    )
    outputs = classification_head(
        sequence,
        pooling=pooling,
        include_top=include_top,
        return_sequence=return_sequence,
        num_classes=num_classes,
        representation_size=representation_size,
        classifier_activation=classifier_activation,
        map_head={
            key: encoder_kwargs[key]
            for key in ("num_heads", "mlp_dim", "layer_norm_epsilon", "gelu_approximate")
            if key in encoder_kwargs
        },
    )
    model = keras.Model(images, outputs, name=name)
    if weights is not None:
        from keras_vit.checkpoints import load_weights_argument

        load_weights_argument(model, weights)
    return model


def validate_common(num_classes, pooling, representation_size, include_top, return_sequence, rates):
    """Checks the arguments shared by ViT and hybrid builders; raises ValueError."""
    check_positive_int("num_classes", num_classes)
    check_choice("pooling", pooling, (*POOLING_MODES, "map"))
    if representation_size is not None:
        check_positive_int("representation_size", representation_size)
    if include_top and return_sequence:
        raise ValueError(
            "`return_sequence=True` returns the token sequence and needs include_top=False. "
            f"Received: include_top={include_top}, return_sequence={return_sequence}"
        )
    for name, value in rates.items():
        check_rate(name, value)


def ViT(
    *,
    patch_size=16,
    hidden_dim=768,
    num_heads=12,
    mlp_dim=3072,
    num_layers=12,
    num_classes=1000,
    image_size=224,
    channels=3,
    include_top=True,
    pooling="token",
    representation_size=None,
    dropout_rate=0.0,
    attention_dropout_rate=0.0,
    drop_path_rate=0.0,
    classifier_activation=None,
    gelu_approximate=True,
    layer_norm_epsilon=1e-6,
    return_sequence=False,
    input_preprocessing="[-1,1]",
    dynamic_image_size=False,
    weights=None,
    name="vit",
):
    """Builds a Vision Transformer as a functional `keras.Model` (Dosovitskiy et al. 2021).

    Paper: https://arxiv.org/abs/2010.11929, section 3.1. Layer and weight names follow the
    official checkpoints, so `keras_vit.checkpoints.load_npz` maps them one to one.

    Args:
        patch_size: int or (height, width) of a patch in pixels.
        hidden_dim: token width D; divisible by `num_heads`.
        num_heads: attention heads per block.
        mlp_dim: inner MLP width.
        num_layers: Transformer blocks.
        num_classes: outputs of the head (default 1000).
        image_size: int or (height, width) in pixels; each a multiple of the patch size.
        channels: image channels (default 3).
        include_top: if False, the model returns the pooled feature `(batch, D)` (after
            `pre_logits` when `representation_size` is set) instead of logits.
        pooling: "token" (class token, default), "gap" (mean over tokens, no class token) or
            "map" (big_vision's multihead attention pooling, no class token).
        representation_size: width of the optional `pre_logits` dense + tanh layer (the
            ImageNet-21k checkpoints have it); None (default) for none, except that a
            `weights` file with pre_logits under a head of `num_classes` outputs (an original
            ImageNet-21k file with num_classes=21843) gets its pre_logits width, so the file
            is kept whole for prediction.
        dropout_rate, attention_dropout_rate: dropout rates in [0, 1).
        drop_path_rate: stochastic depth at the last block, rising linearly from 0.
        classifier_activation: activation of the head; None (default) returns logits.
        gelu_approximate: True (release, tanh) or False (exact erf, timm).
        layer_norm_epsilon: default 1e-6 as in the release.
        return_sequence: with include_top=False, return the `(batch, num_tokens, D)` output of
            the final LayerNorm instead of the pooled feature.
        input_preprocessing: the pixel scaling the weights expect, recorded in the model
            (its `embedding` layer) and applied by `predict`, `evaluate` and the SavedModel
            export: "[-1,1]" (default, the release's) or "imagenet" (ImageNet mean/std).
            The model itself never rescales its input.
        dynamic_image_size: if True, the model takes images of any size (each side a multiple
            of the patch) and resizes its position table, stored for `image_size`, to the
            input's grid in the forward pass (corner-aligned bilinear, the release's resize:
            equal to a model built at that size and loaded with the resized table), as
            timm's `dynamic_img_size` and Hugging Face's `interpolate_pos_encoding` offer.
            The input is then `(batch, None, None, channels)`. Default False.
        weights: None, a checkpoint path of any format keras_vit reads (`.npz`, `.keras`, a
            Hugging Face folder, a timm `.safetensors`), or a published checkpoint name
            (see `keras_vit.checkpoints`).
        name: model name.

    With `pooling="token"` and `return_sequence=False` only the class token of the last
    block's output is read, so that block computes only it (`num_output_tokens=1`: one
    query, keys and values from all tokens). The pooled feature and logits are unchanged;
    a 12-block model costs ~7% fewer FLOPs. The last block's output is then
    `(batch, 1, D)`; `return_sequence=True` or `keras_vit.feature_extractor` give every token.

    Inputs:
        `images`: `(batch, height, width, channels)` scaled to [-1, 1]
        (see `keras_vit.preprocess_inputs`); float64/float32/uint8 are accepted.

    Returns:
        A `keras.Model`. Logits `(batch, num_classes)` are float32 under every dtype policy.

    Raises:
        ValueError: image size not divisible by the patch, hidden_dim not divisible by
            num_heads, unknown pooling, non-positive sizes, rates outside [0, 1).
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
    if hidden_dim % num_heads:
        raise ValueError(
            f"hidden_dim must be divisible by num_heads. Received: hidden_dim={hidden_dim}, "
            f"num_heads={num_heads}"
        )
    check_divisible(size, patch)
    validate_common(
        num_classes,
        pooling,
        representation_size,
        include_top,
        return_sequence,
        {
            "dropout_rate": dropout_rate,
            "attention_dropout_rate": attention_dropout_rate,
            "drop_path_rate": drop_path_rate,
        },
    )

    if weights is not None and include_top and representation_size is None:
        from keras_vit.checkpoints.prediction_head import prediction_representation_size

        representation_size = prediction_representation_size(weights, num_classes, hidden_dim)
    dynamic = bool(dynamic_image_size)
    images = keras.Input((None, None, channels) if dynamic else (*size, channels), name="images")
    tokens = PatchEmbed(
        patch,
        hidden_dim,
        input_preprocessing=input_preprocessing,
        dynamic_image_size=dynamic,
        image_size=size if dynamic else None,
        name=names.EMBEDDING,
    )(images)
    grid = (size[0] // patch[0], size[1] // patch[1])
    return transformer_model(
        images,
        tokens,
        name=name,
        weights=weights,
        num_heads=num_heads,
        mlp_dim=mlp_dim,
        num_layers=num_layers,
        pooling=pooling,
        dropout_rate=dropout_rate,
        attention_dropout_rate=attention_dropout_rate,
        drop_path_rate=drop_path_rate,
        layer_norm_epsilon=layer_norm_epsilon,
        gelu_approximate=gelu_approximate,
        include_top=include_top,
        return_sequence=return_sequence,
        num_classes=num_classes,
        representation_size=representation_size,
        classifier_activation=classifier_activation,
        dynamic_grid=(grid, patch) if dynamic else None,
        grid_images=images if dynamic else None,
    )


def _named_builder(variant: str):
    """Makes the thin shortcut `ViT_B16` etc. for one row of `configs.VIT_CONFIGS`."""
    config = configs.get_config(variant)
    function_name = configs.builder_name(variant)

    def builder(num_classes=1000, image_size=224, **kwargs):
        arguments = {**config.as_kwargs(), "name": function_name.lower(), **kwargs}
        return ViT(num_classes=num_classes, image_size=image_size, **arguments)

    builder.__name__ = builder.__qualname__ = function_name
    builder.__doc__ = (
        f"ViT-{variant}: patch {config.patch_size}, hidden_dim {config.hidden_dim}, "
        f"mlp_dim {config.mlp_dim}, {config.num_heads} heads, {config.num_layers} layers "
        f"(paper table 1). Default dropout_rate {config.dropout_rate} (the release's).\n\n"
        "Takes the arguments of `keras_vit.ViT` (`num_classes`, `image_size`, `channels`, "
        "`include_top`, `pooling`, `representation_size`, `dropout_rate`, "
        "`attention_dropout_rate`, `drop_path_rate`, `classifier_activation`, `weights`, "
        "`name`, ...); any architecture field may be overridden too.\n\n"
        "Returns:\n    A functional `keras.Model` with input `images` "
        "`(batch, height, width, channels)` in [-1, 1].\n"
    )
    return builder


ViT_Ti16 = _named_builder("Ti/16")
ViT_S16 = _named_builder("S/16")
ViT_S32 = _named_builder("S/32")
ViT_B8 = _named_builder("B/8")
ViT_B16 = _named_builder("B/16")
ViT_B32 = _named_builder("B/32")
ViT_L16 = _named_builder("L/16")
ViT_L32 = _named_builder("L/32")
ViT_H14 = _named_builder("H/14")
