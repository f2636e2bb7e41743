"""One reader and one writer for every checkpoint format, picked by content.

`read_checkpoint(path)` detects the format (`keras_vit.checkpoints.detect`) and returns a
`CheckpointContents` in the release's layout with the numerics and preprocessing the file
implies; `write_checkpoint(contents, path, format)` writes one, after checking that the
format can express the model (`format_table.check_expressible`). Both go through the table
of formats (`keras_vit.checkpoints.format_table`). `model_contents(model)`
(`keras_vit.checkpoints.model_io`) gives the contents of a built keras_vit model, so a model
and a file convert the same way.
"""

from __future__ import annotations

import logging
import os

from keras_vit.checkpoints.base import limits
from keras_vit.checkpoints.base.contents import CheckpointContents
from keras_vit.checkpoints.base.format_options import ReadOptions
from keras_vit.checkpoints.detect import detect_format
from keras_vit.checkpoints.format_table import FORMAT_TABLE, check_expressible

logger = logging.getLogger(__name__)


def read_checkpoint(
    path, *, num_heads=None, no_embed_class=None, image_size=None
) -> CheckpointContents:
    """Reads any checkpoint keras_vit knows into the release's layout.

    Args:
        path: a release/big_vision `.npz`, a `.keras` file, a Hugging Face ViT folder (or its
            `model.safetensors`), or a timm `.safetensors` file.
        num_heads: for timm files, which do not record it (default: see `timm_io`).
        no_embed_class: for timm class-token files that do not say whether `pos_embed` has a
            class row (default None: read from the file; see `timm_options`).
        image_size: `(height, width)` of the model the file goes into (a hint for timm's
            `no_embed_class`; ignored by the other formats).

    Returns:
        A `CheckpointContents`.

    Raises:
        FileNotFoundError: nothing at `path`.
        CheckpointError (a ValueError): a PyTorch pickle (refused, with how to convert it),
            a file of another kind (named), tensors that do not form a ViT, or an option the
            reader cannot hold (named).
    """
    path = os.fspath(path)
    kind = detect_format(path)
    options = ReadOptions(num_heads, no_embed_class, image_size)
    contents = FORMAT_TABLE[kind].reader(path, options)
    if contents.format != "keras":
        contents.format = kind  # "big_vision" for the npz reader's big_vision files
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


def write_checkpoint(contents: CheckpointContents, path, format: str) -> None:
    """Writes `contents` as `format` ("npz", "hf" folder, "timm" .safetensors), atomically.

    ("keras" needs a model: `model.save`, or `keras-vit convert`.)

    Raises:
        ValueError: an unknown format, or one keras_vit only reads.
        CheckpointError: a model the format cannot express (the option is named, with the
            formats that can hold it).
    """
    row = FORMAT_TABLE.get(format)
    if row is None or row.writer is None:
        writable = tuple(name for name, r in FORMAT_TABLE.items() if r.writer is not None)
        raise ValueError(f"format must be one of {writable}. Received: {format!r}")
    check_expressible(format, contents)
    row.writer(path, contents)
