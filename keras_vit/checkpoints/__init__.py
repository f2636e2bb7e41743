"""ViT checkpoints: the release's `.npz` (vit_jax/checkpoint.py), Hugging Face ViT folders,
timm `.safetensors` and `.keras` files: read (format picked by content), written, published
names.

- `read_checkpoint(path)` / `write_checkpoint(contents, path, format)`, `detect_format(path)`;
  `keras_vit.from_checkpoint(path)` (in `keras_vit.model.from_kwargs`) builds the model a file
  describes from the keywords module `from_checkpoint` reads.

- `load_weights(model, path, ...)`: the one loader, every format; `save_npz(model, path)`:
  the release's flat-key layout.
- `FAMILY_CHECKPOINTS`: the published ViT-family names (DINOv2, DeiT, ...) read from a local
  folder.
- `FORMAT_TABLE` (module `format_table`): one record per format: how it is recognised,
  reader, writer, suffix, what it can express.
- `load_weights_argument(model, weights)`: what the builders' `weights=` does.
- `PUBLISHED_CHECKPOINTS` and `resolve_checkpoint(name)`: the release's files in the
  `vit_models` bucket, fetched with `keras.utils.get_file` into the Keras cache.

The names are imported on first use (PEP 562 module `__getattr__`), so that reading the
table of formats (`keras-vit convert --help`) does not start TensorFlow.
"""

from __future__ import annotations

from keras_vit._lazy import lazy_exports

# public name -> the module that defines it
_EXPORTS = {
    "CheckpointContents": "keras_vit.checkpoints.base.contents",
    "CheckpointError": "keras_vit.checkpoints.base.errors",
    "NAMING_RULES": "keras_vit.checkpoints.base.naming",
    "NamingRule": "keras_vit.checkpoints.base.naming",
    "official_variables": "keras_vit.checkpoints.base.naming",
    "read_npz": "keras_vit.checkpoints.base.npz_io",
    "UnsupportedCheckpointError": "keras_vit.checkpoints.detect",
    "detect_format": "keras_vit.checkpoints.detect",
    "CheckpointFormat": "keras_vit.checkpoints.base.format_options",
    "FORMAT_TABLE": "keras_vit.checkpoints.format_table",
    "model_contents": "keras_vit.checkpoints.keras_files.model_io",
    "read_checkpoint": "keras_vit.checkpoints.formats",
    "write_checkpoint": "keras_vit.checkpoints.formats",
    "LoadReport": "keras_vit.checkpoints.loading",
    "SaveReport": "keras_vit.checkpoints.loading",
    "load_weights": "keras_vit.checkpoints.loading",
    "load_weights_argument": "keras_vit.checkpoints.loading",
    "save_npz": "keras_vit.checkpoints.loading",
    "PUBLISHED_CHECKPOINTS": "keras_vit.checkpoints.published.registry",
    "PublishedCheckpoint": "keras_vit.checkpoints.published.registry",
    "resolve_checkpoint": "keras_vit.checkpoints.published.registry",
    "FAMILY_CHECKPOINTS": "keras_vit.checkpoints.published.family_checkpoints",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
