"""NumPy arrays `(x, y)` as a data source."""

from __future__ import annotations

import numpy as np

from keras_vit._validation import check_labels
from keras_vit.data.info import DatasetInfo

MAX_CLASSES = 2**20
"""The largest class count an array source may imply (1 + its largest label): its class
names are listed, so a stray huge label (10**9) would otherwise exhaust the memory."""


def check_arrays(source) -> tuple[np.ndarray, np.ndarray]:
    """Validates an `(x, y)` pair; returns x as `(n, h, w, c)` and y as int32 `(n,)`.

    x holds pixel values in [0, 255] (uint8 or real), shaped `(n, h, w)` or `(n, h, w, c)`
    with c in {1, 3, 4}; y holds integer class ids in [0, `MAX_CLASSES`).

    Raises:
        ValueError: wrong ranks, lengths or channel counts, pixel values that are not
            finite numbers in [0, 255] (naming the first and its index), or a label that is
            no integer class id (naming the first, its index and the range).
    """
    if not (isinstance(source, (tuple, list)) and len(source) == 2):
        raise ValueError(
            "An array source must be a pair (x, y). "
            f"Received: a {type(source).__name__} of length {len(source)}"
        )
    x, y = np.asarray(source[0]), np.asarray(source[1])
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4 or x.shape[-1] not in (1, 3, 4):
        raise ValueError(
            "x must be (num_examples, height, width) or (num_examples, height, width, channels) "
            f"with 1, 3 or 4 channels. Received: x.shape={x.shape}"
        )
    if y.ndim != 1 or len(y) != len(x):
        raise ValueError(
            "y must be a 1-D array of integer labels, one per image. "
            f"Received: x.shape={x.shape}, y.shape={y.shape}"
        )
    _check_pixels(x)
    return x, check_labels(y, MAX_CLASSES, what="labels y of the (x, y) source")


def _check_pixels(x) -> None:
    """ValueError unless x holds real numbers, each finite and in [0, 255] (images already
    scaled to [-1, 1] or holding NaN would otherwise train silently on wrong pixels)."""
    if x.dtype.kind not in "iuf":
        raise ValueError(f"x must hold real pixel values in [0, 255]. Received: x.dtype={x.dtype}")
    flat = x.reshape(-1)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(flat) | (flat < 0) | (flat > 255)
    if bad.any():
        index = np.unravel_index(int(np.argmax(bad)), x.shape)
        raise ValueError(
            "x must hold finite pixel values in [0, 255] (keras_vit.data scales them to "
            f"[-1, 1] itself). Received: x[{', '.join(map(str, index))}]={flat[bad][0].item()!r}"
        )


def describe_arrays(source) -> DatasetInfo:
    """DatasetInfo of an `(x, y)` pair; classes are 0..max(y), named by their number."""
    x, y = check_arrays(source)
    num_classes = int(y.max()) + 1 if len(y) else 0
    return DatasetInfo(
        name="arrays",
        num_classes=num_classes,
        class_names=tuple(str(k) for k in range(num_classes)),
        channels=min(int(x.shape[-1]), 3),
        num_examples={"train": int(len(y))},
        image_size=(int(x.shape[1]), int(x.shape[2])),
    )


def check_array_split(split: str) -> None:
    """A pair of arrays is one split, "train" (sliced as "train[:90%]", "train[90%:]"):
    another name ("test", "validation") would silently give the same images back.

    Raises:
        ValueError: a split name other than "train", naming it.
    """
    from keras_vit.data.splits import parse_split

    name = parse_split(split).name
    if name != "train":
        raise ValueError(
            f"A pair of arrays (x, y) has one split, 'train' (slice it, e.g. 'train[:90%]' and "
            f"'train[90%:]'); received split {split!r}. Pass your test images as their own pair."
        )
