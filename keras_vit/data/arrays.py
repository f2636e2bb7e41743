"""NumPy arrays `(x, y)` as a data source."""

from __future__ import annotations

import numpy as np

from keras_vit.data.info import DatasetInfo


def check_arrays(source) -> tuple[np.ndarray, np.ndarray]:
    """Validates an `(x, y)` pair; returns x as `(n, h, w, c)` and y as int32 `(n,)`.

    x holds pixel values in [0, 255] (uint8 or real), shaped `(n, h, w)` or `(n, h, w, c)`
    with c in {1, 3, 4}; y holds integer class ids >= 0.

    Raises:
        ValueError: wrong ranks, lengths, channel counts or non-integer labels.
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
    if len(y) and (not np.all(np.equal(np.mod(y, 1), 0)) or y.min() < 0):
        raise ValueError(f"y must hold integer class ids >= 0. Received: y[:5]={y[:5]!r}")
    return x, y.astype(np.int32)


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
