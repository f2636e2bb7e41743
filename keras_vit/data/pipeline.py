"""`load` and `describe`: one entry point for every data source, as `tf.data` pipelines.

Sources: the embedded "mnist" (default) and "digits" sets, a TFDS name, a folder of images
(one sub-folder per class) or a pair of NumPy arrays `(x, y)`. Every pipeline yields
`(images, labels)` with images float32 `(batch, height, width, channels)` in [-1, 1]
(the scaling of the release, (x - 127.5) / 127.5) and labels int32 `(batch,)` (or one-hot
float32 `(batch, num_classes)`), mapped in parallel and prefetched.
"""

from __future__ import annotations

import logging

import tensorflow as tf

from keras_vit._validation import check_positive_int, to_pair
from keras_vit.data import embedded
from keras_vit.data.preprocess import (
    NO_AUGMENTATION,
    Augmentation,
    eval_preprocess,
    train_preprocess,
)
from keras_vit.data.sources import KNOWN_SOURCES_TEXT as KNOWN_SOURCES_TEXT
from keras_vit.data.sources import DataSource, ExampleOptions, find_source
from keras_vit.data.split_counts import check_training_batches as check_training_batches

logger = logging.getLogger(__name__)

DEFAULT_SOURCE = "mnist"
SHUFFLE_BUFFER = 10_000


def source_kind(source) -> str:
    """Classifies a source: "embedded", "arrays", "folder" or "tfds" (see
    `keras_vit.data.sources`).

    Raises:
        ValueError: naming the value and the known sources when it is none of them.
    """
    return find_source(source).kind


def default_augmentation(source) -> Augmentation:
    """The source's training augmentation: mild crop and no flip for the embedded digit
    sets ("mnist", "digits"), the release's Inception crop + flip otherwise."""
    return find_source(source).augmentation


def describe(source=DEFAULT_SOURCE, *, data_dir=None, shots_per_class=None, shot_seed=0):
    """Describes a data source without building a pipeline.

    Args:
        source: as in `load`.
        data_dir: TFDS data directory (TFDS sources only).
        shots_per_class, shot_seed: as in `load` (embedded sources only).

    Returns:
        A `DatasetInfo(name, num_classes, class_names, channels, num_examples, image_size)`.

    Raises:
        ValueError: unknown source. FileNotFoundError: a TFDS dataset not prepared locally.
    """
    kind = find_source(source)
    _check_shots(kind, shots_per_class)
    return kind.describe(source, data_dir, shots_per_class, shot_seed)


def split_size(source, split, *, data_dir=None, shots_per_class=None, shot_seed=0) -> int | None:
    """Examples in `split` of `source` (a slice such as "train[:90%]" counted exactly as
    `load` takes it); None for a TFDS split whose size TFDS does not record.

    Raises:
        ValueError: unknown source or split.
    """
    kind = find_source(source)
    _check_shots(kind, shots_per_class)
    if kind.split_size is not None:  # a source that records its split sizes (TFDS)
        return kind.split_size(source, split, data_dir)
    counts = kind.class_counts(source, split, data_dir, shots_per_class, shot_seed)
    return sum(counts.values())


def class_counts(
    source, split, *, data_dir=None, shots_per_class=None, shot_seed=0
) -> dict[str, int] | None:
    """Examples of each class in `split` of `source`, {class name: count} (a slice such as
    "train[:90%]" counted exactly as `load` takes it, per class), without decoding an image:
    the labels of the embedded and array sources, the file lists of a folder (a file that
    turns out not to decode is still counted). None for a TFDS source: TFDS records the
    sizes of splits, not of classes.

    Raises:
        ValueError: unknown source or split.
    """
    kind = find_source(source)
    _check_shots(kind, shots_per_class)
    return kind.class_counts(source, split, data_dir, shots_per_class, shot_seed)


def decodable_class_counts(source, split, *, bad_images="skip") -> dict[str, int] | None:
    """Like `class_counts`, counting only the files that decode (the examples `load` keeps),
    for sources of files (folders); None for the others, whose `class_counts` are exact.

    Raises:
        ValueError: unknown source or split.
        keras_vit.data.image_check.BadImageError: `bad_images="fail"` and a file is bad.
    """
    kind = find_source(source)
    if kind.decodable_counts is None:
        return None
    return kind.decodable_counts(source, split, bad_images)


def _check_shots(kind: DataSource, shots_per_class):
    if shots_per_class is not None and not kind.few_shot:
        raise ValueError(
            "`shots_per_class` applies to the embedded sources "
            f"{list(embedded.EMBEDDED_SOURCES)} only. Received: shots_per_class={shots_per_class}"
        )


def _resolve_augmentation(source, augment) -> Augmentation:
    if augment is None:
        return default_augmentation(source)
    if isinstance(augment, str) and augment == "none" or augment is False:
        return NO_AUGMENTATION
    if isinstance(augment, Augmentation):
        return augment
    raise ValueError(
        "`augment` must be None (the source's default), 'none' or a keras_vit.data.Augmentation. "
        f"Received: augment={augment!r}"
    )


def raw_examples(source, split, *, image_size, channels, data_dir, shuffle_seed, training, **kw):
    """Unbatched (image `(h, w, c)` in [0, 255], label int32) pairs before preprocessing.

    Returns:
        (dataset, number of examples or None if unknown, whether it is held in memory).
    """
    options = ExampleOptions(
        image_size=image_size,
        channels=channels,
        data_dir=data_dir,
        shuffle_seed=shuffle_seed,
        training=training,
        shots_per_class=kw.get("shots_per_class"),
        shot_seed=kw.get("shot_seed", 0),
        split_seed=kw.get("split_seed"),
        bad_images=kw.get("bad_images", "skip"),
    )
    return find_source(source).examples(source, split, options)


def load(
    source=DEFAULT_SOURCE,
    split="train",
    *,
    image_size,
    batch_size,
    training,
    channels=None,
    data_dir=None,
    shuffle_seed=0,
    augment=None,
    shots_per_class=None,
    shot_seed=0,
    one_hot=False,
    cache=None,
    split_seed=None,
    bad_images="skip",
) -> tf.data.Dataset:
    """A `tf.data` pipeline of `(images, labels)` batches from any supported source.

    Evaluation (`training=False`): resize to `image_size` (bilinear; exact when the size
    already matches), convert channels, scale to [-1, 1]; deterministic order; the last
    partial batch is kept. Training: shuffle (seeded), Inception crop -> resize -> optional
    flip -> optional RandAugment, scale, batch with `drop_remainder=True`, optional MixUp.
    Maps run in parallel (AUTOTUNE) and the result is prefetched.

    Args:
        source: "mnist" (embedded MNIST subset, default), "digits" (embedded UCI digits), a
            TFDS name ("cifar100", "tfds:mnist"), a folder path, or a pair `(x, y)` of NumPy
            arrays (x `(n, h, w)` or `(n, h, w, c)` pixel values in [0, 255], y int labels).
        split: split name with optional TFDS-style slice: "train", "test", "train[:90%]",
            "train[90%:]". Embedded sets have "train" and "test"; arrays and flat folders only
            "train" (slice it to hold out); TFDS takes any split string TFDS accepts.
        image_size: int or (height, width) of the output images.
        batch_size: global batch size, or None for unbatched examples.
        training: True for the shuffled, augmented training pipeline.
        channels: None keeps the source's channels (1 for the embedded digit sets, 3 for RGB);
            1, 3 or 4 converts (gray is repeated to RGB; RGB becomes luma; alpha is dropped,
            or added opaque for 4; `keras_vit.data.decode.to_channels`).
        data_dir: TFDS data directory (default: TFDS's own). Nothing is ever downloaded.
        shuffle_seed: seed of the shuffle and of every random augmentation (reproducible).
        augment: None (the source's default, see `default_augmentation`), "none", or an
            `Augmentation`. Ignored when `training=False`.
        shots_per_class: embedded sets only: "train" is `shots_per_class` examples per class
            drawn with `shot_seed` from the whole set and "test" is every other example.
        shot_seed: seed of the few-shot draw (default 0).
        one_hot: labels as one-hot float32 `(batch, num_classes)` (always so with MixUp).
        cache: True caches the decoded examples (before augmentation) in memory: worth it for
            small folder/TFDS sources read for several epochs. Default None (no cache; the
            embedded and array sources are in memory anyway).
        split_seed: None slices each class in stored order; an int takes the slices of
            `split` from a seeded random order per class (embedded, array and folder sources;
            see `keras_vit.data.splits`), so "train[:90%]" and "train[90%:]" with the same
            seed are a stratified random split. TFDS slices its own way and ignores it.
        bad_images: folder sources: "skip" (default; bad files left out, count and names
            logged) or "fail" (`keras_vit.data.image_check.BadImageError` naming the file);
            see `keras_vit.data.image_check`.

    Returns:
        A `tf.data.Dataset` of (float32 `(batch, height, width, channels)` in [-1, 1],
        int32 `(batch,)` or float32 `(batch, num_classes)`).

    Raises:
        ValueError: unknown source (naming the known ones), bad split, sizes or channels;
            `training=True` with fewer examples than `batch_size` (no batch at all,
            `check_training_batches`); array labels that are no integer class id and pixels
            that are not finite values in [0, 255] (`keras_vit.data.arrays.check_arrays`).
        FileNotFoundError: a TFDS dataset that is not prepared in `data_dir`.
    """
    size = to_pair("image_size", image_size)
    if batch_size is not None:
        check_positive_int("batch_size", batch_size)
    if channels is not None and channels not in (1, 3, 4):
        raise ValueError(f"`channels` must be None, 1, 3 or 4. Received: channels={channels!r}")
    _check_shots(find_source(source), shots_per_class)
    info = describe(source, data_dir=data_dir, shots_per_class=shots_per_class, shot_seed=shot_seed)
    channels = info.channels if channels is None else channels
    augmentation = _resolve_augmentation(source, augment) if training else NO_AUGMENTATION
    if augmentation.randaugment and channels != 3:
        raise ValueError(f"RandAugment needs 3 channels. Received: channels={channels}")
    dataset, count, in_memory = raw_examples(
        source,
        split,
        image_size=size,
        channels=channels,
        data_dir=data_dir,
        shuffle_seed=shuffle_seed,
        training=training,
        shots_per_class=shots_per_class,
        shot_seed=shot_seed,
        split_seed=split_seed,
        bad_images=bad_images,
    )
    logger.debug("data %s split %s: %s examples", info.name, split, count)
    if training and batch_size is not None:
        check_training_batches(count, batch_size, info.name, split)
    if cache and not in_memory:
        dataset = dataset.cache()
    if training:
        buffer = count if in_memory and count else SHUFFLE_BUFFER
        dataset = dataset.shuffle(max(buffer, 1), seed=shuffle_seed, reshuffle_each_iteration=True)
        dataset = _augment(dataset, size, channels, augmentation, shuffle_seed)
    else:
        dataset = dataset.map(
            lambda image, label: (eval_preprocess(image, size, channels), label),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
    if one_hot or augmentation.mixup_alpha is not None:
        depth = info.num_classes
        dataset = dataset.map(lambda image, label: (image, tf.one_hot(label, depth)))
    if batch_size is not None:
        dataset = dataset.batch(
            batch_size, drop_remainder=training, num_parallel_calls=tf.data.AUTOTUNE
        )
        if augmentation.mixup_alpha is not None:
            dataset = _mixup(dataset, augmentation.mixup_alpha, shuffle_seed)
    return dataset.prefetch(tf.data.AUTOTUNE)


def _augment(dataset, size, channels, augmentation: Augmentation, seed: int):
    """Pairs each example with a fresh stateless seed (new every epoch) and applies the
    training preprocessing, then RandAugment if asked."""
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)
    dataset = tf.data.Dataset.zip((dataset, seeds)).map(
        lambda example, pair: (
            train_preprocess(example[0], pair, size, channels, augmentation),
            example[1],
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    if augmentation.randaugment:
        import keras

        layer = keras.layers.RandAugment(value_range=(-1.0, 1.0), seed=seed)
        dataset = dataset.map(
            lambda image, label: (layer(image), label), num_parallel_calls=tf.data.AUTOTUNE
        )
    return dataset


def _mixup(dataset, alpha: float, seed: int):
    """keras.layers.MixUp on each batch of (images, one-hot labels)."""
    import keras

    layer = keras.layers.MixUp(alpha=alpha, seed=seed)

    def mix(images, labels):
        mixed = layer({"images": images, "labels": labels})
        return mixed["images"], mixed["labels"]

    return dataset.map(mix, num_parallel_calls=tf.data.AUTOTUNE)
