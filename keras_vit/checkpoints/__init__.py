"""Official ViT checkpoints (`.npz`, the release's vit_jax/checkpoint.py): load, save, names.

- `load_npz(model, path, ...)` / `save_npz(model, path)`: the release's flat-key layout.
- `load_weights_argument(model, weights)`: what the builders' `weights=` does.
- `PUBLISHED_CHECKPOINTS` and `resolve_checkpoint(name)`: the release's files in the
  `vit_models` bucket, fetched with `keras.utils.get_file` into the Keras cache.
"""

from keras_vit.checkpoints.loading import (
    LoadReport,
    SaveReport,
    load_npz,
    load_weights_argument,
    save_npz,
)
from keras_vit.checkpoints.naming import NAMING_RULES, NamingRule, official_variables
from keras_vit.checkpoints.npz_io import CheckpointError, read_npz
from keras_vit.checkpoints.registry import (
    PUBLISHED_CHECKPOINTS,
    PublishedCheckpoint,
    resolve_checkpoint,
)

__all__ = [
    "NAMING_RULES",
    "PUBLISHED_CHECKPOINTS",
    "CheckpointError",
    "LoadReport",
    "NamingRule",
    "PublishedCheckpoint",
    "SaveReport",
    "load_npz",
    "load_weights_argument",
    "official_variables",
    "read_npz",
    "resolve_checkpoint",
    "save_npz",
]
