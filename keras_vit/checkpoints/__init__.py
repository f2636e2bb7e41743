"""ViT checkpoints: the release's `.npz` (vit_jax/checkpoint.py), Hugging Face ViT folders,
timm `.safetensors` and `.keras` files: read (format picked by content), written, published
names.

- `read_checkpoint(path)` / `write_checkpoint(contents, path, format)`, `detect_format(path)`;
  `keras_vit.from_checkpoint(path)` (in `keras_vit.build_any`) builds the model a file
  describes from the keywords module `from_checkpoint` reads.

- `load_weights(model, path, ...)`: the one loader, every format (`load_npz` and
  `load_checkpoint` are its deprecated names); `save_npz(model, path)`: the release's
  flat-key layout.
- `FORMAT_TABLE` (module `format_table`): one record per format: how it is recognised,
  reader, writer, suffix, what it can express.
- `load_weights_argument(model, weights)`: what the builders' `weights=` does.
- `PUBLISHED_CHECKPOINTS` and `resolve_checkpoint(name)`: the release's files in the
  `vit_models` bucket, fetched with `keras.utils.get_file` into the Keras cache.
"""

from keras_vit.checkpoints.contents import CheckpointContents
from keras_vit.checkpoints.detect import UnsupportedCheckpointError, detect_format
from keras_vit.checkpoints.format_table import FORMAT_TABLE, CheckpointFormat
from keras_vit.checkpoints.formats import model_contents, read_checkpoint, write_checkpoint
from keras_vit.checkpoints.loading import (
    LoadReport,
    SaveReport,
    load_checkpoint,
    load_npz,
    load_weights,
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
    "FORMAT_TABLE",
    "CheckpointFormat",
    "load_weights",
    "NAMING_RULES",
    "PUBLISHED_CHECKPOINTS",
    "CheckpointContents",
    "CheckpointError",
    "UnsupportedCheckpointError",
    "detect_format",
    "load_checkpoint",
    "model_contents",
    "read_checkpoint",
    "write_checkpoint",
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
