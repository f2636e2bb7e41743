"""`keras_vit.from_checkpoint(path)`: the model a checkpoint file describes, with its weights.

The architecture comes from the file where the file says it: a Hugging Face `config.json`,
the array shapes of the release's `.npz` and of timm state dicts (patch, width, MLP width,
depth, class token or not, pre_logits, head size, position-table grid). The numerics (GELU
form, LayerNorm epsilon) and the input scaling follow the source (see `CheckpointContents`),
and the model records the scaling for `predict`, `evaluate` and the SavedModel export.
"""

from __future__ import annotations

import logging
import os

from keras_vit import configs
from keras_vit import layer_names as names
from keras_vit.checkpoints.architecture import Architecture
from keras_vit.checkpoints.contents import CheckpointContents
from keras_vit.checkpoints.npz_io import CheckpointError

logger = logging.getLogger(__name__)


def _grid_choices(tokens: int) -> str:
    """Every (rows, cols) grid of `tokens` patches, e.g. "3x5, 5x3, 1x15, 15x1"."""
    pairs = [(r, tokens // r) for r in range(1, tokens + 1) if tokens % r == 0]
    pairs.sort(key=lambda pair: (abs(pair[0] - pair[1]), pair[0] > pair[1]))
    return ", ".join(f"{r}x{c}" for r, c in pairs[:6])


def _image_size(contents, arch, image_size):
    """The size to build at: `image_size` (the caller's), the file's, or the square grid's.

    Raises:
        CheckpointError: a table whose patch count is no square grid and no size is given.
    """
    if image_size is not None:
        return image_size
    if contents.image_size is not None:
        return contents.image_size
    if arch.grid is None:
        tokens = arch.num_patch_tokens
        patch = arch.patch_size
        raise CheckpointError(
            f"{contents.path}: the position table's {tokens} patch rows are not a square grid "
            f"and the file ({contents.format}) does not record its grid ({_grid_choices(tokens)} "
            f"all fit); pass image_size=(rows * {patch[0]}, cols * {patch[1]})."
        )
    stages = arch.resnet_stages
    stride = 1 if stages is None else configs.resnet_total_stride(stages)
    return tuple(g * p * stride for g, p in zip(arch.grid, arch.patch_size, strict=True))


def architecture_kwargs(contents: CheckpointContents, image_size=None) -> dict:
    """`keras_vit.ViT` keyword arguments for the ViT a checkpoint holds, or
    `keras_vit.HybridViT` ones (with `resnet_stages`, `resnet_width`) for a hybrid.

    Sizes come from `Architecture.from_arrays` (the release's keys); the number of heads
    from the file where it says (HF config.json, timm metadata); the image size from the
    file (HF config.json) or the position table's grid (times the ResNet's stride for a
    hybrid); numerics and input scaling from the source. A hybrid file does not record its
    GroupNorm groups: the builder's default (32, the release's and timm's) applies.

    Args:
        contents: the file read.
        image_size: the size to build at (int or pair); default the file's (see above).

    Raises:
        CheckpointError: a missing key, a non-square table without an image size (the
            message lists the grids that fit and names `image_size=`), or an unknown
            number of heads.
    """
    arch = Architecture.from_contents(contents)
    missing = arch.missing_key("patch_size", "mlp_dim")
    if missing:
        raise CheckpointError(f"{contents.path} is not a ViT checkpoint: no {missing!r}.")
    num_heads = contents.num_heads or arch.num_heads
    if num_heads is None:
        raise CheckpointError(f"The number of heads of {contents.path} is unknown.")
    image_size = _image_size(contents, arch, image_size)
    kwargs = dict(
        patch_size=arch.patch_size,
        hidden_dim=arch.hidden_dim,
        channels=arch.channels,
        num_heads=int(num_heads),
        mlp_dim=arch.mlp_dim,
        num_layers=arch.num_layers,
        image_size=image_size,
        input_preprocessing=contents.preprocessing,
        **arch.pooling_kwargs(),
    )
    kwargs.update(contents.numerics)
    kwargs.update(arch.family_kwargs())  # LayerScale, registers, ... (mlp_activation again)
    if f"{names.MAP_HEAD}/probe" in contents.arrays:
        kwargs["pooling"] = "map"
    if arch.representation_size is not None:
        kwargs["representation_size"] = arch.representation_size
    if arch.num_classes is not None:
        kwargs["num_classes"] = arch.num_classes
    else:
        kwargs["include_top"] = False
    if arch.resnet_stages is not None:
        kwargs["resnet_stages"] = list(arch.resnet_stages)
        kwargs["resnet_width"] = int(contents.arrays[f"{names.ROOT_CONV}/kernel"].shape[-1])
    return kwargs


def build_from_kwargs(kwargs: dict):
    """`keras_vit.HybridViT(**kwargs)` when `kwargs` name `resnet_stages`, else
    `keras_vit.ViT(**kwargs)` (the model `architecture_kwargs` describes)."""
    from keras_vit.build_any import build

    return build(kwargs)


def _local_path(path):
    """`path`, or the local copy of a published ViT-family name (`registry.resolve_family`)
    when no such file or folder exists."""
    from keras_vit.checkpoints import registry

    if isinstance(path, str) and not os.path.exists(path) and registry.family_entry(path):
        return registry.resolve_family(path)
    return path


def from_checkpoint(
    path,
    num_classes=None,
    *,
    image_size=None,
    num_heads=None,
    resize_method="bilinear",
    no_embed_class=None,
    **overrides,
):
    """Builds the ViT a checkpoint describes and loads it.

    A hybrid file (the release's R50+B/16 `.npz`, a timm hybrid) gives a
    `keras_vit.HybridViT` (GroupNorm groups: pass `resnet_groups=` if not 32).

    Args:
        path: a release/big_vision `.npz`, a `.keras` file, a Hugging Face ViT folder (or its
            `model.safetensors`), or a timm `.safetensors` file; the format is read from the
            content. Also a published ViT-family name (`registry.FAMILY_CHECKPOINTS`:
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
        resize_method: "bilinear" (default, the release's), "bicubic" (timm's
            `dynamic_img_size` / `resample_abs_pos_embed`), "torch_bicubic" (Hugging
            Face's `interpolate_pos_encoding`) or "dinov2" (the original DINOv2's, with its
            0.1 offset); see `keras_vit.resize_position_embeddings`.
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
    """
    import keras

    from keras_vit._validation import check_choice
    from keras_vit.layers.position_resize import RESIZE_METHODS

    check_choice("resize_method", resize_method, RESIZE_METHODS)
    from keras_vit.checkpoints.formats import read_checkpoint
    from keras_vit.checkpoints.loading import load_weights

    path = _local_path(path)
    contents = read_checkpoint(path, num_heads=num_heads, no_embed_class=no_embed_class)
    if contents.format == "keras" and num_classes is None and image_size is None and not overrides:
        return keras.saving.load_model(contents.path, safe_mode=True)
    kwargs = architecture_kwargs(contents, image_size=image_size)
    head = "load"
    if num_classes is not None and num_classes != kwargs.get("num_classes"):
        kwargs.update(num_classes=num_classes, include_top=True)
        kwargs.pop("representation_size", None)
        head = "auto"
    file_channels = kwargs["channels"]
    kwargs.update(overrides)
    if kwargs.get("include_top") is False:
        head = "auto"  # a feature model: the file's head (if any) is not loaded
    model = build_from_kwargs(kwargs)
    adapt = kwargs["channels"] != file_channels  # asked for by `channels=`
    load_weights(model, contents, head=head, resize_method=resize_method, adapt_channels=adapt)
    logger.info("Built %s from %s (%s).", model.name, contents.path, contents.format)
    return model
