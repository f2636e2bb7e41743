"""pyproject's filterwarnings: a warning raised inside keras_vit fails the test that did not
expect it; warnings of other libraries and the ignores the tests rely on stay as they were."""

import warnings

import pytest

from keras_vit._warnings import WeightsWarning


def _warn_from(module: str, category=UserWarning):
    code = compile("import warnings\nwarnings.warn('planted', category)", module, "exec")
    exec(code, {"__name__": module, "category": category})


def test_a_warning_inside_keras_vit_is_an_error():
    with pytest.raises(UserWarning, match="planted"):
        _warn_from("keras_vit.some_module")


def test_an_expected_warning_is_still_caught():
    with pytest.warns(UserWarning, match="planted"):
        _warn_from("keras_vit.some_module")


def test_other_libraries_and_the_kept_ignores_are_unchanged():
    with pytest.warns(UserWarning):
        _warn_from("other_library")
    with warnings.catch_warnings(record=True):
        _warn_from("keras_vit.some_module", WeightsWarning)  # ignored, as before
        _warn_from("keras_vit.some_module", DeprecationWarning)
