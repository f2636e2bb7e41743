"""Examples per class of a split of the embedded and folder sources, counted without
TensorFlow (labels of the embedded arrays, file listings of a folder), and the two rules on
those counts that a training run checks before any work: at least two classes, and a batch
no larger than the training split.

`keras_vit.data.sources` counts through these functions; the `keras-vit` command calls them
before TensorFlow is imported, so that a bad --batch-size or a one-class folder is refused
at once.
"""

from __future__ import annotations

import os

import numpy as np

from keras_vit.data import embedded, folder_layout
from keras_vit.data.splits import parse_split, slice_counts, slice_indices


def label_counts(labels, class_names, split) -> dict[str, int]:
    """{class name: examples of `split` (a slice such as "train[:90%]", per class)}."""
    keep = slice_indices(labels, parse_split(split))
    kept = np.bincount(labels[keep], minlength=len(class_names))
    return {name: int(count) for name, count in zip(class_names, kept, strict=True)}


def embedded_counts(source, split, shots=None, seed=0) -> dict[str, int]:
    """`label_counts` of a split of the embedded set `source` ("mnist", "digits")."""
    labels = embedded.embedded_arrays(source, parse_split(split).name, shots, seed)[1]
    return label_counts(labels, embedded.describe_embedded(source, shots, seed).class_names, split)


def folder_counts(root, split) -> dict[str, int]:
    """{class: image files of `split` of the image folder `root`} (files not decoded)."""
    spec = parse_split(split)
    counts = folder_layout.class_counts(root, spec.name)
    return dict(zip(counts, slice_counts(counts.values(), spec), strict=True))


def check_training_batches(num_examples, batch_size: int, name: str, split: str) -> None:
    """ValueError when a training pipeline of `num_examples` examples (None: unknown) at
    `batch_size` would yield no batch: training batches drop the last partial one
    (`drop_remainder=True`), so fewer examples than the batch give an epoch of 0 steps, a
    "finished" run that never updated a weight. The one home of this rule (`load`,
    `keras_vit.train.run_plan` and the `keras-vit` pre-checks call it)."""
    if num_examples is not None and num_examples < batch_size:
        raise ValueError(
            f"The batch size {batch_size} is larger than the {num_examples} training images of "
            f"{name!r} ({split}): a training pipeline drops the last partial batch, so it would "
            "yield no batch; choose a smaller batch size (--batch-size)."
        )


def class_count_problem(name, num_classes: int, class_names=()) -> str | None:
    """Why a dataset of `num_classes` classes (`class_names`) cannot train a classifier
    (fewer than two classes: a softmax over one class has a constant output and a zero loss),
    or None. Names the dataset (the folder), the classes found and the rule."""
    if num_classes >= 2:
        return None
    found = ", ".join(repr(str(c)) for c in (class_names or ())) or "none"
    where = "The folder" if os.path.isdir(str(name)) else "The dataset"
    return (
        f"{where} {name!r} has {num_classes} class ({found}); training a "
        "classifier needs at least two classes (an image folder: one sub-folder per class)."
    )
