"""The classification head of every keras_vit model (paper eq. 4): pooling of the encoder's
tokens (class token, mean or big_vision's MAP head), optional pre-logits, and the
zero-initialised D x K head (paper section 3.2); with a distillation token, DeiT's two heads
averaged at inference (`distilled_logits`).
"""

from __future__ import annotations

import keras

from keras_vit.layers import (
    MAPHead,
    TokenPooling,
)
from keras_vit.spec import layer_names as names
from keras_vit.spec.configs import PATCH_GAP

# The switches `classification_head` reads (registers: left out of "gap" pooling).
HEAD_SWITCHES = ("num_register_tokens", "distilled", "distillation_head")


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
    final_norm="tokens",
    layer_norm_epsilon=1e-6,
    num_register_tokens=0,
    distilled=False,
    distillation_head=True,
):
    """Pooling, optional pre-logits (dense + tanh) and the zero-initialised head.

    `pooling="map"` pools with big_vision's MAP head (`MAPHead(**map_head)`); "gap" averages
    the patch tokens (after the `num_register_tokens` registers); "patch_gap" averages the
    patch tokens after the class token and the registers (timm's `global_pool="avg"` of a
    class-token model: `x[:, num_prefix_tokens:].mean(1)`, DINOv3's timm default). With
    `final_norm="pooled"` a LayerNorm (`fc_norm`, epsilon `layer_norm_epsilon`) follows the
    pooling, as timm's `fc_norm` (vision_transformer.py: `norm` is then Identity). With
    `distilled` the logits are the mean of `head` on the class token and `head_dist` on
    the distillation token (`distilled_logits`); with `distillation_head=False` too they
    are `head` on the class token alone (HF `DeiTForImageClassification`).
    Returns the symbolic model output: the sequence, the pooled feature or the logits.
    """
    if return_sequence:
        return sequence
    if pooling == "map":
        x = MAPHead(**(map_head or {}), name=names.MAP_HEAD)(sequence)
    elif pooling == PATCH_GAP:  # the class token, then the registers (no distillation token)
        x = TokenPooling("gap", num_prefix_tokens=1 + num_register_tokens, name=names.POOL)(
            sequence
        )
    else:
        x = TokenPooling(pooling, num_prefix_tokens=num_register_tokens, name=names.POOL)(sequence)
    if final_norm == "pooled":
        x = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name=names.POOLED_NORM)(x)
    if representation_size is not None:
        x = keras.layers.Dense(representation_size, activation="tanh", name=names.PRE_LOGITS)(x)
    if not include_top:
        return x
    if distilled and distillation_head:
        dist = TokenPooling("token", token_index=1, name=names.POOL_DIST)(sequence)
        return distilled_logits(x, dist, num_classes, classifier_activation)
    return zero_head(num_classes, classifier_activation)(x)


def distilled_logits(pooled, dist, num_classes, activation=None):
    """DeiT's inference logits: (head(class token) + head_dist(distillation token)) / 2.

    timm deit.py `VisionTransformerDistilled.forward_head` (not `distilled_training`) and HF
    `DeiTForImageClassificationWithTeacher`. The mean (`head_mean`) is the model's output
    in training too, so the ordinary loss trains both zero-initialised heads (DeiT's
    hard-distillation loss on the teacher's labels is not built in). `activation` (e.g.
    "softmax") is applied to the mean. `pooled`: the class token's feature, `dist`: the
    distillation token's (`pool_dist`), each `(batch, D)`.
    """
    head = zero_head(num_classes)(pooled)
    head_dist = zero_head(num_classes, name=names.HEAD_DIST)(dist)
    logits = keras.layers.Average(dtype="float32", name=names.HEAD_MEAN)([head, head_dist])
    if activation is None:
        return logits
    return keras.layers.Activation(activation, dtype="float32", name=names.HEAD_ACTIVATION)(logits)


def zero_head(num_classes, activation=None, name=names.HEAD):
    """The zero-initialised D x K head (`head`, float32 logits under every dtype policy;
    paper section 3.2: "a zero-initialized D x K feedforward layer"); `name="head_dist"`
    for DeiT's distillation head."""
    return keras.layers.Dense(
        num_classes,
        activation=activation,
        kernel_initializer="zeros",
        bias_initializer="zeros",
        dtype="float32",
        name=name,
    )
