"""The test split is never used for selection unless asked in so many words.

A split that picks something (the best epoch: `--validation-split`; the few-shot images and
their l2: fewshot's `--train-split`) must not hold images of the split whose figure is
reported as held out (the test split): the paper reports test accuracy of models chosen on
held-out training data ("minival", 2% of ImageNet's train), and big_vision's configs keep
the two apart the same way. `check_selection` refuses an overlap unless
`allow_test_selection=True` (`--allow-test-selection`), and logs a warning when it is
allowed, so the choice is on record.

Two split strings overlap when they name the same split and their slices (TFDS syntax,
"train[:90%]", "test[100:]"; see `keras_vit.data.splits`) share an example: computed from
the split's size when known (slices are taken per class by the in-memory and folder sources;
on the whole split's size the percent bounds agree up to rounding), else assumed for any two
slices of the same split except one-sided complements ("x[:k]" and "x[k:]").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

logger = logging.getLogger(__name__)

ALLOW_FLAG = "--allow-test-selection"


def overlaps(first: str, second: str, size: int | None = None) -> bool:
    """True when the split strings `first` and `second` can share an example.

    Args:
        first, second: split strings ("test", "train[:90%]").
        size: examples in their (common) split, or None when unknown.

    Raises:
        ValueError: an invalid split string (`keras_vit.data.splits.parse_split`).
    """
    from keras_vit.data import splits

    a, b = splits.parse_split(first), splits.parse_split(second)
    if a.name != b.name:
        return False
    if not (a.is_sliced and b.is_sliced):
        return True
    if size is None:
        return splits.complement(first) != second
    lo_a, hi_a = _interval(a, size)
    lo_b, hi_b = _interval(b, size)
    return max(lo_a, lo_b) < min(hi_a, hi_b)


def _interval(spec, size: int) -> tuple[int, int]:
    from keras_vit.data.splits import _bound

    return _bound(spec.start, size, 0), _bound(spec.stop, size, size)


def check_selection(
    selection: Mapping[str, str | None],
    scored: tuple[str, str | None],
    *,
    sizes: Mapping[str, int] | None = None,
    allow: bool = False,
) -> list[str]:
    """Refuses selection splits that overlap the scored (test) split, unless `allow`.

    Args:
        selection: {flag or field name: split string or None} of the splits that select
            (e.g. {"--validation-split": "train[90%:]"}); None entries are skipped.
        scored: (flag or field name, split string or None) of the held-out split.
        sizes: {split name: examples}, when known (`DatasetInfo.num_examples`).
        allow: True (`--allow-test-selection`): the overlaps are logged, not refused.

    Returns:
        The overlaps found, one phrase each (empty when none; logged as a warning if allowed).

    Raises:
        ValueError: an overlap without `allow`, naming each flag, its split and the rule.
    """
    scored_name, scored_split = scored
    if scored_split is None:
        return []
    found = []
    for name, split in selection.items():
        size = (sizes or {}).get(scored_split.split("[")[0])
        if split is not None and overlaps(split, scored_split, size):
            found.append(f"{name} {split!r} shares images with {scored_name} {scored_split!r}")
    if found and not allow:
        raise ValueError(
            f"{'; '.join(found)}: the split that is reported as held out would be used for "
            f"selection. Choose a split apart from it, or pass {ALLOW_FLAG} to do this on "
            "purpose (recorded in the run's config.json)."
        )
    if found:
        logger.warning(
            "Selection on the test split, as asked (%s): %s.", ALLOW_FLAG, "; ".join(found)
        )
    return found
