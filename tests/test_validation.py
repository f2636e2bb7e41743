"""keras_vit/_validation: each check returns the value normalised or raises ValueError naming
the argument, the value and the rule; hypothesis draws the values on both sides."""

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_vit import _validation as v

NOT_NUMBERS = [None, "3", [3], (3,), object()]


def refused(check, *args, match):
    with pytest.raises(ValueError, match=match):
        check(*args)


@settings(max_examples=30, deadline=None)
@given(value=st.integers(-(10**6), 10**6))
def test_integers(value):
    assert v.check_int("n", value) == value
    assert v.check_int("n", np.int64(value)) == value
    if value > 0:
        out = v.check_positive_int("n", np.int32(value))
        assert out == value and type(out) is int
    else:
        refused(
            v.check_positive_int, "n", value, match=rf"`n` must be a positive integer.*n={value}"
        )


@pytest.mark.parametrize("value", [True, False, 1.0, 2.5, *NOT_NUMBERS])
def test_non_integers_are_refused(value):
    refused(
        v.check_int,
        "depth",
        value,
        match=rf"`depth` must be an integer.*depth={re.escape(repr(value))}",
    )
    refused(v.check_positive_int, "depth", value, match="positive integer")


@settings(max_examples=30, deadline=None)
@given(value=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-100, 100))
def test_numbers(value):
    finite = math.isfinite(value)
    if finite and value > 0:
        assert v.check_positive_number("x", value) == float(value)
    else:
        refused(v.check_positive_number, "x", value, match=r"`x` must be a finite number > 0")
    if finite and value >= 0:
        assert v.check_non_negative_number("x", value) == float(value)
    else:
        refused(v.check_non_negative_number, "x", value, match=r"finite number >= 0.*x=")
    if 0 <= value < 1:
        assert v.check_rate("rate", value) == float(value)
    else:
        refused(v.check_rate, "rate", value, match=r"`rate` must be a number in \[0, 1\)")


@pytest.mark.parametrize("value", [True, *NOT_NUMBERS])
def test_non_numbers_are_refused(value):
    for check in (v.check_positive_number, v.check_non_negative_number, v.check_rate):
        refused(check, "x", value, match=rf"x={re.escape(repr(value))}")


def test_rate_bounds():
    assert v.check_rate("r", 0) == 0.0
    refused(v.check_rate, "r", 1, match=r"r=1$")
    assert v.check_non_negative_number("w", 0) == 0.0
    refused(v.check_positive_number, "w", 0, match=r"w=0$")


@settings(max_examples=30, deadline=None)
@given(hidden_dim=st.integers(1, 512), num_heads=st.integers(1, 16))
def test_heads(hidden_dim, num_heads):
    if hidden_dim % num_heads == 0:
        assert v.check_heads(hidden_dim, num_heads) * num_heads == hidden_dim
    else:
        refused(
            v.check_heads,
            hidden_dim,
            num_heads,
            match=rf"divisible by num_heads.*hidden_dim={hidden_dim}, num_heads={num_heads}",
        )


def test_heads_without_a_width_is_refused():
    refused(v.check_heads, None, 4, match="hidden_dim=None")


def test_choice():
    assert v.check_choice("pool", "gap", ("token", "gap")) == "gap"
    refused(
        v.check_choice,
        "pool",
        "mean",
        ("token", "gap"),
        match=r"`pool` must be one of \['token', 'gap'\]. Received: pool='mean'",
    )


@settings(max_examples=30, deadline=None)
@given(a=st.integers(-3, 600), b=st.integers(-3, 600), pair=st.booleans())
def test_to_pair(a, b, pair):
    value = (a, b) if pair else a
    want = (a, b) if pair else (a, a)
    if min(want) > 0:
        assert v.to_pair("size", value) == want
        assert v.to_pair("size", list(want)) == want
    else:
        refused(v.to_pair, "size", value, match=r"`size` must be a positive integer or a pair")


@pytest.mark.parametrize("value", [(1, 2, 3), (4,), "16", 16.0, None, True, (True, 2), (2.0, 2)])
def test_to_pair_refuses(value):
    refused(v.to_pair, "patch_size", value, match=rf"patch_size={re.escape(repr(value))}")


@settings(max_examples=30, deadline=None)
@given(h=st.integers(1, 64), w=st.integers(1, 64), ph=st.integers(1, 8), pw=st.integers(1, 8))
def test_divisible(h, w, ph, pw):
    if h % ph == 0 and w % pw == 0:
        assert v.check_divisible((h, w), (ph, pw)) == (h // ph, w // pw)
    else:
        refused(
            v.check_divisible,
            (h, w),
            (ph, pw),
            match=rf"Image size \({h}, {w}\) is not divisible by the patch size \({ph}, {pw}\)",
        )


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_infinite_and_nan_are_refused(value):
    refused(v.check_positive_number, "scale", value, match=rf"scale={value!r}")
    refused(v.check_non_negative_number, "scale", value, match=rf"scale={value!r}")
    refused(v.check_rate, "scale", value, match=rf"scale={value!r}")


@settings(max_examples=60, deadline=None)
@given(side=st.integers(1, 2000), patch=st.integers(1, 64))
def test_nearest_multiples_are_the_closest_on_each_side(side, patch):
    """Each answer is a positive multiple of the patch; none lies between an answer and the
    side; a side that is a multiple answers itself."""
    found = v.nearest_multiples(side, patch)
    assert all(size > 0 and size % patch == 0 for size in found)
    if side % patch == 0:
        assert found == [side]
    else:  # by enumeration of every multiple up to one past the side
        multiples = range(patch, side + patch + 1, patch)
        lower = [m for m in multiples if m < side][-1:]
        assert found == [*lower, min(m for m in multiples if m > side)]
