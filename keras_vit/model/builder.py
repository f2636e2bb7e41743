"""The one builder core of every keras_vit model: stem -> patch tokens -> encoder -> head.

`vision_transformer(stem=...)` checks every argument (before any layer is built), makes the
`images` input, runs the stem (None: the image itself, as in a plain ViT; or a function
mapping the symbolic images to a feature map, as the hybrid's ResNet), cuts the result into
patches (`embedding`), adds the class token and the position embedding chosen by
`position_embedding`, the Transformer blocks, the final LayerNorm, pooling (class token,
mean or big_vision's MAP head), optional pre-logits and the zero-initialised head; then
applies `weights`. In the spirit of
`keras.applications.ResNet(stack_fn)`: `keras_vit.ViT` and `keras_vit.HybridViT` only
choose the stem. Paper section 3.1 (eq. 1-4, "Hybrid Architecture"), appendix D.4 for
the position-embedding choices. The argument checks are in `keras_vit.model.arguments`, the
pooling and head in `keras_vit.model.head`.
"""

from __future__ import annotations

import keras

from keras_vit._validation import (
    check_divisible,
    check_positive_int,
)
from keras_vit.kernels import dispatch
from keras_vit.layers import (
    ClassToken,
    LearnedTokens,
    PatchEmbed,
    TransformerBlock,
)
from keras_vit.layers.dropout import Dropout
from keras_vit.layers.position_embedding import position_embedding_layer, rope_config
from keras_vit.model.arguments import (
    FAMILY_DEFAULTS,
    check_arguments,
    check_dynamic,
    check_family_arguments,
    check_feature_grid,
)
from keras_vit.model.head import HEAD_SWITCHES, classification_head
from keras_vit.model.image_model import ImageModel
from keras_vit.spec import layer_names as names
from keras_vit.spec.configs import has_class_token


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
    position_embedding="learned",
    grid_size=None,
    dynamic_grid=None,
    grid_images=None,
    final_norm="tokens",
    remat=False,
    **family,
):
    """The Transformer encoder on a symbolic patch-token sequence.

    Adds the prefix tokens and the position embedding (`embed_positions`), dropout, the
    optional `norm_pre` LayerNorm, `num_layers` blocks and the final LayerNorm
    (`encoder_norm`; with `final_norm="pooled"` none here: `classification_head` normalises
    the pooled feature instead). `position_embedding` is one of
    `keras_vit.layers.position_embedding.POSITION_EMBEDDINGS` ("sincos2d" needs the
    `grid_size` of the patches). `**family`: the switches of `FAMILY_DEFAULTS`.
    Stochastic depth grows linearly from 0 at the first block to `drop_path_rate` at the
    last. With `class_token_only=True` (token pooling only) the last block computes just the
    class token (and the distillation token when `head_dist` reads it; `TransformerBlock(
    num_output_tokens=...)`): the same pooled feature for ~7% fewer FLOPs in a 12-block model.

    With `dynamic_grid=(grid_size, patch_size)` the learned position table (stored for
    `grid_size`) is resized in the forward pass to the grid of `grid_images` (see
    `AddPositionEmbs(dynamic_image_size=True)`). With `position_embedding="rope"` every
    block's attention rotates the patch tokens' queries and keys (`rope_config`; the grid of
    `grid_images` when dynamic); the class, distillation and register tokens are not rotated.

    Returns:
        The symbolic `(batch, num_tokens, hidden_dim)` output of `encoder_norm` (of the last
        block with `final_norm="pooled"`), or `(batch, 1 or 2, hidden_dim)` with
        `class_token_only=True`.
    """
    family = {**FAMILY_DEFAULTS, **family}
    check_positive_int("num_layers", num_layers)
    if not isinstance(class_token_only, bool):
        raise ValueError(
            f"`class_token_only` must be True or False. Received: {class_token_only!r}"
        )
    if class_token_only and pooling != "token":
        raise ValueError(
            f"class_token_only=True needs pooling='token'. Received: pooling={pooling!r}"
        )
    x = embed_positions(
        tokens,
        class_token=has_class_token(pooling),
        position_embedding=position_embedding,
        grid_size=grid_size,
        dynamic_grid=dynamic_grid,
        grid_images=grid_images,
        distilled=family["distilled"],
        no_embed_class=family["no_embed_class"],
        num_register_tokens=family["num_register_tokens"],
    )
    x = Dropout(dropout_rate, name="dropout")(x)
    if family["norm_pre"]:
        x = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name=names.NORM_PRE)(x)
    block_kwargs = dict(
        num_heads=num_heads,
        mlp_dim=mlp_dim,
        dropout_rate=dropout_rate,
        attention_dropout_rate=attention_dropout_rate,
        layer_norm_epsilon=layer_norm_epsilon,
        gelu_approximate=gelu_approximate,
        layer_scale_init=family["layer_scale_init"],
        mlp_activation=family["mlp_activation"],
        remat=remat,
        qkv_bias=family["qkv_bias"],
    )
    call_kwargs = {}
    if position_embedding == "rope":
        prefix = int(has_class_token(pooling)) + int(family["distilled"])
        block_kwargs["rope"] = rope_config(
            dynamic_grid[0] if dynamic_grid is not None else grid_size,
            prefix + family["num_register_tokens"],
            patch_size=dynamic_grid[1] if dynamic_grid is not None else None,
        )
        if dynamic_grid is not None:
            call_kwargs["images"] = grid_images
    dist_read = family["distilled"] and family["distillation_head"]
    last_tokens = (1 + int(dist_read)) if class_token_only else None
    for i in range(num_layers):
        x = TransformerBlock(
            **block_kwargs,
            drop_path_rate=drop_path_rate * i / max(num_layers - 1, 1),
            num_output_tokens=last_tokens if i == num_layers - 1 else None,
            name=names.block_name(i),
        )(x, **call_kwargs)
    if final_norm == "pooled":
        return x
    return keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name=names.ENCODER_NORM)(x)


def embed_positions(
    tokens,
    *,
    class_token,
    position_embedding,
    grid_size,
    dynamic_grid=None,
    grid_images=None,
    distilled=False,
    no_embed_class=False,
    num_register_tokens=0,
):
    """Patch tokens -> `[cls][dist][registers...][patches]` with the position embedding.

    The position table covers `[cls][dist][patches]`, or the patches only with
    `no_embed_class` (then the class and distillation tokens are added after it, timm
    vision_transformer.py `_pos_embed`); the register tokens are inserted after the class
    and distillation tokens last, with no position (HF `Dinov2WithRegistersEmbeddings`).
    """
    dynamic = dynamic_grid is not None
    rows = 0 if no_embed_class else int(class_token) + int(distilled)
    position = position_embedding_layer(
        position_embedding,
        dynamic_grid[0] if dynamic else grid_size,
        rows,
        names.POSITION_EMBEDDING,
        dynamic_image_size=dynamic,
        patch_size=dynamic_grid[1] if dynamic else None,
    )
    x = tokens if no_embed_class else _prepend(tokens, class_token, distilled)
    if position is not None:
        x = position(x, images=grid_images) if dynamic else position(x)
    if no_embed_class:
        x = _prepend(x, class_token, distilled)
    if num_register_tokens:
        x = LearnedTokens(
            num_register_tokens,
            insert_at=int(class_token) + int(distilled),
            weight_name=names.REGISTERS,
            name=names.REGISTERS,
        )(x)
    return x


def _prepend(tokens, class_token, distilled):
    """The class token, then DeiT's distillation token after it."""
    if class_token:
        tokens = ClassToken(name=names.CLASS_TOKEN)(tokens)
    if distilled:
        tokens = LearnedTokens(1, insert_at=1, weight_name=names.DIST_TOKEN, name=names.DIST_TOKEN)(
            tokens
        )
    return tokens


def _patch_tokens(stem, patch, size, *, channels, hidden_dim, input_preprocessing, dynamic):
    """The `images` input and its patch tokens: `(images, embed, tokens)`."""
    if stem is None:
        check_divisible(size, patch)
    images = keras.Input((None, None, channels) if dynamic else (*size, channels), name="images")
    features = images
    if stem is not None:
        features = stem(images)
        check_feature_grid(features, patch, size)
    embed = PatchEmbed(
        patch,
        hidden_dim,
        input_preprocessing=input_preprocessing,
        dynamic_image_size=dynamic,
        image_size=size if dynamic else None,
        name=names.EMBEDDING,
    )
    return images, embed, embed(features)


def vision_transformer(
    *,
    stem=None,
    patch_size,
    hidden_dim,
    num_heads,
    mlp_dim,
    num_layers,
    num_classes,
    image_size,
    channels,
    include_top,
    pooling,
    representation_size,
    dropout_rate,
    attention_dropout_rate,
    drop_path_rate,
    classifier_activation,
    gelu_approximate,
    layer_norm_epsilon,
    return_sequence,
    position_embedding,
    weights,
    name,
    input_preprocessing="[-1,1]",
    dynamic_image_size=False,
    final_norm="tokens",
    remat=False,
    **family,
):
    """Builds a ViT-family `keras.Model` around a stem (see the module docstring).

    Args:
        stem: None (patches of the image itself) or a function `stem(images) -> features`
            on the symbolic `(batch, height, width, channels)` images returning a feature map
            `(batch, h, w, c)` whose h and w divide by the patch size.
        **family: the ViT-family switches of `FAMILY_DEFAULTS` (`layer_scale_init`,
            `num_register_tokens`, `distilled`, `distillation_head`, `no_embed_class`,
            `norm_pre`, `mlp_activation`, `qkv_bias`), each off by default.
        The others: as in `keras_vit.ViT` (`dynamic_image_size` needs `stem=None`).

    Returns:
        A functional `keras.Model` with input `images`.

    Raises:
        ValueError: a bad argument (see `check_arguments`, `check_family_arguments`), an
            image or feature map not divisible by the patch, `dynamic_image_size=True` with
            a stem or with `position_embedding="sincos2d"`.
        TypeError: an unknown keyword argument.
    """
    unknown = sorted(set(family) - set(FAMILY_DEFAULTS))
    if unknown:
        raise TypeError(f"vision_transformer() got unexpected keyword arguments {unknown}")
    family = {**FAMILY_DEFAULTS, **family}
    patch, size = check_arguments(
        patch_size=patch_size,
        image_size=image_size,
        hidden_dim=hidden_dim,
        num_heads=num_heads,
        mlp_dim=mlp_dim,
        num_layers=num_layers,
        channels=channels,
        num_classes=num_classes,
        pooling=pooling,
        representation_size=representation_size,
        include_top=include_top,
        return_sequence=return_sequence,
        position_embedding=position_embedding,
        dropout_rate=dropout_rate,
        attention_dropout_rate=attention_dropout_rate,
        drop_path_rate=drop_path_rate,
        final_norm=final_norm,
    )
    check_family_arguments(
        **family,
        pooling=pooling,
        representation_size=representation_size,
        final_norm=final_norm,
        position_embedding=position_embedding,
        include_top=include_top,
    )
    check_dynamic(dynamic := bool(dynamic_image_size), stem, position_embedding)
    dispatch.prefer_memory_schedule(remat is True)  # before any layer computes (see there)
    if weights is not None and include_top and representation_size is None:
        from keras_vit.checkpoints.published.prediction_head import prediction_representation_size

        representation_size = prediction_representation_size(weights, num_classes, hidden_dim)
    images, embed, tokens = _patch_tokens(
        stem,
        patch,
        size,
        channels=channels,
        hidden_dim=hidden_dim,
        input_preprocessing=input_preprocessing,
        dynamic=dynamic,
    )
    numerics = dict(layer_norm_epsilon=layer_norm_epsilon, gelu_approximate=gelu_approximate)
    sequence = encode_tokens(
        tokens,
        num_heads=num_heads,
        mlp_dim=mlp_dim,
        num_layers=num_layers,
        pooling=pooling,
        dropout_rate=dropout_rate,
        attention_dropout_rate=attention_dropout_rate,
        drop_path_rate=drop_path_rate,
        class_token_only=pooling == "token" and not return_sequence,
        position_embedding=position_embedding,
        grid_size=embed.grid_size,
        dynamic_grid=((size[0] // patch[0], size[1] // patch[1]), patch) if dynamic else None,
        grid_images=images if dynamic else None,
        final_norm=final_norm,
        remat=remat,
        **numerics,
        **family,
    )
    outputs = classification_head(
        sequence,
        pooling=pooling,
        include_top=include_top,
        return_sequence=return_sequence,
        num_classes=num_classes,
        representation_size=representation_size,
        classifier_activation=classifier_activation,
        map_head=_map_head(num_heads, mlp_dim, family["mlp_activation"], numerics),
        final_norm=final_norm,
        layer_norm_epsilon=layer_norm_epsilon,
        **{switch: family[switch] for switch in HEAD_SWITCHES},
    )
    return _finish(ImageModel(images, outputs, name=name), weights)


def _map_head(num_heads, mlp_dim, activation, numerics) -> dict:
    """`MAPHead` arguments: the blocks' heads, MLP width, activation and numerics (timm's
    `AttentionPoolLatent` takes the model's `act_layer`; big_vision's MAP head its GELU)."""
    return {"num_heads": num_heads, "mlp_dim": mlp_dim, "activation": activation, **numerics}


def _finish(model, weights):
    """`model` with `weights` loaded (None: as initialised)."""
    if weights is not None:
        from keras_vit.checkpoints import load_weights_argument

        load_weights_argument(model, weights)
    return model


def named_builder(build, config, function_name: str, summary: str):
    """The thin shortcut (`ViT_B16`, `R50_B16`) for one row of the size table.

    Args:
        build: `keras_vit.ViT` or `keras_vit.HybridViT`.
        config: the row (`configs.ViTConfig` or `configs.HybridConfig`).
        function_name: the public name ("ViT_B16").
        summary: the first docstring line (sizes and source).
    """

    def builder(num_classes=1000, image_size=224, **kwargs):
        arguments = {**config.as_kwargs(), "name": function_name.lower(), **kwargs}
        return build(num_classes=num_classes, image_size=image_size, **arguments)

    builder.__name__ = builder.__qualname__ = function_name
    builder.__doc__ = (
        f"{summary} Default dropout_rate {config.dropout_rate} (the release's).\n\n"
        f"Takes the arguments of `keras_vit.{build.__name__}` (`num_classes`, `image_size`, "
        "`channels`, `include_top`, `pooling`, `representation_size`, `dropout_rate`, "
        "`attention_dropout_rate`, `drop_path_rate`, `classifier_activation`, "
        "`position_embedding`, `final_norm`, `weights`, `name`, ...); any architecture field "
        "may be overridden too.\n\n"
        "Returns:\n    A functional `keras.Model` with input `images` "
        "`(batch, height, width, channels)` in [-1, 1].\n"
    )
    return builder
