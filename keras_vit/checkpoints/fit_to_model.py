"""The steps of `keras_vit.checkpoints.loading.load_weights` that fit a file's arrays to a model
before anything is assigned, each a small function: what to skip (`skip_prefixes`: the head
and pre-logits by the `head=` rule), the position table resized to the model's grid
(`fit_position_table`, from the grid the file records; class rows added where the file has
none), the patch (or root) kernel adapted to the model's input channels (`fit_channels`), and
the missing / unexpected / mismatched keys found in one pass (`check_keys`).
"""

from __future__ import annotations

import logging

import numpy as np

from keras_vit._warnings import warn_weights
from keras_vit.checkpoints.base import architecture
from keras_vit.checkpoints.base.channels import (
    adapt_input_kernel,
    can_adapt,
    channel_mismatch,
    input_kernel_key,
)
from keras_vit.checkpoints.release.layouts import PLAIN_POSITION_KEY
from keras_vit.layers.position_resize import resize_position_embeddings, square_grid
from keras_vit.spec import layer_names as names

logger = logging.getLogger(__name__)


def under(key: str, prefixes) -> bool:
    return any(key == p or key.startswith(p.rstrip("/") + "/") for p in prefixes)


def skip_prefixes(arrays, variables, skip, head):
    """Prefixes of keys not to load: `skip`, the head per `head`, pre_logits the model lacks."""
    prefixes = list(skip)
    file_has_pre_logits = any(k.startswith("pre_logits/") for k in arrays)
    if file_has_pre_logits and "pre_logits/kernel" not in variables and "pre_logits" not in skip:
        prefixes.append("pre_logits")
        note = ""
        if head != "skip" and "head/kernel" in variables and not under("head", prefixes):
            prefixes.append("head")
            note = (
                " Its head was trained on top of pre_logits, so it is not loaded either; the "
                "model keeps its own (zero-initialised) head."
            )
        width = arrays["pre_logits/kernel"].shape[-1] if "pre_logits/kernel" in arrays else -1
        warn_weights(
            "The checkpoint has a pre_logits (representation) layer but the model has none "
            "(representation_size=None): pre_logits is dropped, as the release does for "
            f"fine-tuning.{note} Build the model with representation_size={width} to use it."
        )
    if head == "skip":
        prefixes.append("head")
    elif head == "auto" and not under("head", prefixes):
        reason = head_mismatch(arrays, variables)
        if reason:
            if any(k.startswith("head/") for k in variables):
                warn_weights(f"Head not loaded: {reason}; its logits are 0 until trained.")
            else:
                logger.info("Head not loaded: %s.", reason)  # include_top=False: expected
            prefixes.append("head")
    if under("head", prefixes) and not under(names.HEAD_DIST, prefixes):
        prefixes.append(names.HEAD_DIST)  # DeiT's distillation head goes with the head
    return prefixes


def head_mismatch(arrays, variables) -> str | None:
    """Why the file's head cannot go into the model (for head="auto"), or None if it fits."""
    in_file = any(k.startswith("head/") for k in arrays)
    in_model = any(k.startswith("head/") for k in variables)
    if in_file and not in_model:
        return "the model has no head (include_top=False)"
    if in_model and not in_file:
        return "the checkpoint has none; the model keeps its own (zero-initialised) head"
    for key in ("head/kernel", "head/bias"):
        if key in arrays and key in variables:
            file_shape, model_shape = tuple(arrays[key].shape), tuple(variables[key].shape)
            if file_shape != model_shape:
                return (
                    f"the checkpoint's {key} is {file_shape}, the model's {model_shape}; the "
                    "model keeps its own (zero-initialised) head"
                )
    return None


def fit_position_table(model, table, variable, method, source_grid):
    """Resizes the file's position table to the model's grid when they differ.

    Returns `(table, (old_grid, new_grid) or None, hint or None)`; a table that cannot be
    matched is returned unchanged (then reported as a shape mismatch, with `hint`).
    """
    target = tuple(variable.shape)
    if table.ndim != 3 or len(target) != 3 or table.shape[-1] != target[-1]:
        return table, None, None
    if table.shape[1] == target[1] and source_grid is None:
        return table, None, None
    prefix = architecture.num_position_prefix_rows(model)
    new_grid = architecture.patch_grid(model)
    if prefix + new_grid[0] * new_grid[1] != target[1]:
        return table, None, None
    if source_grid is None:
        try:
            old_grid = square_grid(table.shape[1] - prefix)
        except ValueError:
            hint = (
                f"the file's {table.shape[1]} rows minus the model's {prefix} class-token "
                "row(s) are not a square grid; pass source_grid=(rows, cols) if the file's "
                "grid is not square"
            )
            return table, None, hint
    else:
        old_grid = tuple(source_grid)
    if tuple(old_grid) == tuple(new_grid):
        return table, None, None
    resized = resize_position_embeddings(table, old_grid, new_grid, prefix, method)
    return resized, (tuple(old_grid), tuple(new_grid)), None


def recorded_grid(model, contents, arrays):
    """The grid of the file's position table from the image size the file records (timm
    metadata, HF config.json), when it fits the table's rows; else None (a square grid is
    then assumed). A non-square file is so resized to any image size, and a file's grid to
    another of as many patches (4x4 -> 8x2)."""
    kernel = arrays.get("embedding/kernel")
    table = arrays[PLAIN_POSITION_KEY]
    size = contents.image_size
    if size is None or np.ndim(kernel) != 4 or np.ndim(table) != 3 or "conv_root/kernel" in arrays:
        return None
    grid = (int(size[0]) // kernel.shape[0], int(size[1]) // kernel.shape[1])
    prefix = architecture.num_position_prefix_rows(model)
    if prefix + grid[0] * grid[1] != table.shape[1]:
        return None
    return grid


def add_class_rows(model, contents, arrays):
    """A file's table without class rows (`no_embed_class`, DeiT III) for a model whose
    table has them: zero rows in front, which is what the class (and distillation) token
    then get, so the model computes what the file's model does."""
    table = arrays[PLAIN_POSITION_KEY]
    if not contents.no_embed_class or np.ndim(table) != 3:
        return table
    rows = architecture.num_position_prefix_rows(model)
    if not rows:
        return table
    zeros = np.zeros((1, rows, table.shape[-1]), np.asarray(table).dtype)
    return np.concatenate([zeros, table], axis=1)


def model_heads(model) -> int | None:
    return architecture.Architecture.from_checkpoint_model(model).num_heads


def fit_channels(arrays, variables, skip, adapt, path) -> dict:
    """Adapts the input kernel's channels in `arrays` (timm's rule) when `adapt`; returns
    `{key: note}` for the shape-mismatch line when it is not adapted."""
    key = input_kernel_key(variables)
    if key is None or key not in arrays or under(key, skip):
        return {}
    mismatch = channel_mismatch(arrays[key], variables[key].shape)
    if mismatch is None:
        return {}
    source, target = mismatch
    if adapt and can_adapt(source, target):
        arrays[key] = adapt_input_kernel(arrays[key], target)
        rule = "summed" if target == 1 else f"repeated and scaled by 3/{target}"
        warn_weights(
            f"{path}: the checkpoint's {key} has {source} input channels, the model {target}; "
            f"the kernel was adapted ({rule}, timm's adapt_input_conv)."
        )
        return {}
    how = (
        "load with strict=False (or adapt_channels=True) to adapt it by timm's rule"
        if can_adapt(source, target)
        else "timm's rule adapts only to 1 channel or from 3"
    )
    return {key: f"{source} input channels in the file, {target} in the model; {how}"}


def check_keys(report, arrays, variables, skip, notes) -> list:
    """Fills the report's skipped / missing / unexpected / mismatched keys; returns the keys
    that fit (`notes`: `{key: text}` appended to a key's mismatch line)."""
    report.skipped = [k for k in arrays if under(k, skip)]
    expected = [k for k in variables if not under(k, skip)]
    provided = {k for k in arrays if not under(k, skip)}
    report.missing = [k for k in expected if k not in provided]
    report.unexpected = sorted(provided.difference(variables))
    fits = []
    for key in expected:
        if key not in provided:
            continue
        file_shape, model_shape = tuple(arrays[key].shape), tuple(variables[key].shape)
        if file_shape == model_shape:
            fits.append(key)
        else:
            note = f" ({notes[key]})" if notes.get(key) else ""
            report.mismatched.append(f"{key}: file {file_shape} vs model {model_shape}{note}")
    return fits
