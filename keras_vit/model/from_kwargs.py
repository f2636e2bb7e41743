"""Build the ViT or hybrid a dict of keyword arguments describes (the form config.json and
the checkpoint readers record a model in): `keras_vit.HybridViT` when it names
`resnet_stages`, else `keras_vit.ViT`; and `keras_vit.from_checkpoint(path)`, the model a
checkpoint file describes, with its weights.

It sits just above `keras_vit.model.vit` and `keras_vit.model.hybrid` and reads checkpoints from
below (`keras_vit.checkpoints.from_checkpoint` turns a file into builder keywords), so no
import runs back up from the checkpoint code to the builders; the "model from anything"
resolver is `keras_vit.model.from_source`.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def builder_of(kwargs: dict):
    """`keras_vit.HybridViT` if `kwargs` hold `resnet_stages`, else `keras_vit.ViT`.

    >>> builder_of({"resnet_stages": [3, 4, 9]}).__name__
    'HybridViT'
    >>> builder_of({"patch_size": 16}).__name__
    'ViT'
    """
    if "resnet_stages" in kwargs:
        from keras_vit.model.hybrid import HybridViT

        return HybridViT
    from keras_vit.model.vit import ViT

    return ViT


def build(kwargs: dict):
    """`builder_of(kwargs)(**kwargs)`, with a JSON list of `resnet_stages` made a tuple.

    Raises:
        ValueError: whatever the builder raises for bad arguments.
    """
    kwargs = dict(kwargs)
    if "resnet_stages" in kwargs:
        kwargs["resnet_stages"] = tuple(kwargs["resnet_stages"])
    return builder_of(kwargs)(**kwargs)


def from_checkpoint(
    path,
    num_classes=None,
    *,
    image_size=None,
    num_heads=None,
    resize_method=None,
    no_embed_class=None,
    **overrides,
):
    """Builds the ViT a checkpoint describes and loads it.

    A hybrid file (the release's R50+B/16 `.npz`, a timm hybrid) gives a
    `keras_vit.HybridViT` (GroupNorm groups: pass `resnet_groups=` if not 32; a keras_vit
    run's best.npz or last.npz takes them from the run's config.json beside it).

    Args:
        path: a release/big_vision `.npz`, a `.keras` file, a Hugging Face ViT folder (or its
            `model.safetensors`), or a timm `.safetensors` file; the format is read from the
            content. Also a published ViT-family name (`keras_vit.checkpoints.FAMILY_CHECKPOINTS`:
            "deit_small_patch16_224", "facebook/dinov2-small", ...), read from its local
            folder under the Keras cache (`registry.resolve_family`).
        num_classes: None (default) keeps the file's head (a file without one gives a
            feature model, `include_top=False`); another number builds a zero-initialised
            head of that size (the release's fine-tuning recipe), dropping `pre_logits`.
        image_size: int or (height, width); default the file's (config.json or the position
            table's grid). Another size resizes the position table with `resize_method`.
        num_heads: heads for timm files, which do not record them.
        no_embed_class: for a timm class-token file that does not say whether its
            `pos_embed` has a class row (DeiT-3's `no_embed_class=True`) and whose row
            count fits both readings; default None (read it from the file and its config).
        resize_method: None (default): the file's own (SigLIP 2's NaFlex tower:
            "bilinear_antialias", transformers' `resize_positional_embeddings`), else
            "bilinear" (the release's); or "bilinear", "bicubic" (timm's `dynamic_img_size`
            / `resample_abs_pos_embed`), "torch_bicubic" (Hugging Face's
            `interpolate_pos_encoding`), "dinov2" (the original DINOv2's, with its 0.1
            offset), "bilinear_antialias"; see `keras_vit.resize_position_embeddings`. The
            model records it: with `dynamic_image_size=True` it resizes its table with it in
            the forward pass, at each call's image size, and `keras_vit.finetune` at
            another size uses it.
        **overrides: other `keras_vit.ViT` arguments (dropout_rate, drop_path_rate, name,
            dynamic_image_size, ...), also the numerics `gelu_approximate` and
            `layer_norm_epsilon` when you mean to change them, and `channels`: another
            number than the file's adapts the patch kernel by timm's rule (see
            `keras_vit.load_weights`), with a warning.

    Returns:
        A functional `keras.Model` whose input is `(batch, height, width, channels)`, scaled
        as `model.get_layer("embedding").input_preprocessing` says.

    Raises:
        FileNotFoundError, CheckpointError: see `keras_vit.checkpoints.read_checkpoint`.
        ValueError: an unknown `resize_method`.
        CheckpointError: a `resize_method` other than the one the file records (see
            `keras_vit.load_weights`).
    """
    import keras

    from keras_vit._validation import check_choice
    from keras_vit.checkpoints.formats import read_checkpoint
    from keras_vit.checkpoints.from_checkpoint import local_path, model_kwargs
    from keras_vit.checkpoints.loading import load_weights, resize_method_for
    from keras_vit.layers.position_embedding import set_forward_resize_method
    from keras_vit.spec.resize_methods import RESIZE_METHODS

    if resize_method is not None:
        check_choice("resize_method", resize_method, RESIZE_METHODS)
    contents = read_checkpoint(local_path(path), num_heads=num_heads, no_embed_class=no_embed_class)
    resize_method = resize_method_for(contents, resize_method)
    if contents.format == "keras" and num_classes is None and image_size is None and not overrides:
        return keras.saving.load_model(contents.path, safe_mode=True)
    kwargs, head, adapt = model_kwargs(contents, num_classes, image_size, **overrides)
    model = build(kwargs)
    set_forward_resize_method(model, resize_method)  # forward pass (dynamic) and finetune
    load_weights(model, contents, head=head, resize_method=resize_method, adapt_channels=adapt)
    logger.info("Built %s from %s (%s).", model.name, contents.path, contents.format)
    return model
