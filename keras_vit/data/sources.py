"""The data sources behind `keras_vit.data.load` / `describe`, each behind one small interface.

A `DataSource` says which inputs it takes (`accepts`), describes them (`describe`), counts
them (`class_counts`, `split_size`), says how its splits are sliced (`per_class_slices`) and
how to name it in an error (`help`), and yields unbatched examples (`examples`);
`find_source` picks the first in `SOURCES` that accepts an input (or raises), and the
callers (`keras_vit.data.pipeline`, `keras_vit.evaluate.transfer_suite`) call its fields: nothing
outside this module branches on a source's kind. To add a source: write its module (reading
and checking the data), then one `DataSource` entry here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import tensorflow as tf

from keras_vit.data import arrays as arrays_source
from keras_vit.data import embedded, folder, split_counts, tfds_source
from keras_vit.data.preprocess import DIGIT_AUGMENTATION, NATURAL_AUGMENTATION, Augmentation
from keras_vit.data.splits import parse_split, slice_indices


@dataclasses.dataclass(frozen=True)
class ExampleOptions:
    """What `examples` may need: the output size and channels (folders decode to the
    channels, at the files' own size), the seed of per-class slices (`split_seed`),
    the TFDS directory, the shuffle (TFDS file order), the few-shot draw (embedded), what
    to do with image files that cannot be decoded (folders: "skip" or "fail",
    `keras_vit.data.image_check`)."""

    image_size: tuple[int, int]
    channels: int
    data_dir: str | None = None
    shuffle_seed: int = 0
    training: bool = False
    shots_per_class: int | None = None
    shot_seed: int = 0
    split_seed: int | None = None
    bad_images: str = "skip"


@dataclasses.dataclass(frozen=True)
class DataSource:
    """One kind of data source.

    Attributes:
        kind: its name ("embedded", "arrays", "folder", "tfds").
        accepts: `accepts(source) -> bool`.
        describe: `describe(source, data_dir, shots_per_class, shot_seed) -> DatasetInfo`.
        examples: `examples(source, split, options) -> (dataset, count or None, in_memory)`:
            unbatched `(image (h, w, c) in [0, 255], label int32)` pairs.
        class_counts: `class_counts(source, split, data_dir, shots_per_class, shot_seed)
            -> {class name: count} or None` (None: the source records no per-class sizes).
        help: how the source is named in the "Unknown data source" error.
        split_size: `split_size(source, split, data_dir) -> int or None` where the source
            records split sizes itself (TFDS); None (default): the sum of `class_counts`.
        augmentation: its default training augmentation.
        few_shot: whether it takes `shots_per_class`.
        per_class_slices: True (default) if a slice "train[:800]" is cut per class
            (stratified, `keras_vit.data.splits`); False if it takes the stored order (TFDS).
        decodable_counts: `decodable_counts(source, split, bad_images) -> {class: count}`
            for sources of files that may not decode (folders), counting only those that
            do; None (default): `class_counts` already counts usable examples.
    """

    kind: str
    accepts: Callable
    describe: Callable
    examples: Callable
    class_counts: Callable
    help: str
    split_size: Callable | None = None
    augmentation: Augmentation = NATURAL_AUGMENTATION
    few_shot: bool = False
    per_class_slices: bool = True
    decodable_counts: Callable | None = None


def _in_memory(x, y, split, split_seed=None):
    keep = slice_indices(y, parse_split(split), split_seed)
    return tf.data.Dataset.from_tensor_slices((x[keep], y[keep])), len(keep), True


def _embedded_examples(source, split, options):
    spec = parse_split(split)
    x, y = embedded.embedded_arrays(source, spec.name, options.shots_per_class, options.shot_seed)
    return _in_memory(x, y, split, options.split_seed)


def _array_examples(source, split, options):
    arrays_source.check_array_split(split)
    x, y = arrays_source.check_arrays(source)
    return _in_memory(x, y, split, options.split_seed)


def _folder_examples(source, split, options):
    dataset, count = folder.folder_examples(
        source, parse_split(split), options.channels, options.split_seed, options.bad_images
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


def _embedded_counts(source, split, data_dir, shots, seed):
    return split_counts.embedded_counts(source, split, shots, seed)


def _array_counts(source, split, data_dir, shots, seed):
    arrays_source.check_array_split(split)
    labels = arrays_source.check_arrays(source)[1]
    names = arrays_source.describe_arrays(source).class_names
    return split_counts.label_counts(labels, names, split)


def _folder_counts(source, split, data_dir, shots, seed):
    return split_counts.folder_counts(source, split)


def _tfds_split_size(source, split, data_dir):
    builder = tfds_source.prepared_builder(source, data_dir)
    try:
        return int(builder.info.splits[split].num_examples)
    except (KeyError, ValueError, TypeError):
        return None


SOURCES: tuple[DataSource, ...] = (
    DataSource(
        "arrays",
        accepts=lambda source: isinstance(source, (tuple, list)),
        describe=lambda source, data_dir, shots, seed: arrays_source.describe_arrays(source),
        examples=_array_examples,
        class_counts=_array_counts,
        help="a pair of NumPy arrays (x, y)",
    ),
    DataSource(
        "folder",
        accepts=lambda source: (
            isinstance(source, os.PathLike) or (isinstance(source, str) and os.path.isdir(source))
        ),
        describe=lambda source, data_dir, shots, seed: folder.describe_folder(source),
        examples=_folder_examples,
        class_counts=_folder_counts,
        decodable_counts=lambda source, split, bad_images: folder.decodable_class_counts(
            source, split, bad_images=bad_images
        ),
        help="an existing folder with one sub-folder per class",
    ),
    DataSource(
        "embedded",
        accepts=lambda source: isinstance(source, str) and source in embedded.EMBEDDED_SOURCES,
        describe=lambda source, data_dir, shots, seed: embedded.describe_embedded(
            source, shots, seed
        ),
        examples=_embedded_examples,
        class_counts=_embedded_counts,
        help=f"{list(embedded.EMBEDDED_SOURCES)} (embedded)",
        augmentation=DIGIT_AUGMENTATION,
        few_shot=True,
    ),
    DataSource(
        "tfds",
        accepts=lambda source: isinstance(source, str) and tfds_source.is_tfds_name(source),
        describe=lambda source, data_dir, shots, seed: tfds_source.describe_tfds(source, data_dir),
        examples=_tfds_examples,
        class_counts=lambda source, split, data_dir, shots, seed: None,
        help="a TFDS dataset name (optionally 'tfds:'-prefixed)",
        split_size=_tfds_split_size,
        per_class_slices=False,
    ),
)

_HELP_ORDER = ("embedded", "tfds", "folder", "arrays")  # the order the error lists them
_helps = [next(s.help for s in SOURCES if s.kind == kind) for kind in _HELP_ORDER]
KNOWN_SOURCES_TEXT = ", ".join(_helps[:-1]) + ", or " + _helps[-1]
"""Every source, as the "Unknown data source" error lists them (from the `help` fields)."""


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
