"""Normalising the layouts real checkpoint files use into the plain release layout.

Each step is a small named function `step(arrays) -> (arrays, message | None)` that returns
a message when it changed something (logged at INFO by `normalise_layout`). Sources: the
JAX release (`opt/target/` files), big_vision's `vit.py` (`params/` files, a top-level
`pos_embedding` added before the class token, block sub-layers numbered from 0, "scanned"
blocks stacked on a leading axis), and old hybrid files (GroupNorm arrays as (1, 1, 1, C)).
"""

from __future__ import annotations

import logging
import re

import numpy as np

from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.spec import layer_names

logger = logging.getLogger(__name__)

PREFIXES = ("opt/target/", "params/")
SCANNED_BLOCK = "Transformer/encoderblock/"
BLOCK_KEY = re.compile(f"(?P<block>{layer_names.BLOCK_KEY_PATTERN})(?P<rest>.*)")
# big_vision's Encoder1DBlock numbers its sub-modules per type; the release numbers them in
# creation order (the release's vit_jax/models_vit.py, Encoder1DBlock).
BIG_VISION_BLOCK_NAMES = {
    "MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
    "LayerNorm_1": "LayerNorm_2",
    "MlpBlock_0": "MlpBlock_3",
}
GROUP_NORM_KEY = re.compile(r"(^|/)(gn_root|gn\d+|gn_proj)/(scale|bias)$")
PLAIN_POSITION_KEY = layer_names.POSITION_KEY


def strip_prefix(arrays):
    """Removes a common `opt/target/` or `params/` prefix (optimizer / big_vision files)."""
    for prefix in PREFIXES:
        if arrays and all(key.startswith(prefix) for key in arrays):
            stripped = {key[len(prefix) :]: value for key, value in arrays.items()}
            return stripped, f"stripped the prefix {prefix!r} from {len(arrays)} keys"
    return arrays, None


def unstack_scanned_blocks(arrays):
    """Splits big_vision "scanned" blocks (`Transformer/encoderblock/...`, leading layer axis)."""
    scanned = [key for key in arrays if key.startswith(SCANNED_BLOCK)]
    if not scanned:
        return arrays, None
    depths = {arrays[key].shape[0] for key in scanned}
    if len(depths) != 1:
        raise CheckpointError(
            f"Scanned block arrays disagree on the number of layers: {sorted(depths)}."
        )
    (depth,) = depths
    out = {key: value for key, value in arrays.items() if not key.startswith(SCANNED_BLOCK)}
    for key in scanned:
        rest = key[len(SCANNED_BLOCK) :]
        for i in range(depth):
            out[layer_names.block_key(i, rest)] = arrays[key][i]
    return out, f"unstacked {len(scanned)} scanned block arrays into {depth} blocks"


def rename_big_vision_blocks(arrays):
    """Renames big_vision block sub-layers (numbered from 0) to the release's names."""
    renamed, count = {}, 0
    for key, value in arrays.items():
        match = BLOCK_KEY.fullmatch(key)
        if match:
            first, _, rest = match["rest"].partition("/")
            if first in BIG_VISION_BLOCK_NAMES:
                key = f"{match['block']}{BIG_VISION_BLOCK_NAMES[first]}/{rest}"
                count += 1
        renamed[key] = value
    if not count:
        return arrays, None
    return renamed, f"renamed {count} big_vision block keys to the release's sub-layer names"


def move_big_vision_position_table(arrays):
    """Moves a top-level `pos_embedding` (big_vision) to the release's key.

    big_vision adds the table to the patch tokens before prepending the class token, so the
    class token gets no position embedding; with a `cls` array present a zero row is
    prepended, which is exactly equivalent in the release's layout.
    """
    if "pos_embedding" not in arrays or PLAIN_POSITION_KEY in arrays:
        return arrays, None
    out = dict(arrays)
    table = out.pop("pos_embedding")
    message = "moved the top-level 'pos_embedding' (big_vision) under Transformer/posembed_input"
    if layer_names.CLASS_TOKEN in out:
        zero = np.zeros((1, 1, table.shape[-1]), table.dtype)
        table = np.concatenate([zero, table.reshape(1, -1, table.shape[-1])], axis=1)
        message += " and prepended a zero class-token row"
    out[PLAIN_POSITION_KEY] = table
    return out, message


def squeeze_group_norm(arrays):
    """Reshapes GroupNorm scale/bias stored as (1, 1, 1, C) (older hybrid files) to (C,)."""
    out, count = dict(arrays), 0
    for key, value in arrays.items():
        if GROUP_NORM_KEY.search(key) and value.ndim > 1 and all(d == 1 for d in value.shape[:-1]):
            out[key] = value.reshape(-1)
            count += 1
    if not count:
        return arrays, None
    return out, f"reshaped {count} GroupNorm arrays from (1, 1, 1, C) to (C,)"


def take_image_tower(arrays):
    """Keeps the image tower `img/` of a two-tower big_vision file (SigLIP, LiT: `img/`,
    `txt/`, temperature `t`, bias `b`) under plain keys."""
    tower = "img/"
    if not any(key.startswith(tower) for key in arrays):
        return arrays, None
    kept = {key[len(tower) :]: value for key, value in arrays.items() if key.startswith(tower)}
    return kept, f"kept the image tower 'img/' ({len(kept)} of {len(arrays)} arrays)"


LAYOUT_STEPS = (
    strip_prefix,
    take_image_tower,
    unstack_scanned_blocks,
    rename_big_vision_blocks,
    move_big_vision_position_table,
    squeeze_group_norm,
)


def normalise_layout(arrays):
    """Applies every step of `LAYOUT_STEPS` in order.

    Returns:
        `(arrays, messages)`: the arrays under the release's plain keys, and one message per
        step that changed something (each also logged at INFO).
    """
    messages = []
    for step in LAYOUT_STEPS:
        arrays, message = step(arrays)
        if message:
            logger.info("Checkpoint layout: %s.", message)
            messages.append(message)
    return arrays, messages
