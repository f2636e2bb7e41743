"""Named TensorFlow Datasets (TFDS) as a data source; never downloads.

The dataset must already be prepared in `data_dir` (or TFDS's default directory,
~/tensorflow_datasets or $TFDS_DATA_DIR). Split strings are passed to TFDS as written
("train", "train[:90%]", "test+validation", ...).
"""

from __future__ import annotations

import contextlib
import logging

import tensorflow as tf

from keras_vit.data.info import DatasetInfo
from keras_vit.data.labels import assert_labels

TFDS_PREFIX = "tfds:"


def _tfds():
    import tensorflow_datasets as tfds

    return tfds


def strip_prefix(name: str) -> str:
    """'tfds:mnist' -> 'mnist' (the prefix forces TFDS where an embedded set has the name)."""
    return name[len(TFDS_PREFIX) :] if name.startswith(TFDS_PREFIX) else name


def is_tfds_name(name: str) -> bool:
    """True if `name` (optionally 'tfds:'-prefixed, with ':version' or '/config') is a
    dataset registered in the installed tensorflow_datasets."""
    if name.startswith(TFDS_PREFIX):
        return True
    base = name.split(":")[0].split("/")[0]
    return base in _tfds().list_builders(with_community_datasets=False)


@contextlib.contextmanager
def _absl_warnings_hidden():
    """TFDS logs "Variant folder ... has no dataset_info.json" through absl while it looks
    for a dataset that is not there; the error raised below says it better."""
    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        absl_logger.setLevel(level)


def prepared_builder(name: str, data_dir=None):
    """The TFDS builder of `name`, checked to be prepared locally.

    Raises:
        ValueError: `name` is not a registered TFDS dataset.
        FileNotFoundError: the dataset is not prepared in `data_dir`; the message names the
            dataset, the directory searched and how to prepare it elsewhere.
    """
    tfds = _tfds()
    name = strip_prefix(name)
    try:
        with _absl_warnings_hidden():
            builder = tfds.builder(name, data_dir=None if data_dir is None else str(data_dir))
            prepared = builder.is_prepared()
    except tfds.core.registered.DatasetNotFoundError as error:
        raise ValueError(f"Unknown TFDS dataset. Received: source={name!r}") from error
    if not prepared:
        raise FileNotFoundError(
            f"The TFDS dataset {name!r} is not prepared in data_dir={data_dir!r} "
            f"(looked for {builder.data_dir}). keras_vit never downloads: prepare it on a "
            f"machine with network (`tfds build {name} --data_dir DIR`) and pass that DIR "
            "as data_dir."
        )
    return builder


def _label_feature(builder):
    keys = builder.info.supervised_keys
    if not keys or len(keys) != 2:
        raise ValueError(
            f"The TFDS dataset {builder.name!r} has no (image, label) supervised keys. "
            f"Received: supervised_keys={keys!r}"
        )
    label = builder.info.features[keys[1]]
    if not isinstance(getattr(label, "num_classes", None), int):
        raise ValueError(
            f"The TFDS dataset {builder.name!r} has a label feature {keys[1]!r} without a class "
            f"count (a {type(label).__name__}, not a tfds.features.ClassLabel); keras_vit "
            "trains on integer class ids in [0, num_classes)."
        )
    return builder.info.features[keys[0]], label


def describe_tfds(name: str, data_dir=None) -> DatasetInfo:
    """DatasetInfo from the prepared builder's metadata."""
    builder = prepared_builder(name, data_dir)
    image_feature, label_feature = _label_feature(builder)
    height, width, channels = image_feature.shape
    return DatasetInfo(
        name=strip_prefix(name),
        num_classes=int(label_feature.num_classes),
        class_names=tuple(label_feature.names),
        channels=1 if channels == 1 else 3,
        num_examples={key: int(split.num_examples) for key, split in builder.info.splits.items()},
        image_size=None if height is None or width is None else (int(height), int(width)),
    )


def tfds_examples(name: str, split: str, data_dir=None, shuffle_files=False, seed=0):
    """Unbatched (image uint8 `(h, w, c)`, label int32) pairs of one TFDS split; a label
    outside the ClassLabel's [0, num_classes) (as -1, "no label", in some test splits)
    raises InvalidArgumentError where it is read (`keras_vit.data.labels`)."""
    tfds = _tfds()
    builder = prepared_builder(name, data_dir)
    num_classes = _label_feature(builder)[1].num_classes
    dataset = builder.as_dataset(
        split=split,
        as_supervised=True,
        shuffle_files=shuffle_files,
        read_config=tfds.ReadConfig(shuffle_seed=seed),
    )
    where = f"the TFDS split {strip_prefix(name)}/{split}"
    return dataset.map(
        lambda image, label: (image, tf.cast(assert_labels(label, num_classes, where), tf.int32)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
