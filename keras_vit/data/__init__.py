"""Data pipelines for keras_vit: embedded real images, TFDS, image folders, NumPy arrays.

Public API: `load`, `describe`, `split_size`, `class_counts`, `DatasetInfo`, `Augmentation`,
`default_augmentation`, `EMBEDDED_SOURCES`; per-image functions in `keras_vit.data.preprocess`.
See docs/data_and_recipes.md.
"""

from keras_vit.data.embedded import EMBEDDED_SOURCES
from keras_vit.data.info import DatasetInfo
from keras_vit.data.pipeline import (
    DEFAULT_SOURCE,
    class_counts,
    decodable_class_counts,
    default_augmentation,
    describe,
    load,
    split_size,
)
from keras_vit.data.preprocess import Augmentation

__all__ = [
    "DEFAULT_SOURCE",
    "EMBEDDED_SOURCES",
    "Augmentation",
    "DatasetInfo",
    "class_counts",
    "decodable_class_counts",
    "default_augmentation",
    "describe",
    "load",
    "split_size",
]
