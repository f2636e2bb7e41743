"""Argument checks shared by layers and builders: each raises ValueError naming value and rule."""

from __future__ import annotations

import math
import numbers


def check_positive_int(name: str, value) -> int:
    """Returns `value` if it is an integer > 0, else raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    return int(value)


def check_int(name: str, value) -> int:
    """Returns `value` if it is an integer (not a bool), else raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"`{name}` must be an integer. Received: {name}={value!r}")
    return int(value)


def check_positive_number(name: str, value) -> float:
    """Returns `value` if it is a finite number > 0, else raises ValueError."""
    if _finite_number(value) and value > 0:
        return float(value)
    raise ValueError(f"`{name}` must be a finite number > 0. Received: {name}={value!r}")


def check_non_negative_number(name: str, value) -> float:
    """Returns `value` if it is a finite number >= 0, else raises ValueError."""
    if _finite_number(value) and value >= 0:
        return float(value)
    raise ValueError(f"`{name}` must be a finite number >= 0. Received: {name}={value!r}")


def _finite_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def check_rate(name: str, value) -> float:
    """Returns `value` if it is a number in [0, 1), else raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
        raise ValueError(f"`{name}` must be a number in [0, 1). Received: {name}={value!r}")
    return float(value)


def check_heads(hidden_dim, num_heads) -> int:
    """Returns the head width `hidden_dim // num_heads`; raises ValueError unless it divides."""
    if hidden_dim is None or hidden_dim % num_heads:
        raise ValueError(
            f"hidden_dim must be divisible by num_heads. Received: hidden_dim={hidden_dim}, "
            f"num_heads={num_heads}"
        )
    return hidden_dim // num_heads


def check_choice(name: str, value, choices) -> str:
    """Returns `value` if it is one of `choices`, else raises ValueError."""
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {list(choices)}. Received: {name}={value!r}")
    return value


def to_pair(name: str, value) -> tuple[int, int]:
    """Normalises an int or (height, width) pair to a tuple of two positive ints."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        pair = (value, value)
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        pair = tuple(value)
    else:
        raise ValueError(
            f"`{name}` must be an int or a (height, width) pair. Received: {name}={value!r}"
        )
    for v in pair:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v <= 0:
            raise ValueError(
                f"`{name}` must be a positive integer or a pair of them. Received: {name}={value!r}"
            )
    return int(pair[0]), int(pair[1])


def check_divisible(image_size: tuple[int, int], patch_size: tuple[int, int]) -> tuple[int, int]:
    """Returns the (rows, cols) patch grid, or raises if a side is not a multiple of the patch
    (the message names the nearest sides that are: `nearest_sizes`)."""
    if image_size[0] % patch_size[0] or image_size[1] % patch_size[1]:
        raise ValueError(
            f"Image size {image_size} is not divisible by the patch size {patch_size}: "
            "height and width must each be a multiple of the patch size "
            "(the image is cut into non-overlapping patches, paper section 3.1); the nearest "
            f"that work: {nearest_sizes(image_size, patch_size)}."
        )
    return image_size[0] // patch_size[0], image_size[1] // patch_size[1]


def nearest_multiples(side: int, patch: int) -> list[int]:
    """The multiples of `patch` nearest to `side`, below (if > 0) and above: 30, 16 -> [16, 32];
    `[side]` when it is one."""
    below = side // patch * patch
    if below == side:
        return [side]
    return [size for size in (below, below + patch) if size > 0]


def nearest_sizes(image_size: tuple[int, int], patch_size: tuple[int, int]) -> str:
    """`nearest_multiples` of each side as text: "16 or 32" for a square size and patch,
    else "height 16 or 32, width 160"."""
    sides = [nearest_multiples(s, p) for s, p in zip(image_size, patch_size, strict=True)]
    words = [" or ".join(str(size) for size in side) for side in sides]
    if image_size[0] == image_size[1] and patch_size[0] == patch_size[1]:
        return words[0]
    return f"height {words[0]}, width {words[1]}"


def label_problem(labels, num_classes=None) -> str | None:
    """What is wrong with the first bad label of `labels`, or None when every label is an
    integer class id in [0, `num_classes`) (in [0, 2**31), int32, when `num_classes` is None).

    A label is bad when it is not a whole number (1.5, NaN, inf, a string, a bool), or
    is negative, or is `num_classes` or more. The answer names the label, its index in
    `labels` flattened (C order) and the range, e.g. "label 7 at index 3 is outside the
    class range [0, 5)".
    """
    import numpy as np

    values = np.asarray(labels)
    flat = values.reshape(-1)
    if not flat.size:
        return None
    if values.dtype.kind not in "iuf":
        return (
            f"labels must be integer class ids, not {values.dtype} (label {flat[0]!r} at index 0)"
        )
    upper = 2**31 if num_classes is None else num_classes  # int32 class ids
    with np.errstate(invalid="ignore"):  # NaN and inf compare False, their remainder is NaN
        whole = np.isfinite(flat) & (np.mod(flat, 1) == 0) if values.dtype.kind == "f" else None
        bad = (flat < 0) | (flat >= upper)
    if whole is not None:
        bad |= ~whole
    if not bad.any():
        return None
    index = int(np.argmax(bad))
    value = flat[index].item()
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # Keras casts integer labels to the logits' float dtype
    rule = _class_range(num_classes)
    if whole is not None and not whole[index]:
        return f"label {value!r} at index {index} is not an integer class id in {rule}"
    return f"label {value!r} at index {index} is outside the class range {rule}"


def _class_range(num_classes) -> str:
    return "[0, 2**31)" if num_classes is None else f"[0, {num_classes})"


def check_labels(labels, num_classes=None, *, what: str = "labels"):
    """`labels` as an int32 NumPy array if each is an integer class id in
    [0, `num_classes`) (see `label_problem`), else ValueError naming the first bad label,
    its index and the range (`what` says where the labels came from)."""
    import numpy as np

    problem = label_problem(labels, num_classes)
    if problem is not None:
        raise ValueError(f"Bad {what}: {problem}.")
    return np.asarray(labels).astype(np.int32)
