"""The data sources behind `keras_vit.data.load` / `describe`, each behind one small interface.

A `DataSource` says which inputs it takes (`accepts`), describes them (`describe`) and yields
unbatched examples (`examples`); `find_source` picks the first in `SOURCES` that accepts an
input, and the pipeline dispatches once on it. To add a source: write its module (reading
and checking the data), then one `DataSource` entry here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import tensorflow as tf

from keras_vit.data import arrays as arrays_source
from keras_vit.data import embedded, folder, tfds_source
from keras_vit.data.preprocess import DIGIT_AUGMENTATION, NATURAL_AUGMENTATION, Augmentation
from keras_vit.data.splits import parse_split, slice_indices


@dataclasses.dataclass(frozen=True)
class ExampleOptions:
    """What `examples` may need: the output size and channels (folders decode to the
    channels, at the files' own size), the seed of per-class slices (`split_seed`),
    the TFDS directory, the shuffle (TFDS file order), the few-shot draw (embedded)."""

    image_size: tuple[int, int]
    channels: int
    data_dir: str | None = None
    shuffle_seed: int = 0
    training: bool = False
    shots_per_class: int | None = None
    shot_seed: int = 0
    split_seed: int | None = None


@dataclasses.dataclass(frozen=True)
class DataSource:
    """One kind of data source.

    Attributes:
        kind: its name ("embedded", "arrays", "folder", "tfds").
        accepts: `accepts(source) -> bool`.
        describe: `describe(source, data_dir, shots_per_class, shot_seed) -> DatasetInfo`.
        examples: `examples(source, split, options) -> (dataset, count or None, in_memory)`:
            unbatched `(image (h, w, c) in [0, 255], label int32)` pairs.
        augmentation: its default training augmentation.
        few_shot: whether it takes `shots_per_class`.
    """

    kind: str
    accepts: Callable
    describe: Callable
    examples: Callable
    augmentation: Augmentation = NATURAL_AUGMENTATION
    few_shot: bool = False


def _in_memory(x, y, split, split_seed=None):
    keep = slice_indices(y, parse_split(split), split_seed)
    return tf.data.Dataset.from_tensor_slices((x[keep], y[keep])), len(keep), True


def _embedded_examples(source, split, options):
    spec = parse_split(split)
    x, y = embedded.embedded_arrays(source, spec.name, options.shots_per_class, options.shot_seed)
    return _in_memory(x, y, split, options.split_seed)


def _array_examples(source, split, options):
    x, y = arrays_source.check_arrays(source)
    return _in_memory(x, y, split, options.split_seed)


def _folder_examples(source, split, options):
    dataset, count = folder.folder_examples(
        source, parse_split(split), options.channels, options.split_seed
    )
    return dataset, count, False


def _tfds_examples(source, split, options):
    dataset = tfds_source.tfds_examples(
        source,
        split,
        options.data_dir,
        shuffle_files=options.training,
        seed=options.shuffle_seed,
    )
    return dataset, None, False


SOURCES: tuple[DataSource, ...] = (
    DataSource(
        "arrays",
        accepts=lambda source: isinstance(source, (tuple, list)),
        describe=lambda source, data_dir, shots, seed: arrays_source.describe_arrays(source),
        examples=_array_examples,
    ),
    DataSource(
        "folder",
        accepts=lambda source: (
            isinstance(source, os.PathLike) or (isinstance(source, str) and os.path.isdir(source))
        ),
        describe=lambda source, data_dir, shots, seed: folder.describe_folder(source),
        examples=_folder_examples,
    ),
    DataSource(
        "embedded",
        accepts=lambda source: isinstance(source, str) and source in embedded.EMBEDDED_SOURCES,
        describe=lambda source, data_dir, shots, seed: embedded.describe_embedded(
            source, shots, seed
        ),
        examples=_embedded_examples,
        augmentation=DIGIT_AUGMENTATION,
        few_shot=True,
    ),
    DataSource(
        "tfds",
        accepts=lambda source: isinstance(source, str) and tfds_source.is_tfds_name(source),
        describe=lambda source, data_dir, shots, seed: tfds_source.describe_tfds(source, data_dir),
        examples=_tfds_examples,
    ),
)

KNOWN_SOURCES_TEXT = (
    f"{list(embedded.EMBEDDED_SOURCES)} (embedded), a TFDS dataset name (optionally "
    "'tfds:'-prefixed), an existing folder with one sub-folder per class, or a pair of "
    "NumPy arrays (x, y)"
)


def find_source(source) -> DataSource:
    """The first of `SOURCES` that accepts `source`.

    Raises:
        ValueError: naming the value and the known sources when none does.
    """
    for candidate in SOURCES:
        if candidate.accepts(source):
            return candidate
    raise ValueError(
        f"Unknown data source. Known: {KNOWN_SOURCES_TEXT}. Received: source={source!r}"
    )
