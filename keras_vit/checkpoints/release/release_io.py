"""The release's `.npz` (vit_jax/checkpoint.py) and big_vision's as a checkpoint format:
arrays read safely (`npz_io`), layouts normalised (`layouts`), written in the plain layout.

What the release's arrays cannot say (rotary positions, patch-token pooling beside a class
token, the GELU's form, LayerNorm epsilon, the MLP activation, the input scaling, a table
without class rows) keras_vit writes, where it differs from the release's, in one extra
member `keras_vit/metadata`: the UTF-8 bytes of a JSON object as a uint8 array, so the file
stays an archive of numeric arrays (timm's and the release's loaders read the keys they know).
"""

from __future__ import annotations

import json
import logging
import math

import numpy as np

from keras_vit.checkpoints.base import limits
from keras_vit.checkpoints.base.architecture import Architecture
from keras_vit.checkpoints.base.contents import CheckpointContents
from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.checkpoints.base.npz_io import read_npz, write_npz
from keras_vit.checkpoints.release.layouts import PLAIN_POSITION_KEY, normalise_layout
from keras_vit.layers.mlp import MLP_ACTIVATIONS
from keras_vit.layers.patch_embed import PREPROCESSING_MODES

logger = logging.getLogger(__name__)

METADATA = "keras_vit/metadata"
MAX_METADATA_BYTES = 4096
# `CheckpointContents` field -> (the release's value, the values a file may record).
RECORDED = {
    "position_embedding": (None, ("rope",)),
    "pooling": (None, ("patch_gap",)),
    "gelu_approximate": (True, (False,)),
    "layer_norm_epsilon": (1e-6, None),  # None: a positive finite number
    "mlp_activation": ("gelu", MLP_ACTIVATIONS),
    "preprocessing": ("[-1,1]", PREPROCESSING_MODES),
    "no_embed_class": (False, (True,)),
    "image_size": (None, "size"),  # only without a position table, whose grid says it
}


def read_release_npz(path, options=None) -> CheckpointContents:
    """Reads a release or big_vision `.npz` into the plain release layout.

    A release file records no numerics (the release's tanh GELU and eps 1e-6 are assumed),
    no input scaling ([-1, 1]) and no image size (the position table's square grid gives it;
    pass `image_size=` to `from_checkpoint` for a non-square grid); a file keras_vit wrote
    records in `keras_vit/metadata` what differs from the release's (see the module
    docstring).

    Raises:
        FileNotFoundError, CheckpointError: see `npz_io.read_npz`, `layouts`; a
            `keras_vit/metadata` member that is not a JSON object of known fields and
            values (named).
    """
    raw = read_npz(path)
    recorded = metadata_of(raw.pop(METADATA), path) if METADATA in raw else {}
    arrays, steps = normalise_layout(raw)
    limits.check_release_arrays(path, arrays)  # before the architecture is inferred
    heads = Architecture.from_arrays(arrays).num_heads
    return CheckpointContents(
        path=path, format="npz", arrays=arrays, num_heads=heads, layout_steps=steps, **recorded
    )


def metadata_of(member, path) -> dict:
    """The `CheckpointContents` fields a `keras_vit/metadata` member records.

    Raises:
        CheckpointError: not UTF-8 JSON of an object, an unknown field or a value outside
            `RECORDED`'s, named.
    """
    if np.size(member) > MAX_METADATA_BYTES:
        raise CheckpointError(
            f"{path}: {METADATA} holds {np.size(member)} bytes; keras_vit writes at most "
            f"{MAX_METADATA_BYTES}."
        )
    try:
        recorded = json.loads(np.asarray(member, np.uint8).tobytes().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: {METADATA} is not UTF-8 JSON ({error}).") from None
    if not isinstance(recorded, dict):
        raise CheckpointError(f"{path}: {METADATA} is not a JSON object.")
    for field, value in recorded.items():
        if field not in RECORDED:
            raise CheckpointError(
                f"{path}: {METADATA} records {field!r}, which keras_vit does not know "
                f"(it reads {tuple(RECORDED)})."
            )
        allowed = RECORDED[field][1]
        if allowed is None:
            ok = type(value) in (int, float) and math.isfinite(value) and value > 0
        elif allowed == "size":
            ok = isinstance(value, list) and len(value) == 2
            ok = ok and all(type(v) is int and 0 < v <= limits.MAX_SIZE for v in value)
            allowed = "[height, width] in pixels"
        else:
            ok = any(value == a and type(value) is type(a) for a in allowed)
        if not ok:
            raise CheckpointError(
                f"{path}: {METADATA} records {field}={value!r}; keras_vit reads "
                f"{'a positive number' if allowed is None else allowed}."
            )
    if "image_size" in recorded:
        recorded["image_size"] = tuple(recorded["image_size"])
    return recorded


def metadata_member(contents: CheckpointContents) -> np.ndarray | None:
    """The `keras_vit/metadata` member of `contents` (the fields that differ from the
    release's), or None when every field is the release's."""
    recorded = {
        field: getattr(contents, field)
        for field, (release, _) in RECORDED.items()
        if getattr(contents, field) != release and field != "image_size"
    }
    if contents.image_size is not None and PLAIN_POSITION_KEY not in contents.arrays:
        recorded["image_size"] = [int(s) for s in contents.image_size]
    if not recorded:
        return None
    if "layer_norm_epsilon" in recorded:
        recorded["layer_norm_epsilon"] = float(recorded["layer_norm_epsilon"])
    text = json.dumps(recorded, sort_keys=True).encode("utf-8")
    return np.frombuffer(text, np.uint8).copy()


def write_release_npz(path, contents: CheckpointContents) -> None:
    """Writes `contents` as a plain release `.npz` (float32), atomically, with the
    `keras_vit/metadata` member when a field differs from the release's."""
    arrays = {k: np.asarray(v, np.float32) for k, v in contents.arrays.items()}
    member = metadata_member(contents)
    if member is not None:
        arrays[METADATA] = member
    write_npz(path, arrays)
