"""A folder of image files, one sub-folder per class, as a data source.

Layouts: `root/<class>/<image>` (the only split is "train"; hold out with slices such as
"train[:90%]" / "train[90%:]"), or `root/<split>/<class>/<image>` (splits are the sub-folder
names, e.g. "train", "test"). Images are indexed by `keras.utils.image_dataset_from_directory`
(formats: bmp, gif, jpeg, jpg, png), checked by `keras_vit.data.image_check` (bad files
skipped or refused), then decoded and resized as Keras does; class names are the sorted
sub-folder names, labels their indices.
"""

from __future__ import annotations

import os
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_vit.data import image_check
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


def _channels_of(paths) -> int:
    """1 or 3: the channels of the first image that decodes (3 if none does)."""
    for path in paths:
        if image_check.image_problem(path) is None:
            image = tf.io.decode_image(tf.io.read_file(str(path)), expand_animations=False)
            return 1 if image.shape[-1] in (1, 2) else 3
    return 3


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
        channels=_channels_of(images),
        num_examples={name: len(_images(path)) for name, path in roots.items()},
        image_size=None,
    )


def folder_examples(root, spec: SplitSpec, image_size, channels: int, bad_images="skip"):
    """Unbatched (image float32 `(h, w, c)` in [0, 255] resized to `image_size`, label int32)
    pairs of one split, in file order, sliced per class by `spec`.

    Every file is checked first (`keras_vit.data.image_check`): with `bad_images="skip"`
    the bad ones are left out (logged), with "fail" the first one raises `BadImageError`.
    Slices are taken before bad files are left out, so a bad file never moves another file
    between "train[:90%]" and "train[90%:]".
    """
    directory = class_root(root, spec.name)
    info = describe_folder(root)
    indexed = keras.utils.image_dataset_from_directory(  # indexes only; nothing is decoded
        str(directory),
        labels="inferred",
        label_mode="int",
        class_names=list(info.class_names),
        batch_size=None,
        image_size=tuple(image_size),
        shuffle=False,
        verbose=False,
    )
    paths = list(indexed.file_paths)
    labels = np.array(
        [info.class_names.index(Path(p).relative_to(directory).parts[0]) for p in paths]
    )
    keep = np.zeros(len(labels), bool)
    keep[slice_indices(labels, spec)] = True
    candidates = [path for path, kept in zip(paths, keep, strict=True) if kept]
    usable, _ = image_check.check_images(
        candidates, bad_images, channels=channels, where=str(directory)
    )
    keep[np.flatnonzero(keep)[~np.array(usable, bool)]] = False
    kept_paths = np.array(paths)[keep]
    cmyk = [channels == 1 and image_check.is_cmyk(path) for path in kept_paths]
    dataset = tf.data.Dataset.from_tensor_slices(
        (kept_paths, labels[keep].astype("int32"), np.array(cmyk, bool))
    )
    size = tuple(int(d) for d in image_size)
    dataset = dataset.map(
        lambda path, label, rgb: (_load_image(path, size, channels, rgb), label),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return dataset, int(keep.sum())


def _load_image(path, image_size, channels, cmyk):
    """What `keras.utils.image_dataset_from_directory` does per file: decode (format from
    the content), bilinear resize, float32. A CMYK JPEG (`cmyk`) wanted in gray is decoded
    to RGB, then converted (`tf.image.rgb_to_grayscale`)."""
    data = tf.io.read_file(path)

    def as_decoded():
        return tf.io.decode_image(data, channels=channels, expand_animations=False)

    def via_rgb():
        rgb = tf.io.decode_image(data, channels=3, expand_animations=False)
        return tf.cast(tf.round(tf.image.rgb_to_grayscale(tf.cast(rgb, tf.float32))), tf.uint8)

    image = tf.cond(cmyk, via_rgb, as_decoded) if channels == 1 else as_decoded()
    image = tf.image.resize(image, image_size, method="bilinear")
    image.set_shape((*image_size, channels))
    return image
