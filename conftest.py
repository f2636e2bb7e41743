"""Root pytest configuration: the names the docstring examples of keras_vit/ take as
imported (`np`, `keras`), for `--doctest-modules` (pyproject.toml collects keras_vit/ with
tests/; collecting keras_vit/ imports each of its modules)."""

import os

import pytest

# As tests/conftest.py, for a run that collects keras_vit/ first (`pytest keras_vit`): quiet
# TensorFlow, the deterministic precision rule instead of the host probe, and no JAX
# compilation cache in the user's cache folder.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_VIT_PRECISION_PROBE", "off")
os.environ.setdefault("KERAS_VIT_JAX_COMPILE_CACHE", "off")


@pytest.fixture(autouse=True, scope="session")
def _doctest_names(doctest_namespace):
    import keras
    import numpy as np

    doctest_namespace.update(np=np, keras=keras)
