"""Hybrid ResNet + ViT builders: `HybridViT(...)` and the named hybrids (paper section 3.1).

"As an alternative to raw image patches, the input sequence can be formed from feature maps
of a CNN" (paper section 3.1, "Hybrid Architecture"). The CNN is the release's BiT-style
ResNet (weight-standardised convs, GroupNorm; `keras_vit.layers.StdConv2D`,
`keras_vit.layers.BottleneckUnit`) or any Keras model that returns a feature map. The
Transformer part, pooling, head and arguments are those of `keras_vit.ViT`.
"""

from __future__ import annotations

import keras

from keras_vit._validation import check_positive_int, to_pair
from keras_vit.kernels import dispatch
from keras_vit.layers import BottleneckUnit, StdConv2D, ZeroPaddedMaxPool
from keras_vit.model.builder import named_builder, vision_transformer
from keras_vit.spec import configs
from keras_vit.spec import layer_names as names

ROOT_WIDTH = configs.RESNET_ROOT_WIDTH
GROUP_NORM_GROUPS = 32
GROUP_NORM_EPSILON = 1e-6
_STEM_ARGUMENTS = ("resnet_stages", "resnet_width", "resnet_groups", "backbone")


def resnet_features(images, *, stages, width=ROOT_WIDTH, groups=GROUP_NORM_GROUPS):
    """The release's BiT ResNet stem on a symbolic image tensor.

    Root: `conv_root` (StdConv2D 7x7/2) -> `gn_root` -> relu -> 3x3/2 max-pool (stride 4 in
    all, TF "SAME" padding), then stage s (1-based) of `stages[s - 1]` bottleneck units named
    `block{s}_unit{u}`, width `width * 2**(s - 1)`, output 4x that; the first unit of stages
    2+ has stride 2 (on conv2 and the projection).

    Returns:
        The symbolic feature map `(batch, height / 2**(s + 1), width / 2**(s + 1), channels)`
        for s stages (Keras' "same" rounding up at each stride).
    """
    x = StdConv2D(width, 7, strides=2, name=names.ROOT_CONV)(images)
    x = keras.layers.GroupNormalization(
        groups=groups, epsilon=GROUP_NORM_EPSILON, name=names.ROOT_NORM
    )(x)
    x = keras.layers.ReLU(name="relu_root")(x)
    x = _same_max_pool(x)
    for s, num_units in enumerate(stages, start=1):
        for u in range(1, num_units + 1):
            x = BottleneckUnit(
                width * 2 ** (s - 1),
                strides=2 if (s > 1 and u == 1) else 1,
                groups=groups,
                norm_epsilon=GROUP_NORM_EPSILON,
                name=names.unit_name(s, u),
            )(x)
    return x


def _same_max_pool(x, explicit=None):
    """The root's 3x3/2 max-pool with TF "SAME" padding: Keras' own, or with `explicit`
    (default: on PyTorch, `dispatch.pads_pools_explicitly`) `ZeroPaddedMaxPool`."""
    if not (dispatch.pads_pools_explicitly() if explicit is None else explicit):
        return keras.layers.MaxPooling2D(3, strides=2, padding="same", name="pool_root")(x)
    return ZeroPaddedMaxPool(3, strides=2, name="pool_root")(x)


def _check_stages(stages):
    if not isinstance(stages, (tuple, list)):
        raise ValueError(
            "`resnet_stages` must be a tuple of units per stage, e.g. (3, 4, 9). "
            f"Received: resnet_stages={stages!r}"
        )
    for depth in stages:
        check_positive_int("resnet_stages", depth)
    return tuple(int(d) for d in stages)


def _backbone_features(images, backbone, size, channels):
    if not isinstance(backbone, keras.Model):
        raise ValueError(
            "`backbone` must be a keras.Model that maps images to a feature map "
            f"(batch, height, width, channels). Received: backbone={backbone!r}"
        )
    expected = backbone.inputs[0].shape if backbone.inputs else None
    if expected is not None and len(expected) == 4:
        for got, want, what in zip(
            (*size, channels), expected[1:], ("height", "width", "channels"), strict=True
        ):
            if want is not None and got != want:
                raise ValueError(
                    f"The backbone expects inputs of shape {tuple(expected)} but the hybrid's "
                    f"images are {(None, *size, channels)} ({what} {got} != {want}). Pass a "
                    "matching `image_size`/`channels` or build the backbone with "
                    "input_shape=(None, None, channels)."
                )
    features = backbone(images)
    if len(features.shape) != 4:
        raise ValueError(
            "`backbone` must return a feature map (batch, height, width, channels). "
            f"Received output shape {tuple(features.shape)}."
        )
    return features


def HybridViT(
    *,
    resnet_stages=None,
    resnet_width=ROOT_WIDTH,
    resnet_groups=GROUP_NORM_GROUPS,
    backbone=None,
    patch_size=1,
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
    position_embedding="learned",
    final_norm="tokens",
    input_preprocessing="[-1,1]",
    remat=False,
    weights=None,
    name="hybrid_vit",
):
    """Builds a hybrid CNN + Vision Transformer as a functional `keras.Model`.

    Paper: https://arxiv.org/abs/2010.11929, section 3.1 "Hybrid Architecture". The CNN is
    either the release's BiT ResNet (`resnet_stages`; layer names `conv_root`, `gn_root`,
    `block{s}_unit{u}` mirror the official checkpoint, so `keras_vit.checkpoints.load_weights`
    maps them) or any `backbone` model returning a feature map. Its feature map is cut into
    `patch_size` patches by `embedding` (a `PatchEmbed`), and the tokens go through the same
    encoder, pooling and head as `keras_vit.ViT`. The token grid is read from the real
    feature-map shape, so any image size (square or not) whose map divides by the patch works:
    R50+B/16 gives 14x14 tokens at 224, 24x24 at 384, 20x14 at (320, 224).

    Args:
        resnet_stages: units per ResNet stage, e.g. (3, 4, 9) (R50+B/16); () keeps only the
            root (conv 7x7/2, GroupNorm, relu, max-pool 3x3/2). None (default) means (3, 4, 9)
            without a backbone. Not allowed together with `backbone`.
        resnet_width: root and first-stage width (64 in the release; stage s has
            `resnet_width * 2**(s - 1)` bottleneck channels, 4x that out).
        resnet_groups: GroupNorm groups (32 in the release); must divide `resnet_width`.
        backbone: a `keras.Model` mapping `(batch, H, W, channels)` images to a feature map
            `(batch, h, w, c)`, used instead of the built-in ResNet (e.g. a
            `keras.applications.ResNet50(include_top=False, weights=None)` cut at a named
            layer). It receives the model's `images` input as they are (in [-1, 1]); put any
            preprocessing it needs inside it. Its weights are not covered by `load_weights`.
        patch_size: int or (height, width) patch on the feature map. Default 1.
        hidden_dim, num_heads, mlp_dim, num_layers, gelu_approximate, layer_norm_epsilon:
            the Transformer, as in `keras_vit.ViT`.
        num_classes, image_size, channels, include_top, pooling, representation_size,
        dropout_rate, attention_dropout_rate, drop_path_rate, classifier_activation,
        return_sequence, position_embedding, final_norm, input_preprocessing, remat, weights,
        name:
        as in `keras_vit.ViT`.

    Inputs:
        `images`: `(batch, height, width, channels)` scaled to [-1, 1]
        (see `keras_vit.preprocess_inputs`).

    Returns:
        A `keras.Model`. Logits `(batch, num_classes)` are float32 under every dtype policy.

    Raises:
        ValueError: a feature map not divisible by the patch, `backbone` with
            `resnet_stages`, a backbone that is not a keras.Model or does not return a 4-D
            map, hidden_dim not divisible by num_heads, unknown pooling, non-positive sizes,
            rates outside [0, 1).
    """
    # Every argument but the stem's goes to the core, by name.
    arguments = {k: v for k, v in locals().items() if k not in _STEM_ARGUMENTS}
    for arg, value in (("resnet_width", resnet_width), ("resnet_groups", resnet_groups)):
        check_positive_int(arg, value)
    if resnet_width % resnet_groups:
        raise ValueError(
            "`resnet_width` must be divisible by `resnet_groups` (GroupNorm). "
            f"Received: resnet_width={resnet_width}, resnet_groups={resnet_groups}"
        )
    if backbone is not None and resnet_stages is not None:
        raise ValueError(
            "Pass either `backbone` (your own CNN) or `resnet_stages` (the built-in ResNet), "
            f"not both. Received: resnet_stages={resnet_stages!r}, backbone={backbone!r}"
        )
    if backbone is None:
        stages = _check_stages((3, 4, 9) if resnet_stages is None else resnet_stages)

        def stem(images):
            return resnet_features(images, stages=stages, width=resnet_width, groups=resnet_groups)

    else:

        def stem(images):
            size = to_pair("image_size", image_size)
            return _backbone_features(images, backbone, size, channels)

    return vision_transformer(stem=stem, **arguments)


def _named_hybrid(variant: str):
    """The thin shortcut `R50_B16` etc. for one row of `configs.HYBRID_CONFIGS`."""
    config = configs.get_hybrid_config(variant)
    arch = config.as_kwargs()
    stages = arch["resnet_stages"] or "none (root only)"
    summary = (
        f"{variant} hybrid: ResNet stages {stages}, patch {config.patch_size} on the feature "
        f"map, hidden_dim {arch['hidden_dim']}, mlp_dim {arch['mlp_dim']}, "
        f"{arch['num_heads']} heads, {arch['num_layers']} layers (paper section 3.1, "
        "official release)."
    )
    return named_builder(HybridViT, config, configs.builder_name(variant), summary)


NAMED_BUILDERS = {configs.builder_name(v): _named_hybrid(v) for v in configs.HYBRID_CONFIGS}
"""`R_Ti16`, `R26_S32`, `R26_B32`, `R50_B16`, `R50_L32`: one shortcut per row of
`configs.HYBRID_CONFIGS`, named by `configs.builder_name`."""
globals().update(NAMED_BUILDERS)
