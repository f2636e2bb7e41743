"""The model a checkpoint file describes: its builder keywords (`architecture_kwargs`) and
how `keras_vit.from_checkpoint` (in `keras_vit.model.from_kwargs`, above the builders) loads it
(`model_kwargs`).

The architecture comes from the file where the file says it: a Hugging Face `config.json`,
the array shapes of the release's `.npz` and of timm state dicts (patch, width, MLP width,
depth, class token or not, pre_logits, head size, position-table grid). The numerics (GELU
form, LayerNorm epsilon) and the input scaling follow the source (see `CheckpointContents`),
and the model built records the scaling for `predict`, `evaluate` and the SavedModel export.
"""

from __future__ import annotations

import logging
import os

from keras_vit.checkpoints.base.architecture import Architecture
from keras_vit.checkpoints.base.contents import CheckpointContents
from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.spec import configs
from keras_vit.spec import layer_names as names
from keras_vit.spec.run_config_file import RUN_CONFIG_FILE, kwargs_from_run_config

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
    if contents.position_embedding == "rope":  # no table: any size is the model's
        logger.info("%s names no image size; building at 224 (RoPE takes any).", contents.path)
        return 224
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
    GroupNorm groups: the builder's default (32, the release's and timm's) applies, except
    for a keras_vit run's `.npz`, whose config.json beside it gives them
    (`run_resnet_groups`).

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
        **arch.head_kwargs(),
    )
    kwargs.update(contents.numerics)
    kwargs.update(arch.family_kwargs())  # LayerScale, registers, ... (mlp_activation again)
    if contents.position_embedding == "rope":
        kwargs["position_embedding"] = "rope"
    if f"{names.MAP_HEAD}/probe" in contents.arrays:
        kwargs["pooling"] = "map"
    if arch.resnet_stages is not None:
        kwargs["resnet_stages"] = list(arch.resnet_stages)
        kwargs["resnet_width"] = int(contents.arrays[f"{names.ROOT_CONV}/kernel"].shape[-1])
        groups = run_resnet_groups(contents, kwargs)
        if groups is not None:
            kwargs["resnet_groups"] = groups
    return kwargs


def run_resnet_groups(contents: CheckpointContents, kwargs: dict) -> int | None:
    """The GroupNorm groups of a hybrid `.npz` that a keras_vit run wrote (best.npz,
    last.npz): its config.json beside it says them when it describes the same ResNet (stages
    and width), as the file cannot. None for any other file."""
    if contents.format != "npz" or not os.path.isfile(str(contents.path)):
        return None
    run = kwargs_from_run_config(contents.path)
    if not run or "resnet_groups" not in run:
        return None
    same_resnet = (
        list(run.get("resnet_stages") or ()) == kwargs["resnet_stages"]
        and run.get("resnet_width") == kwargs["resnet_width"]
    )
    if not same_resnet:
        return None
    groups = run["resnet_groups"]
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
        return None
    if kwargs["resnet_width"] % groups:
        return None  # no GroupNorm of this width: not the run's model
    logger.info(
        "%s: GroupNorm groups %d from the run's %s beside it (the .npz records none).",
        contents.path,
        groups,
        RUN_CONFIG_FILE,
    )
    return groups


def model_kwargs(contents: CheckpointContents, num_classes=None, image_size=None, **overrides):
    """The builder keywords for `keras_vit.from_checkpoint` and how to load the file into
    the model they build: `(kwargs, head, adapt_channels)`.

    `kwargs` are `architecture_kwargs(contents, image_size)` with a new zero head of
    `num_classes` (dropping `pre_logits`) when that differs from the file's, then
    `overrides`; `head` is "load" (the file's head goes in) or "auto" (a new head, or a
    feature model, `include_top=False`); `adapt_channels` is True when `overrides` ask for
    another number of input channels than the file's.

    Raises:
        CheckpointError: as `architecture_kwargs`.
    """
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
    return kwargs, head, kwargs["channels"] != file_channels


def local_path(path):
    """`path`, or the local copy of a published ViT-family name (`registry.resolve_family`)
    when no such file or folder exists."""
    from keras_vit.checkpoints.published import registry
    from keras_vit.checkpoints.published.family_checkpoints import family_entry

    if isinstance(path, str) and not os.path.exists(path) and family_entry(path):
        return registry.resolve_family(path)
    return path
