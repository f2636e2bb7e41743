"""Data pipelines for keras_vit: embedded real images, TFDS, image folders, NumPy arrays.

Public API: `load`, `describe`, `split_size`, `class_counts`, `DatasetInfo`, `Augmentation`,
`default_augmentation`, `EMBEDDED_SOURCES`; per image: `decode_pixels` (the one decoding rule
of image files), `eval_preprocess` and `train_preprocess`.
See docs/data_and_recipes.md. The names are imported on first use (PEP 562 module
`__getattr__`), so importing a light module of the folder does not start TensorFlow.
"""

from __future__ import annotations

from keras_vit._lazy import lazy_exports

# public name -> the module that defines it
_EXPORTS = {
    "DEFAULT_SOURCE": "keras_vit.data.pipeline",
    "EMBEDDED_SOURCES": "keras_vit.data.embedded",
    "Augmentation": "keras_vit.data.preprocess",
    "DatasetInfo": "keras_vit.data.info",
    "class_counts": "keras_vit.data.pipeline",
    "decodable_class_counts": "keras_vit.data.pipeline",
    "default_augmentation": "keras_vit.data.pipeline",
    "describe": "keras_vit.data.pipeline",
    "load": "keras_vit.data.pipeline",
    "split_size": "keras_vit.data.pipeline",
    "decode_pixels": "keras_vit.data.decode",
    "eval_preprocess": "keras_vit.data.preprocess",
    "train_preprocess": "keras_vit.data.preprocess",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
