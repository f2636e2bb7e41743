"""Split strings as TFDS writes them ("train", "train[:90%]", "test[100:]") for in-memory and
folder sources.

TFDS itself handles its own split strings; this module gives the embedded, array and folder
sources the same slicing syntax. Slices apply per class (each class keeps the same fraction,
files/examples in their stored order), so "train[:90%]" and "train[90%:]" are disjoint,
stratified and together cover "train". Percent boundaries round to the nearest example.
With a `seed`, each class is first put in a seeded random order (the same order for every
slice with that seed), so "train[90%:]" is a stratified, seeded random tenth of "train" and
"train[:90%]" the rest - how a validation split is carved from the training data.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

_SPLIT_RE = re.compile(r"^(?P<name>[A-Za-z_][\w-]*)(?:\[(?P<start>-?\d*%?):(?P<stop>-?\d*%?)\])?$")


@dataclasses.dataclass(frozen=True)
class SplitSpec:
    """A parsed split string: a split name and optional slice bounds ("10%", "-100", None)."""

    name: str
    start: str | None = None
    stop: str | None = None

    @property
    def is_sliced(self) -> bool:
        return self.start is not None or self.stop is not None


def parse_split(split: str) -> SplitSpec:
    """Parses "name" or "name[start:stop]" with integer or percent bounds.

    Raises:
        ValueError: for anything else (e.g. "train+test", "train[::2]").
    """
    match = _SPLIT_RE.match(split) if isinstance(split, str) else None
    if match is None:
        raise ValueError(
            "`split` must be a split name optionally sliced as TFDS writes it, e.g. 'train', "
            f"'train[:90%]', 'test[100:]'. Received: split={split!r}"
        )
    return SplitSpec(match["name"], match["start"] or None, match["stop"] or None)


def _bound(text: str | None, count: int, default: int) -> int:
    if text is None:
        return default
    if text.endswith("%"):
        value = int(round(float(text[:-1]) * count / 100.0))
    else:
        value = int(text)
    if value < 0:
        value += count
    return min(max(value, 0), count)


def complement(split: str) -> str | None:
    """The split string holding every example of `split`'s split that `split` leaves out:
    "train[90%:]" -> "train[:90%]", "train[:-200]" -> "train[-200:]"; None when `split` is
    not sliced or is sliced on both sides (its complement is not one slice).

    Raises:
        ValueError: `split` is not a valid split string (see `parse_split`).
    """
    spec = parse_split(split)
    if spec.start is not None and spec.stop is None:
        return f"{spec.name}[:{spec.start}]"
    if spec.stop is not None and spec.start is None:
        return f"{spec.name}[{spec.stop}:]"
    return None


def slice_indices(labels: np.ndarray, spec: SplitSpec, seed: int | None = None) -> np.ndarray:
    """Indices kept by `spec`'s slice, taken per class.

    Args:
        labels: int array `(num_examples,)`.
        spec: a parsed split; an unsliced spec keeps everything.
        seed: None slices each class in stored order; an int slices each class in a random
            order drawn from (seed, class id), so slices with the same seed are disjoint.

    Returns:
        Sorted int64 indices into `labels`.
    """
    labels = np.asarray(labels)
    if not spec.is_sliced:
        return np.arange(len(labels))
    kept = []
    for value in np.unique(labels):
        members = np.flatnonzero(labels == value)
        if seed is not None:
            members = np.random.default_rng([int(seed), int(value)]).permutation(members)
        start = _bound(spec.start, len(members), 0)
        stop = _bound(spec.stop, len(members), len(members))
        kept.append(members[start:stop])
    return np.sort(np.concatenate(kept)) if kept else np.zeros((0,), np.int64)


def slice_counts(class_counts, spec: SplitSpec) -> list[int]:
    """Examples kept by `spec` of each class, from classes of `class_counts` examples each
    (as `slice_indices`, without the labels: the counts do not depend on the order)."""
    return [
        max(0, _bound(spec.stop, count, count) - _bound(spec.start, count, 0))
        for count in class_counts
    ]
