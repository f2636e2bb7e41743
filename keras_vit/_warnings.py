"""`WeightsWarning`: what changes a model's results is said through Python's `warnings`, so
it shows in a script or notebook without any logging set-up."""

from __future__ import annotations

import os
import sys
import warnings

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class WeightsWarning(UserWarning):
    """A weight was not what the user may expect: the head was not loaded (it stays
    zero-initialised, so every logit is 0 until trained), the position table was resized to
    another grid, a loaded head is all zero, or weights of a file or model were ignored."""


def _caller_stacklevel() -> int:
    """The stacklevel of the first frame outside keras_vit (the user's line)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        _PACKAGE_DIR + os.sep
    ):
        frame, level = frame.f_back, level + 1
    return level


def warn_weights(message: str) -> None:
    """Issues `message` as a `WeightsWarning` attributed to the user's calling line."""
    warnings.warn(message, WeightsWarning, stacklevel=_caller_stacklevel())
