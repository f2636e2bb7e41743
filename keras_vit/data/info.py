"""`DatasetInfo`: what a data source holds (classes, channels, split sizes, image size)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """Description of a data source, as returned by `keras_vit.data.describe`.

    Attributes:
        name: the source's name ("mnist", "digits", a TFDS name, a folder path, "arrays").
        num_classes: number of classes K (labels are 0..K-1).
        class_names: K names, index = label.
        channels: the source's own channel count (1 gray, 3 RGB).
        num_examples: examples per split, e.g. {"train": 4000, "test": 1000}.
        image_size: the natural (height, width), or None when images vary in size.
    """

    name: str
    num_classes: int
    class_names: tuple[str, ...]
    channels: int
    num_examples: dict[str, int]
    image_size: tuple[int, int] | None
