"""The release's `.npz` (vit_jax/checkpoint.py) and big_vision's as a checkpoint format:
arrays read safely (`npz_io`), layouts normalised (`layouts`), written in the plain layout."""

from __future__ import annotations

import logging

import numpy as np

from keras_vit.checkpoints.base import limits
from keras_vit.checkpoints.base.architecture import Architecture
from keras_vit.checkpoints.base.contents import CheckpointContents
from keras_vit.checkpoints.base.npz_io import read_npz, write_npz
from keras_vit.checkpoints.release.layouts import normalise_layout

logger = logging.getLogger(__name__)


def read_release_npz(path, options=None) -> CheckpointContents:
    """Reads a release or big_vision `.npz` into the plain release layout.

    The file records no numerics (the release's tanh GELU and eps 1e-6 are assumed), no
    input scaling ([-1, 1]) and no image size (the position table's square grid gives it;
    pass `image_size=` to `from_checkpoint` for a non-square grid).

    Raises:
        FileNotFoundError, CheckpointError: see `npz_io.read_npz`, `layouts`.
    """
    arrays, steps = normalise_layout(read_npz(path))
    limits.check_release_arrays(path, arrays)  # before the architecture is inferred
    heads = Architecture.from_arrays(arrays).num_heads
    return CheckpointContents(
        path=path, format="npz", arrays=arrays, num_heads=heads, layout_steps=steps
    )


def write_release_npz(path, contents: CheckpointContents) -> None:
    """Writes `contents` as a plain release `.npz` (float32), atomically; warns when the
    weights' numerics are not the release's (the file cannot record them)."""
    if not contents.gelu_approximate or contents.layer_norm_epsilon != 1e-6:
        logger.warning(
            "The release's .npz layout implies the tanh GELU and LayerNorm eps 1e-6; these "
            "weights were trained with GELU %s and eps %g, which the file cannot record.",
            "tanh" if contents.gelu_approximate else "exact",
            contents.layer_norm_epsilon,
        )
    write_npz(path, {k: np.asarray(v, np.float32) for k, v in contents.arrays.items()})
