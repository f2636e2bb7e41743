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

The names are imported on first use (PEP 562 module `__getattr__`), so that reading the
table of formats (`keras-vit convert --help`) does not start TensorFlow.
"""

from __future__ import annotations

import importlib

# public name -> the module of keras_vit.checkpoints that defines it
_EXPORTS = {
    "CheckpointContents": "contents",
    "UnsupportedCheckpointError": "detect",
    "detect_format": "detect",
    "FORMAT_TABLE": "format_table",
    "CheckpointFormat": "format_table",
    "model_contents": "formats",
    "read_checkpoint": "formats",
    "write_checkpoint": "formats",
    "LoadReport": "loading",
    "SaveReport": "loading",
    "load_checkpoint": "loading",
    "load_npz": "loading",
    "load_weights": "loading",
    "load_weights_argument": "loading",
    "save_npz": "loading",
    "NAMING_RULES": "naming",
    "NamingRule": "naming",
    "official_variables": "naming",
    "CheckpointError": "npz_io",
    "read_npz": "npz_io",
    "PUBLISHED_CHECKPOINTS": "registry",
    "PublishedCheckpoint": "registry",
    "resolve_checkpoint": "registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'keras_vit.checkpoints' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
