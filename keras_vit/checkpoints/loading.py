"""`load_weights` / `save_npz`: official `.npz` checkpoints in and out of keras_vit models.

Loading is a short pipeline of named steps, each logging what it did (as big_vision does):
read the file safely -> normalise legacy layouts -> map model variables to official keys ->
decide what to skip (head, pre_logits) -> resize the position table if the grid differs ->
check missing / unexpected / mismatched keys (all reported in one error) -> assign.
Nothing is assigned unless every check passes, so a failed load never leaves a partly
loaded model.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import numpy as np

from keras_vit._validation import check_choice
from keras_vit._warnings import warn_weights
from keras_vit.checkpoints.base import architecture, lora, quantized
from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.checkpoints.base.naming import find_vit_model, official_variables
from keras_vit.checkpoints.fit_to_model import (
    add_class_rows,
    check_keys,
    fit_channels,
    fit_position_table,
    recorded_grid,
    skip_prefixes,
    under,
)
from keras_vit.checkpoints.keras_files.model_io import model_contents
from keras_vit.checkpoints.published import registry
from keras_vit.checkpoints.published.family_checkpoints import family_entry
from keras_vit.checkpoints.release.layouts import PLAIN_POSITION_KEY
from keras_vit.checkpoints.release.release_io import write_release_npz
from keras_vit.spec import layer_names as names
from keras_vit.spec.configs import SWIGLU
from keras_vit.spec.resize_methods import RESIZE_METHODS

logger = logging.getLogger(__name__)

HEAD_MODES = ("load", "skip", "auto")
_LIST_LIMIT = 12


@dataclasses.dataclass(repr=False)
class LoadReport:
    """What `load_weights` did.

    Attributes:
        path: the file read.
        loaded: official keys assigned to the model.
        skipped: file keys deliberately not loaded (`skip`, the head, dropped pre_logits).
        missing: model keys absent from the file (empty unless strict=False).
        unexpected: file keys the model has no variable for (empty unless strict=False).
        mismatched: "key: file shape vs model shape" lines (empty unless strict=False).
        resized_grid: `(old_grid, new_grid)` when the position table was resized, else None.
        layout_steps: the layout normalisations applied (e.g. "stripped the prefix ...").
    """

    path: str
    loaded: list = dataclasses.field(default_factory=list)
    skipped: list = dataclasses.field(default_factory=list)
    missing: list = dataclasses.field(default_factory=list)
    unexpected: list = dataclasses.field(default_factory=list)
    mismatched: list = dataclasses.field(default_factory=list)
    resized_grid: tuple | None = None
    layout_steps: list = dataclasses.field(default_factory=list)

    def __repr__(self) -> str:  # counts, not the ~200 keys
        counts = ", ".join(
            f"{name}={len(getattr(self, name))}"
            for name in ("loaded", "skipped", "missing", "unexpected", "mismatched")
        )
        return f"LoadReport(path={self.path!r}, {counts}, resized_grid={self.resized_grid})"


@dataclasses.dataclass(repr=False)
class SaveReport:
    """What `save_npz` wrote, with a one-line repr (a notebook cell shows one line).

    Attributes:
        path: the file written.
        shapes: `{official_key: shape}` of every array written (float32).

    `len(report)` is the number of arrays, `key in report` tests a key.
    """

    path: str
    shapes: dict

    @property
    def num_parameters(self) -> int:
        return int(sum(np.prod(shape, dtype=np.int64) for shape in self.shapes.values()))

    def __len__(self) -> int:
        return len(self.shapes)

    def __contains__(self, key) -> bool:
        return key in self.shapes

    def __repr__(self) -> str:
        return (
            f"SaveReport(path={self.path!r}, arrays={len(self)}, "
            f"parameters={self.num_parameters:,})"
        )


def _format_list(title: str, items) -> str:
    items = list(items)
    shown = ", ".join(items[:_LIST_LIMIT])
    more = f", ... and {len(items) - _LIST_LIMIT} more" if len(items) > _LIST_LIMIT else ""
    return f"\n  {title} ({len(items)}): {shown}{more}"


def _warn_numerics(model, contents) -> None:
    """Warns when the model's GELU / LayerNorm eps differ from those the weights expect."""
    from keras_vit.checkpoints.keras_files.model_io import model_numerics

    have, want = model_numerics(model), contents.numerics
    if _compared(have) != _compared(want):
        warn_weights(
            f"{contents.path} ({contents.format}) was trained with {_numerics_text(want)} but "
            f"the model uses {_numerics_text(have)}; outputs will differ"
            f"{'' if _activation(have) != _activation(want) else ' slightly'}. "
            "keras_vit.from_checkpoint builds the model with the file's numerics."
        )


def _compared(numerics) -> dict:
    """`numerics` less `gelu_approximate` for the gated MLP ("swiglu"), which has no GELU."""
    if _activation(numerics) != SWIGLU:
        return numerics
    return {key: value for key, value in numerics.items() if key != "gelu_approximate"}


def _activation(numerics) -> str:
    return numerics.get("mlp_activation", "gelu")


def _numerics_text(numerics) -> str:
    text = (
        f"gelu_approximate={numerics['gelu_approximate']}, "
        f"layer_norm_epsilon={numerics['layer_norm_epsilon']:g}"
    )
    if _activation(numerics) != "gelu":
        text += f", mlp_activation={_activation(numerics)!r}"
    return text


def load_weights(
    model,
    path,
    *,
    strict: bool = True,
    skip=(),
    head: str = "load",
    resize_method: str | None = None,
    source_grid=None,
    no_embed_class=None,
    adapt_channels=None,
) -> LoadReport:
    """Loads a ViT checkpoint of any format keras_vit reads into a keras_vit model.

    The one public loader (`keras_vit.load_weights`). The format is picked by content (the table of
    `keras_vit.checkpoints.format_table`): the release's `.npz` (vit_jax/checkpoint.py),
    big_vision's, a Hugging Face ViT folder, a timm `.safetensors` file or a `.keras` file;
    all are converted to the release's layout first. A warning says when the model's GELU
    form or LayerNorm epsilon differ from the ones the weights were trained with.

    Handles every layout real files have: plain keys, an `opt/target/` prefix, big_vision
    `params/` files (top-level `pos_embedding`, sub-layers numbered from 0, "scanned" blocks
    stacked on a leading axis), GroupNorm arrays stored as (1, 1, 1, C), optional
    `pre_logits`, heads of any size. A position table for another grid is resized to the
    model's (a WeightsWarning "... grid a x b -> c x d ..."; nothing when grids match); the
    class token row is taken from the model's config (its `cls` layer), never guessed.

    If the file has `pre_logits` and the model has none, pre_logits and the head trained on it
    are dropped with a warning (the release's fine-tuning behaviour). The opposite (the model
    has `pre_logits`, the file not) is a missing-key error.

    A patch kernel (a hybrid's root convolution) with other input channels than the model
    is adapted by timm's `adapt_input_conv` rule (3 -> 1 sums the RGB kernel, 3 -> N repeats
    it scaled by 3 / N; `keras_vit.checkpoints.base.channels`) with a WeightsWarning naming both
    channel counts, unless `adapt_channels` is False (then it is a shape mismatch).

    Args:
        model: a keras_vit ViT or hybrid model, or a keras.Model that contains one.
        path: local checkpoint path (file, or a Hugging Face folder), or the
            `CheckpointContents` of one already read.
        strict: if True (default), any missing, unexpected or shape-mismatched key raises one
            `CheckpointError` listing them all, and nothing is loaded. If False, they are
            warned about and the matching keys are loaded.
        skip: official key prefixes not to load (e.g. `("head",)`); they keep their values.
        head: "load" (default; the head must match), "skip" (keep the model's head), or
            "auto" (load it when its shape fits, else keep the model's head; what
            `weights=` uses).
        resize_method: None (default): the file's own (`CheckpointContents.resize_method`:
            "bilinear_antialias" for SigLIP 2's NaFlex tower, whose table transformers
            resizes so at every grid), else "bilinear" (the release's); or "bilinear",
            "bicubic" (timm), "torch_bicubic" (Hugging Face's `interpolate_pos_encoding`),
            "dinov2" (original DINOv2), "bilinear_antialias"; see
            `keras_vit.resize_position_embeddings`.
        source_grid: (rows, cols) of the file's position table when it is not square.
        no_embed_class: for a timm class-token file that does not say whether its
            `pos_embed` has a class row (default None: the file's config, else the model's
            grid decides).
        adapt_channels: adapt another number of input channels (default None: when
            strict=False; strict=True refuses it with an error that names the channels).

    Returns:
        A `LoadReport`.

    Raises:
        FileNotFoundError: `path` does not exist.
        CheckpointError (a ValueError): an unreadable, truncated or pickled file, object
            arrays, other input channels (strict, not adapted), or (strict) keys that do not
            fit; the message names every key.
        ValueError: a bad `head` or `resize_method`, or a `dynamic_image_size` model that
            resizes its table with another method in the forward pass (both named).
        CheckpointError: a `resize_method` other than the one the file records (named).
        CheckpointError: a model with LoRA adapters (its kernels would take the file's
            values while the adapters keep theirs): load before `enable_lora`.
    """
    check_choice("head", head, HEAD_MODES)
    if resize_method is not None:
        check_choice("resize_method", resize_method, RESIZE_METHODS)
    _refuse_lora(model)
    contents = _contents(model, path, no_embed_class)
    resize_method = resize_method_for(contents, resize_method)
    _check_forward_resize(model, resize_method, contents.resize_method)
    _check_rope(model, contents)
    variables, unnamed = official_variables(model)
    if unnamed:
        warn_weights(f"Weights without an official checkpoint name keep their values: {unnamed}")
    _warn_numerics(model, contents)
    arrays = dict(contents.arrays)
    skip = skip_prefixes(arrays, variables, tuple(skip), head)
    adapt = (not strict) if adapt_channels is None else bool(adapt_channels)
    channel_note = fit_channels(arrays, variables, skip, adapt, contents.path)
    resized, hint = None, None
    if PLAIN_POSITION_KEY in arrays and PLAIN_POSITION_KEY in variables:
        if not under(PLAIN_POSITION_KEY, skip):
            arrays[PLAIN_POSITION_KEY] = add_class_rows(model, contents, arrays)
            if source_grid is None:
                source_grid = recorded_grid(model, contents, arrays)
            arrays[PLAIN_POSITION_KEY], resized, hint = fit_position_table(
                model,
                arrays[PLAIN_POSITION_KEY],
                variables[PLAIN_POSITION_KEY],
                resize_method,
                source_grid,
            )
    report = LoadReport(
        path=contents.path, resized_grid=resized, layout_steps=contents.layout_steps
    )
    fits = check_keys(report, arrays, variables, skip, {PLAIN_POSITION_KEY: hint, **channel_note})
    _refuse_or_warn(report, model, strict)
    for key in fits:
        variable = variables[key]
        variable.assign(np.asarray(arrays[key], dtype=variable.dtype))
    report.loaded = fits
    _record_own_resize(model, contents)
    if resized is not None:
        (old_rows, old_cols), (new_rows, new_cols) = resized
        old_length = architecture.num_position_prefix_rows(model) + old_rows * old_cols
        warn_weights(
            f"Position embeddings resized: grid {old_rows}x{old_cols} -> {new_rows}x{new_cols} "
            f"({resize_method}; {old_length} -> {variables[PLAIN_POSITION_KEY].shape[1]} rows)."
        )
    _warn_if_zero_head(arrays, fits, contents.path)
    logger.debug("Loaded %d arrays from %s", len(fits), contents.path)
    return report


def _refuse_lora(model) -> None:
    """CheckpointError when `model` has LoRA adapters (Keras' `enable_lora`), naming one."""
    adapted = lora.lora_layers(quantized.layers_below(find_vit_model(model)))
    if adapted:
        raise CheckpointError(
            f"Cannot load a checkpoint into {model.name!r}: {len(adapted)} layers have LoRA "
            f"adapters (enable_lora, e.g. {adapted[0].path!r}), which would stay on top of the "
            "file's kernels. Load the checkpoint first, then enable LoRA (keras_vit.finetune("
            "..., lora_rank=R) does both)."
        )


def _check_rope(model, contents) -> None:
    """A DINOv3 file (RoPE, no position table) loads only into a RoPE model, and a RoPE
    model takes only such a file: the same weights under the other position scheme would
    run silently wrong (a "none" or sine-cosine model has no table to miss either).

    Raises:
        CheckpointError: naming both.
    """
    arch = architecture.Architecture.from_checkpoint_model(model)
    model_rope = arch.position_embedding == "rope"
    file_rope = contents.position_embedding == "rope"
    if model_rope != file_rope:
        raise CheckpointError(
            f"{contents.path} {'is' if file_rope else 'is not'} a DINOv3 file (rotary position "
            f"embedding) and model {model.name!r} {'has' if model_rope else 'does not have'} "
            "position_embedding='rope'; build the model with keras_vit.from_checkpoint."
        )


def resize_method_for(contents, resize_method: str | None) -> str:
    """The position-table resize to load `contents` with: `resize_method`, or when None the
    file's own (`contents.resize_method`), else "bilinear".

    Raises:
        CheckpointError: a `resize_method` other than the file's own, named with both (a
            SigLIP 2 NaFlex tower resized another way would differ from its source at
            every other grid).
    """
    own = contents.resize_method
    if resize_method is None:
        return own or "bilinear"
    if own is not None and resize_method != own:
        raise CheckpointError(
            f"resize_method={resize_method!r} but {contents.path} resizes its position table "
            f"with {own!r} at every grid (its source library's rule); leave resize_method "
            f"unset or pass {own!r}."
        )
    return resize_method


def _record_own_resize(model, contents) -> None:
    """Records the file's own resize method on the model's position tables (the default of
    `keras_vit.finetune` at another size, kept in `.keras` files)."""
    from keras_vit.layers.position_embedding import set_forward_resize_method

    if contents.resize_method is not None:
        set_forward_resize_method(find_vit_model(model), contents.resize_method)


def _check_forward_resize(model, resize_method, file_own=None) -> None:
    """ValueError when a `dynamic_image_size` model resizes its table in the forward pass
    with another method than the load is asked to use (its outputs would follow neither);
    `file_own`: the method the file records, the only one it loads with."""
    from keras_vit.layers.position_embedding import dynamic_position_layers

    for layer in dynamic_position_layers(find_vit_model(model)):
        if layer.resize_method != resize_method:
            load = "" if file_own else f"load with resize_method={layer.resize_method!r}, or "
            raise ValueError(
                f"resize_method={resize_method!r} but the model (dynamic_image_size=True) "
                f"resizes its position table with {layer.resize_method!r} in the forward "
                f"pass; {load}build it with keras_vit.from_checkpoint(..., "
                f"resize_method={resize_method!r})."
            )


def _contents(model, path, no_embed_class):
    """The `CheckpointContents` of `path` (read with the model's heads and image size as
    hints for timm files, which do not always record them), or `path` itself."""
    from keras_vit.checkpoints.base.contents import CheckpointContents
    from keras_vit.checkpoints.formats import read_checkpoint

    if isinstance(path, CheckpointContents):
        return path
    arch = architecture.Architecture.from_checkpoint_model(model)
    size = arch.image_size if arch.image_size and None not in arch.image_size else None
    return read_checkpoint(
        os.fspath(path),
        num_heads=arch.num_heads,
        no_embed_class=no_embed_class,
        image_size=size if arch.resnet_stages is None else None,
    )


def _refuse_or_warn(report, model, strict) -> None:
    """Raises (strict) or warns about the report's missing / unexpected / mismatched keys."""
    problems = ""
    if report.missing:
        problems += _format_list("missing in the file", report.missing)
    if report.unexpected:
        problems += _format_list("unexpected in the file", report.unexpected)
    if report.mismatched:
        problems += _format_list("shape mismatch", report.mismatched)
    if problems and strict:
        raise CheckpointError(
            f"Checkpoint {report.path} does not fit the model {model.name!r}:{problems}\n"
            "Nothing was loaded. Use skip=[...] or head='skip' to leave keys out, or "
            "strict=False to load what fits."
        )
    if problems:
        warn_weights(f"Checkpoint {report.path} loaded partially (the rest is ignored):{problems}")


def _warn_if_zero_head(arrays, loaded, path) -> None:
    """A loaded head kernel that is all zero (a checkpoint saved before its head was
    trained) makes every logit 0."""
    if "head/kernel" in loaded and not np.any(arrays["head/kernel"]):
        warn_weights(
            f"The head loaded from {path} is all zero: every logit is 0 (an untrained head; "
            "fine-tune it or load a trained checkpoint)."
        )


def save_npz(model, path) -> SaveReport:
    """Writes a keras_vit model's weights as an official `.npz` (vit_jax/checkpoint.py layout).

    The file has the release's flat keys and shapes (float32), so the JAX release and timm's
    npz loader read it; what the keys cannot say and differs from the release's (RoPE,
    "patch_gap" pooling, the exact GELU, LayerNorm epsilon, QuickGELU, the input scaling,
    `no_embed_class`) goes in its `keras_vit/metadata` member
    (`keras_vit.checkpoints.release.release_io`), so `from_checkpoint` rebuilds the model.
    It is written to a temporary file in the same folder and renamed into place.

    Args:
        model: a keras_vit ViT or hybrid model, or a keras.Model that contains one.
        path: destination path (used as given).

    Returns:
        A `SaveReport`: the path, `shapes` (`{official_key: shape}` of what was written),
        a one-line repr such as `SaveReport(path='mine.npz', arrays=200,
        parameters=86,567,656)`.

    Raises:
        CheckpointError: if the model has weights no official key covers (e.g. extra layers).
    """
    contents = model_contents(model)
    write_release_npz(path, contents)
    return SaveReport(os.fspath(path), {k: array.shape for k, array in contents.arrays.items()})


def load_weights_argument(model, weights, *, base_url=None, cache_dir=None) -> LoadReport:
    """Applies a builder's `weights=` argument to a freshly built model.

    Args:
        model: the built keras_vit model.
        weights: a local checkpoint path (any format `load_weights` reads); a published name
            ("ViT-B_16", "imagenet21k/ViT-B_16",
            "imagenet21k+imagenet2012/ViT-L_16-224", "augreg/<file>"); or "imagenet21k" /
            "imagenet21k+imagenet2012", resolved to the file of the model's architecture;
            or a ViT-family name of `FAMILY_CHECKPOINTS` ("facebook/dinov2-small",
            "deit_small_patch16_224"), read from its local folder in the cache.
        base_url, cache_dir: see `keras_vit.checkpoints.resolve_checkpoint`.

    Returns:
        The `LoadReport` of `load_weights(..., head="auto")`: a head of another size stays
        zero-initialised, the position table is resized to the model's image size.

    Raises:
        ValueError: neither an existing file nor a known name, or a published checkpoint of
            another architecture.
        OSError: a download that failed (the message says where to put the file by hand).
    """
    if isinstance(weights, os.PathLike):
        weights = os.fspath(weights)
    if not isinstance(weights, str):
        raise ValueError(
            "`weights` must be None, a path to an .npz checkpoint or a published checkpoint "
            f"name. Received: weights={weights!r}"
        )
    if os.path.isfile(weights) or os.path.isdir(weights):
        return load_weights(model, weights, head="auto")
    if family_entry(weights) is not None:
        local = registry.resolve_family(weights, cache_dir=cache_dir)
        return load_weights(model, local, head="auto")
    model_name = architecture.release_model_name(model)
    if registry.is_collection_name(weights):
        embed = find_vit_model(model).get_layer(names.EMBEDDING)
        entry = registry.collection_entry(weights, model_name, getattr(embed, "image_size", None))
    else:
        entry = registry.lookup(weights)
        if entry is None:
            raise ValueError(
                f"weights={weights!r} is neither an existing file nor a published checkpoint "
                f"name. Known names: {', '.join(sorted(registry.PUBLISHED_CHECKPOINTS))}, "
                "'imagenet21k', 'imagenet21k+imagenet2012', 'augreg/<file>'."
            )
        known = {e.model for e in registry.PUBLISHED_CHECKPOINTS.values()}
        if (
            (entry.model in known or entry.folder == "augreg")
            and model_name is not None
            and entry.model != model_name
        ):
            raise ValueError(
                f"weights={weights!r} is a {entry.model} checkpoint but the model is a "
                f"{model_name}."
            )
    local = registry.resolve_checkpoint(entry, base_url=base_url, cache_dir=cache_dir)
    return load_weights(model, local, head="auto")
