"""Whether a `weights=` file should keep its `pre_logits` layer: decided before the build.

An original ImageNet-21k file of the release has `pre_logits` (dense + tanh) under its
21843-class head (vit_jax/checkpoint.py). The builders drop both when the model has no
pre_logits (the release's fine-tuning recipe); for prediction the file must stay whole.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from keras_vit.checkpoints.published import registry

logger = logging.getLogger(__name__)


def prediction_representation_size(weights, num_classes, hidden_dim) -> int | None:
    """The `pre_logits` width to build so that `weights` keep their pre_logits and head.

    An original ImageNet-21k file has a `pre_logits` layer under its 21843-class head; a
    model built without one would drop both (the release's fine-tuning behaviour) and give
    constant logits. When the head the user asks for has the file's size, the file is meant
    for prediction, so the builder adds the pre_logits layer. Published names are decided
    by their folder (no download); local `.npz` files by their keys (read lazily).

    Returns:
        The width, or None to build the model as asked.
    """
    if isinstance(weights, os.PathLike):
        weights = os.fspath(weights)
    if not isinstance(weights, str):
        return None
    if os.path.isfile(weights):
        try:
            with np.load(weights, allow_pickle=False) as archive:
                keys = {
                    short: key
                    for key in archive.files
                    for short in ("pre_logits/kernel", "head/bias")
                    if key == short or key.endswith("/" + short)
                }
                if "pre_logits/kernel" not in keys or "head/bias" not in keys:
                    return None
                if archive[keys["head/bias"]].shape[0] != num_classes:
                    return None
                width = int(archive[keys["pre_logits/kernel"]].shape[-1])
        except (ValueError, OSError):
            return None
    else:
        entry = registry.lookup(weights)
        folder = registry.IMAGENET21K if weights == registry.IMAGENET21K else None
        folder = folder or (entry.folder if entry is not None else None)
        if folder != registry.IMAGENET21K or num_classes != 21843:
            return None
        width = hidden_dim
    logger.info(
        "weights=%r has pre_logits (%d) under a %d-class head: building the model with "
        "representation_size=%d so both are kept for prediction.",
        weights,
        width,
        num_classes,
        width,
    )
    return width
