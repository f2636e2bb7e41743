"""A folder of image files, one sub-folder per class, as a data source.

Layouts: `root/<class>/<image>` (the only split is "train"; hold out with slices such as
"train[:90%]" / "train[90%:]"), or `root/<split>/<class>/<image>` (splits are the sub-folder
names, e.g. "train", "test"). Images (bmp, gif, jpeg, jpg, png, webp) are checked by
`keras_vit.data.image_check` (bad files skipped or refused), then decoded at their own
resolution by keras_vit's one decoding rule (`keras_vit.data.decode`); the pipeline then
crops (training) and resizes them. Class names are the sorted sub-folder names, labels
their indices.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_vit.data import image_check
from keras_vit.data.decode import decode_pixels
from keras_vit.data.info import DatasetInfo
from keras_vit.data.splits import SplitSpec, slice_indices
from keras_vit.spec.image_formats import IMAGE_EXTENSIONS

logger = logging.getLogger(__name__)


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


def class_counts(root, split_name: str) -> dict[str, int]:
    """{class (sub-folder) name: image files}, of `split_name`, classes in sorted order."""
    return {d.name: len(_images(d)) for d in _subdirs(class_root(root, split_name))}


CHANNEL_SAMPLE = 16  # images decoded to choose a folder's channels


def _channels_of(paths, folder) -> int:
    """1 or 3: the channels of a folder's images, from up to `CHANNEL_SAMPLE` decodable ones
    spread evenly over `paths` (3 if none decodes); a GIF of equal RGB counts as gray.
    Colour wins: a folder that mixes gray and colour images is read in colour (the gray
    ones repeated to 3 channels), with a warning, rather than losing the colour of the later
    ones."""
    step = max(1, len(paths) // CHANNEL_SAMPLE)
    found = set()
    for path in paths[::step][:CHANNEL_SAMPLE]:
        if image_check.image_problem(path) is None:
            found.add(3 if _in_colour(path) else 1)
    if found == {1, 3}:
        logger.warning(
            "The images under %s mix gray and colour; reading all of them in colour (3 channels).",
            folder,
        )
    return 1 if found == {1} else 3


def _in_colour(path) -> bool:
    """Whether the image file at `path` holds colour: 3 or 4 decoded channels, except a GIF
    (which has no gray form: it decodes to RGB) whose red, green and blue are equal."""
    data = Path(path).read_bytes()  # read once: decoded here, its signature checked below
    pixels = np.asarray(decode_pixels(data))
    if pixels.shape[-1] < 3:
        return False
    red, green, blue = (pixels[..., i] for i in range(3))
    is_gif = data[:6] in (b"GIF87a", b"GIF89a")
    return not is_gif or bool(np.any(red != green) or np.any(green != blue))


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
        channels=_channels_of(images, str(first)),
        num_examples={name: len(_images(path)) for name, path in roots.items()},
        image_size=None,
    )


def folder_files(root, split_name: str, class_names) -> tuple[list[str], np.ndarray]:
    """(image paths, int labels) of one split: classes in `class_names` order, files sorted
    (recursively) within each class."""
    directory = class_root(root, split_name)
    paths, labels = [], []
    for label, name in enumerate(class_names):
        folder = directory / name
        files = _images(folder) if folder.is_dir() else []
        paths += [str(path) for path in files]
        labels += [label] * len(files)
    return paths, np.asarray(labels, np.int32)


def decode(path, channels: int):
    """One image file decoded at its own resolution: float32 `(h, w, channels)` in [0, 255]
    (`keras_vit.data.decode.decode_pixels`; the first frame of a GIF)."""
    image = decode_pixels(tf.io.read_file(path), channels)
    image.set_shape([None, None, channels])
    return tf.cast(image, tf.float32)


def folder_examples(root, spec: SplitSpec, channels: int, split_seed=None, bad_images="skip"):
    """Unbatched (image float32 `(h, w, c)` in [0, 255] at the file's own resolution, label
    int32) pairs of one split, in file order, sliced per class by `spec` (in a random order
    per class drawn from `split_seed`, if given). The pipeline crops (training) and resizes
    afterwards, so the Inception crop sees every pixel of the original, as in the release's
    input pipeline.

    The chosen files are checked first (`keras_vit.data.image_check`): with
    `bad_images="skip"` the bad ones are left out (logged), with "fail" the first one raises
    `BadImageError`. Slices are taken before bad files are left out, so a bad file never
    moves another file between "train[:90%]" and "train[90%:]".
    """
    info = describe_folder(root)
    paths, labels = folder_files(root, spec.name, info.class_names)
    indices = slice_indices(labels, spec, split_seed)
    candidates = [paths[i] for i in indices]
    usable, _ = image_check.check_images(
        candidates, bad_images, channels=channels, where=str(class_root(root, spec.name))
    )
    indices = np.asarray(indices)[np.asarray(usable, bool)]
    kept_paths = np.asarray(paths, dtype=object)[indices].astype(str)
    chosen = tf.data.Dataset.from_tensor_slices((kept_paths, labels[indices]))
    dataset = chosen.map(
        lambda path, label: (decode(path, channels), label),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return dataset, len(indices)


def decodable_class_counts(root, split: str, *, bad_images: str = "skip") -> dict[str, int]:
    """{class name: images that decode} of `split` (a slice such as "train[:90%]" taken as
    `keras_vit.data.load` takes it, before bad files are left out) of the image folder
    `root`: the files `load` keeps, so that `check_shots` counts what a draw can take (a
    corrupt, empty, oversized or unknown file is not an image of its class).

    Raises:
        keras_vit.data.image_check.BadImageError: with `bad_images="fail"`, the first bad
            file (as `load` would raise later).
        ValueError: unknown split.
    """
    from keras_vit.data.splits import parse_split

    spec = parse_split(split)
    info = describe_folder(root)
    paths, labels = folder_files(root, spec.name, info.class_names)
    chosen = np.asarray(slice_indices(labels, spec), dtype=np.int64)
    usable, _ = image_check.check_images(
        [paths[i] for i in chosen], bad_images, channels=info.channels, where=str(root)
    )
    kept = np.bincount(labels[chosen[np.asarray(usable, bool)]], minlength=info.num_classes)
    return {name: int(count) for name, count in zip(info.class_names, kept, strict=True)}
