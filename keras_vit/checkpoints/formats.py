"""One reader and one writer for every checkpoint format, picked by content.

`read_checkpoint(path)` detects the format (`keras_vit.checkpoints.detect`) and returns a
`CheckpointContents` in the release's layout with the numerics and preprocessing the file
implies; `write_checkpoint(contents, path, format)` writes one. `model_contents(model)` gives
the contents of a built keras_vit model, so a model and a file convert the same way.
"""

from __future__ import annotations

import logging
import os

import keras
import numpy as np

from keras_vit.checkpoints import hf_io, limits, timm_io
from keras_vit.checkpoints.architecture import Architecture
from keras_vit.checkpoints.contents import CheckpointContents
from keras_vit.checkpoints.detect import FORMATS, detect_format
from keras_vit.checkpoints.layouts import normalise_layout
from keras_vit.checkpoints.naming import find_vit_model, official_arrays
from keras_vit.checkpoints.npz_io import CheckpointError, read_npz, write_npz
from keras_vit.layers import TransformerBlock

logger = logging.getLogger(__name__)

WRITE_FORMATS = ("npz", "keras", "hf", "timm")


def _read_npz(path) -> CheckpointContents:
    arrays, steps = normalise_layout(read_npz(path))
    limits.check_release_arrays(path, arrays)
    heads = Architecture.from_arrays(arrays).num_heads
    return CheckpointContents(
        path=path, format="npz", arrays=arrays, num_heads=heads, layout_steps=steps
    )


def _read_keras(path) -> CheckpointContents:
    limits.check_keras_archive(path)
    model = keras.saving.load_model(path, safe_mode=True, compile=False)
    contents = model_contents(model)
    contents.path, contents.format = path, "keras"
    return contents


def read_checkpoint(path, *, num_heads=None) -> CheckpointContents:
    """Reads any checkpoint keras_vit knows into the release's layout.

    Args:
        path: a release/big_vision `.npz`, a `.keras` file, a Hugging Face ViT folder (or its
            `model.safetensors`), or a timm `.safetensors` file.
        num_heads: for timm files, which do not record it (default: see `timm_io`).

    Returns:
        A `CheckpointContents`.

    Raises:
        FileNotFoundError: nothing at `path`.
        CheckpointError (a ValueError): a PyTorch pickle (refused, with how to convert it),
            a file of another kind (named), or tensors that do not form a ViT.
    """
    path = os.fspath(path)
    kind = detect_format(path)
    if kind == "npz":
        contents = _read_npz(path)
    elif kind == "hf":
        contents = hf_io.read_hf(path)
    elif kind == "timm":
        contents = timm_io.read_timm(path, num_heads=num_heads)
    else:
        contents = _read_keras(path)
    limits.check_release_arrays(path, contents.arrays)
    logger.debug(
        "Read %s as a %s checkpoint (%d arrays; GELU %s, LayerNorm eps %g, inputs %s).",
        path,
        kind,
        len(contents.arrays),
        "tanh" if contents.gelu_approximate else "exact",
        contents.layer_norm_epsilon,
        contents.preprocessing,
    )
    return contents


def model_numerics(model) -> dict:
    """`{"gelu_approximate", "layer_norm_epsilon"}` of a keras_vit model's blocks."""
    vit = find_vit_model(model)
    for layer in vit.layers:
        if isinstance(layer, TransformerBlock):
            return {
                "gelu_approximate": layer.gelu_approximate,
                "layer_norm_epsilon": layer.layer_norm_epsilon,
            }
    raise CheckpointError(f"Model {model.name!r} has no Transformer blocks.")


def model_preprocessing(model) -> str:
    """The input scaling a keras_vit model expects: "[-1,1]" (default) or "imagenet"."""
    from keras_vit.data.preprocess import model_input_preprocessing

    return model_input_preprocessing(model)


def model_contents(model) -> CheckpointContents:
    """The weights of a built keras_vit model in the release layout, with its numerics.

    Raises:
        CheckpointError: weights that no release key covers (layers added to the model).
    """
    arrays = official_arrays(model)
    arch = Architecture.from_checkpoint_model(model)
    grid, patch = arch.grid, arch.patch_size
    image_size = None if grid is None else (grid[0] * patch[0], grid[1] * patch[1])
    return CheckpointContents(
        path=model.name,
        format="model",
        arrays=arrays,
        num_heads=arch.num_heads,
        image_size=image_size if arch.resnet_stages is None else None,
        preprocessing=model_preprocessing(model),
        **model_numerics(model),
    )


def write_checkpoint(contents: CheckpointContents, path, format: str) -> None:
    """Writes `contents` as `format` ("npz", "hf" folder, "timm" .safetensors), atomically.

    ("keras" needs a model: see `keras_vit.checkpoints.from_checkpoint`.)

    Raises:
        ValueError: an unknown format.
        CheckpointError: a model the format cannot hold (named).
    """
    if format == "npz":
        if not contents.gelu_approximate or contents.layer_norm_epsilon != 1e-6:
            logger.warning(
                "The release's .npz layout implies the tanh GELU and LayerNorm eps 1e-6; these "
                "weights were trained with GELU %s and eps %g, which the file cannot record.",
                "tanh" if contents.gelu_approximate else "exact",
                contents.layer_norm_epsilon,
            )
        write_npz(path, {k: np.asarray(v, np.float32) for k, v in contents.arrays.items()})
    elif format == "hf":
        hf_io.write_hf(path, contents)
    elif format == "timm":
        timm_io.write_timm(path, contents)
    else:
        raise ValueError(f"format must be one of ('npz', 'hf', 'timm'). Received: {format!r}")


__all__ = [
    "FORMATS",
    "WRITE_FORMATS",
    "CheckpointContents",
    "detect_format",
    "model_contents",
    "model_numerics",
    "model_preprocessing",
    "read_checkpoint",
    "write_checkpoint",
]
