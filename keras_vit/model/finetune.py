"""`finetune`: a pre-trained keras_vit model prepared for a new task (paper section 3.2).

"When feeding images of higher resolution, we keep the patch size the same ... We therefore
perform 2D interpolation of the pre-trained position embeddings" and "we remove the
pre-trained prediction head and attach a zero-initialized D x K feedforward layer" (paper
section 3.2; the release's vit_jax/checkpoint.py, `load_pretrained`).
"""

from __future__ import annotations

import keras

from keras_vit._validation import check_choice, check_positive_int, to_pair
from keras_vit._warnings import warn_weights
from keras_vit.checkpoints.base.architecture import num_position_prefix_rows, patch_grid
from keras_vit.checkpoints.base.lora import merged_weights
from keras_vit.layers import AddSinCosPositionEmbs, PatchEmbed, TransformerBlock
from keras_vit.layers.position_embedding import recorded_resize_method
from keras_vit.layers.position_resize import resize_position_embeddings
from keras_vit.model.arguments import check_num_classes
from keras_vit.model.head import distilled_logits, zero_head
from keras_vit.model.image_model import ImageModel
from keras_vit.model.lora import apply_lora, check_lora_rank
from keras_vit.spec import layer_names as names
from keras_vit.spec.resize_methods import RESIZE_METHODS

_POSITION_LAYER = names.POSITION_EMBEDDING
_REPLACED = (names.PRE_LOGITS, names.HEAD, names.HEAD_DIST)


def _check_model(model):
    present = {layer.name for layer in model.layers}
    if names.EMBEDDING not in present or not present & {names.POOL, names.MAP_HEAD}:
        raise ValueError(
            "finetune needs a keras_vit classification model (ViT or hybrid) with the layers "
            f"{names.EMBEDDING!r} and {names.POOL!r} (or {names.MAP_HEAD!r} for map pooling); "
            f"model {model.name!r} has {sorted(present & {names.EMBEDDING, names.POOL})}. "
            "(Models built with return_sequence=True cannot be fine-tuned this way.)"
        )


def body_features(model):
    """The symbolic pooled feature `(batch, D)` that `model`'s pre-logits or head reads.

    Everything before `pre_logits` and `head` is body: the pooling (class token, mean or
    the MAP head) and, with `final_norm="pooled"`, timm's `fc_norm` after it. For a model
    without pre-logits and head (include_top=False) it is the model's output.
    """
    layers = {layer.name for layer in model.layers}
    for name in _REPLACED:
        if name in layers:
            return model.get_layer(name).input
    return model.outputs[0]


def _rebuild(model, image_size):
    """A fresh copy of the model's graph for `image_size` (new, untied variables)."""
    input_shape = model.inputs[0].shape
    if image_size is None:
        size = (input_shape[1], input_shape[2])
    else:
        size = to_pair("image_size", image_size)
    images = keras.Input((*size, input_shape[3]), name=model.inputs[0].name)
    return keras.models.clone_model(model, input_tensors=images, clone_function=_clone_layer())


def _clone_layer():
    """A `clone_model` clone_function that gives a sin-cos position layer, and the blocks of a
    fixed-grid rotary embedding (`position_embedding="rope"`), the new grid.

    Layers are cloned in graph order, so the new patch embedding has been called (and knows
    its grid) when the position layer or blocks after it are cloned.
    """
    embeds = []

    def clone(layer):
        config = layer.get_config()
        if isinstance(layer, AddSinCosPositionEmbs) and embeds:
            config["grid_size"] = list(embeds[-1].grid_size)
        if isinstance(layer, TransformerBlock) and layer.rope is not None and embeds:
            if layer.rope["patch_size"] is None:
                config["rope"] = {**layer.rope, "grid_size": list(embeds[-1].grid_size)}
        new = layer.__class__.from_config(config)
        if isinstance(new, PatchEmbed):
            embeds.append(new)
        return new

    return clone


def _copy_body(source, target, method):
    """Copies every body weight; resizes the position table when the grid changed."""
    for layer in target.layers:
        if not layer.weights or layer.name in _REPLACED:
            continue
        values = merged_weights(source.get_layer(layer.name))
        if layer.name == _POSITION_LAYER:
            old, new = patch_grid(source), patch_grid(target)
            if old != new:
                values = [
                    resize_position_embeddings(
                        values[0], old, new, num_position_prefix_rows(source), method
                    )
                ]
                warn_weights(
                    f"Position embeddings resized: grid {old[0]}x{old[1]} -> "
                    f"{new[0]}x{new[1]} ({method})."
                )
        layer.set_weights(values)


def finetune(
    model,
    num_classes,
    image_size=None,
    representation_size=None,
    *,
    resize_method=None,
    remat=None,
    lora_rank=None,
    lora_alpha=None,
):
    """Returns a new model with `model`'s pre-trained body and a zero-initialised head.

    Works on every keras_vit ViT and hybrid classification model, for every pooling
    ("token", "gap", "patch_gap", "map") and final norm ("tokens", or "pooled" = timm's
    `fc_norm`): every
    layer up to the pooled feature is kept (`body_features`), only `pre_logits` and `head`
    are replaced. The source model is not changed and shares no variables with the result.
    A distilled model (DeiT, `distilled=True`) gets BOTH heads replaced by zero-initialised
    ones, `head` and `head_dist`, its logits still their mean (timm's
    `VisionTransformerDistilled.reset_classifier` resets both too), so the fine-tuned model
    keeps the source's architecture and writes back to the same formats; the distillation
    token is kept. A model whose distillation token has no head (`distillation_head=False`,
    or a headless DeiT, e.g. HF DeiTModel, its pooler dropped as pre_logits) gets one
    `head` on the class token (HF DeiTForImageClassification). Register tokens, LayerScale
    and the other switches are body and kept.

    Args:
        model: a keras_vit model with a `pool` (or `MAPHead_0`) layer (include_top True or
            False).
        num_classes: classes K of the new head, a zero-initialised D x K (or R x K) dense.
        image_size: int or (height, width) for the new model; None keeps the current size.
            With another size (same patch) the position table is resized (class-token row
            unchanged; see `keras_vit.resize_position_embeddings`).
        representation_size: None (default) drops `pre_logits`, as the release does for
            fine-tuning. The current `pre_logits` width keeps the pre-trained layer; another
            width adds a freshly initialised `pre_logits` (dense + tanh).
        resize_method: None (default): the one the model's position table records
            (`AddPositionEmbs.resize_method`: what `keras_vit.from_checkpoint` loaded it with,
            "bilinear_antialias" for a SigLIP 2 NaFlex tower; "bilinear", the release's,
            unless set); or "bilinear", "bicubic" (timm's), "torch_bicubic" (Hugging
            Face's), "dinov2" (original DINOv2's), "bilinear_antialias"; see
            `keras_vit.resize_position_embeddings`.
        remat: None (default) keeps the source's setting; True or False sets every
            Transformer block's `remat` (recompute its activations in the backward pass:
            less memory at fine-tuning resolutions, about one more forward pass a step). On
            JAX on CPU the saving needs XLA's memory scheduler, read at the process's first
            JAX computation, before the source existed: set it in `XLA_FLAGS` (see
            `keras_vit.kernels.dispatch.prefer_memory_schedule`; `keras-vit finetune
            --remat` does).
        lora_rank: None (default: every weight trainable) or a positive int R: LoRA
            fine-tuning through Keras' `enable_lora` (`keras_vit.model.lora.apply_lora`):
            rank-R adapters on the attention and MLP projections, the head, pre-logits and
            LayerNorms trainable, the position table trainable when it was resized, the rest
            frozen. A B/16 at rank 8 trains under 5% of its parameters.
        lora_alpha: Keras' `lora_alpha` (the update is scaled by `lora_alpha / lora_rank`);
            None (default) is the rank.

    Returns:
        A functional `keras.Model` with input `images` `(batch, height, width, channels)`
        and logits `(batch, num_classes)` in float32; the head keeps the source head's
        activation (None when the source had no head).

    Raises:
        ValueError: bad `num_classes` (1 included: see `keras_vit.model.arguments.ONE_CLASS_HINT`),
            a bad `lora_rank` or `lora_alpha`,
            `image_size` or `representation_size` (none with a distillation token), an image
            size not divisible by the patch, or a model that is not a keras_vit classifier.
    """
    check_num_classes(num_classes)
    lora_rank, lora_alpha = check_lora_rank(lora_rank, lora_alpha)
    if remat is not None and not isinstance(remat, bool):
        raise ValueError(f"`remat` must be None, True or False. Received: remat={remat!r}")
    if representation_size is not None:
        check_positive_int("representation_size", representation_size)
    _check_model(model)
    layers = {layer.name for layer in model.layers}
    distilled = names.POOL_DIST in layers
    if names.DIST_TOKEN in layers and representation_size is not None:
        raise ValueError(
            "A model with a distillation token (DeiT) has no pre_logits under its head(s): "
            "they read the normalised tokens (as the builder's distilled=True); pass "
            f"representation_size=None. Received: representation_size={representation_size}"
        )
    if resize_method is None:
        resize_method = recorded_resize_method(model)
    resize_method = check_choice("resize_method", resize_method, RESIZE_METHODS)
    clone = _rebuild(model, image_size)
    _copy_body(model, clone, resize_method)
    if remat is not None:
        set_remat(clone, remat)

    x = body_features(clone)
    if representation_size is not None:
        pre_logits = None
        if names.PRE_LOGITS in layers:
            pre_logits = clone.get_layer(names.PRE_LOGITS)
            if pre_logits.units == representation_size:
                pre_logits.set_weights(merged_weights(model.get_layer(names.PRE_LOGITS)))
            else:
                pre_logits = None
        if pre_logits is None:
            pre_logits = keras.layers.Dense(
                representation_size, activation="tanh", name=names.PRE_LOGITS
            )
        x = pre_logits(x)
    activation = _head_activation(model, layers)
    if distilled:
        dist = clone.get_layer(names.POOL_DIST).output
        logits = distilled_logits(x, dist, num_classes, activation)
    else:
        logits = zero_head(num_classes, activation)(x)
    tuned = ImageModel(clone.input, logits, name=model.name)
    if lora_rank is not None:
        apply_lora(tuned, lora_rank, lora_alpha, train_position_table=_grid_changed(model, clone))
    return tuned


def _grid_changed(source, target) -> bool:
    """Whether the target's patch grid differs from the source's (False without a fixed
    grid or a position table)."""
    if _POSITION_LAYER not in {layer.name for layer in target.layers}:
        return False
    try:
        return patch_grid(source) != patch_grid(target)
    except ValueError:
        return False


def _head_activation(model, layers):
    """The source classifier's activation (None without a head)."""
    for name in (names.HEAD_ACTIVATION, names.HEAD):
        if name in layers:
            activation = model.get_layer(name).activation
            return None if keras.activations.serialize(activation) == "linear" else activation
    return None


def set_remat(model, remat: bool) -> None:
    """Sets `remat` on every `TransformerBlock` of `model` (nested models included): True
    recomputes each block's activations in its backward pass (`keras.remat`). Read at each
    training call, and saved in the block's config (`.keras` files keep it)."""
    from keras_vit.layers import TransformerBlock

    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, TransformerBlock):
            layer.remat = bool(remat)
