"""A folder of image files, one sub-folder per class, as a data source.

Layouts: `root/<class>/<image>` (the only split is "train"; hold out with slices such as
"train[:90%]" / "train[90%:]"), or `root/<split>/<class>/<image>` (splits are the sub-folder
names, e.g. "train", "test"). Images are indexed, decoded and resized by
`keras.utils.image_dataset_from_directory` (formats: bmp, gif, jpeg, jpg, png); class names
are the sorted sub-folder names, labels their indices.
"""

from __future__ import annotations

import os
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_vit.data.info import DatasetInfo
from keras_vit.data.splits import SplitSpec, slice_indices

IMAGE_EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")


def _subdirs(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir())


def _images(path: Path) -> list[Path]:
    return sorted(
        Path(dirpath) / f
        for dirpath, _, files in os.walk(path)
        for f in files
        if f.lower().endswith(IMAGE_EXTENSIONS)
    )


def split_roots(root) -> dict[str, Path]:
    """{split name: class root}. `root/<split>/<class>/...` if every sub-folder of root holds
    class sub-folders and no images directly; else {"train": root}."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"Image folder not found. Received: source={str(root)!r}")
    subdirs = _subdirs(root)
    nested = subdirs and all(
        _subdirs(d) and not any(f.suffix.lower() in IMAGE_EXTENSIONS for f in d.iterdir())
        for d in subdirs
    )
    return {d.name: d for d in subdirs} if nested else {"train": root}


def class_root(root, split_name: str) -> Path:
    """The folder whose sub-folders are the classes of `split_name`."""
    roots = split_roots(root)
    if split_name not in roots:
        hint = " (use slices of 'train', e.g. 'train[90%:]')" if list(roots) == ["train"] else ""
        raise ValueError(
            f"The image folder {str(root)!r} has the splits {sorted(roots)}{hint}. "
            f"Received: split={split_name!r}"
        )
    return roots[split_name]


def class_counts(root, split_name: str) -> list[int]:
    """Images per class of `split_name`, classes in sorted order."""
    return [len(_images(d)) for d in _subdirs(class_root(root, split_name))]


def _channels_of(path: Path) -> int:
    image = tf.io.decode_image(tf.io.read_file(str(path)), expand_animations=False)
    return 1 if image.shape[-1] in (1, 2) else 3


def describe_folder(root) -> DatasetInfo:
    """DatasetInfo of an image folder (class names from the first split's sub-folders)."""
    roots = split_roots(root)
    first = roots["train"] if "train" in roots else next(iter(roots.values()))
    class_names = tuple(d.name for d in _subdirs(first))
    if not class_names:
        raise ValueError(
            f"An image folder needs one sub-folder per class. Received: source={str(root)!r}"
        )
    images = _images(first)
    if not images:
        raise ValueError(f"No {'/'.join(IMAGE_EXTENSIONS)} images under {str(first)!r}.")
    return DatasetInfo(
        name=str(root),
        num_classes=len(class_names),
        class_names=class_names,
        channels=_channels_of(images[0]),
        num_examples={name: len(_images(path)) for name, path in roots.items()},
        image_size=None,
    )


def folder_examples(root, spec: SplitSpec, image_size, channels: int, split_seed=None):
    """Unbatched (image float32 `(h, w, c)` in [0, 255] resized to `image_size`, label int32)
    pairs of one split, in file order, sliced per class by `spec` (in a random order per class
    drawn from `split_seed`, if given)."""
    directory = class_root(root, spec.name)
    info = describe_folder(root)
    color_mode = "grayscale" if channels == 1 else "rgb"
    dataset = keras.utils.image_dataset_from_directory(
        str(directory),
        labels="inferred",
        label_mode="int",
        class_names=list(info.class_names),
        color_mode=color_mode,
        batch_size=None,
        image_size=tuple(image_size),
        shuffle=False,
        interpolation="bilinear",
        verbose=False,
    )
    labels = np.array(
        [
            info.class_names.index(Path(p).relative_to(directory).parts[0])
            for p in dataset.file_paths
        ]
    )
    dataset = dataset.map(lambda image, label: (image, tf.cast(label, tf.int32)))
    indices = slice_indices(labels, spec, split_seed)
    if spec.is_sliced:
        keep = np.zeros(len(labels), bool)
        keep[indices] = True
        keep = tf.constant(keep)
        dataset = dataset.enumerate().filter(lambda i, _: keep[i]).map(lambda _, example: example)
        # the filter hides the size; Keras warns "ran out of data" on a finite unknown one
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(len(indices)))
    return dataset, len(indices)
