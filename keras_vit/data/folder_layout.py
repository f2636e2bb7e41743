"""The layout of an image folder dataset, read without TensorFlow (file listings only): which
sub-folders are splits and which are classes, and the image files of each class.

Layouts: `root/<class>/<image>` (the only split is "train") or `root/<split>/<class>/<image>`.
Image files are those with an extension of `keras_vit.spec.image_formats.IMAGE_EXTENSIONS`
(searched recursively within a class). `keras_vit.data.folder` decodes them.
"""

from __future__ import annotations

import os
from pathlib import Path

from keras_vit.spec.image_formats import IMAGE_EXTENSIONS


def subdirs(path: Path) -> list[Path]:
    """The sub-folders of `path`, sorted by name."""
    return sorted(p for p in path.iterdir() if p.is_dir())


def image_files(path: Path) -> list[Path]:
    """The image files under `path` (recursively), sorted."""
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
    folders = subdirs(root)
    nested = folders and all(
        subdirs(d) and not any(f.suffix.lower() in IMAGE_EXTENSIONS for f in d.iterdir())
        for d in folders
    )
    return {d.name: d for d in folders} if nested else {"train": root}


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
    return {d.name: len(image_files(d)) for d in subdirs(class_root(root, split_name))}
