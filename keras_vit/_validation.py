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
    """Returns the (rows, cols) patch grid, or raises if a side is not a multiple of the patch."""
    if image_size[0] % patch_size[0] or image_size[1] % patch_size[1]:
        raise ValueError(
            f"Image size {image_size} is not divisible by the patch size {patch_size}: "
            "height and width must each be a multiple of the patch size "
            "(the image is cut into non-overlapping patches, paper section 3.1)."
        )
    return image_size[0] // patch_size[0], image_size[1] // patch_size[1]
