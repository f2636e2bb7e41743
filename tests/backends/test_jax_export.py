"""Keras' automatic JAX export of a `dynamic_image_size` model (KERAS_BACKEND=jax, in a fresh
process: tests/helpers/jax_polymorphic_export.py): PatchEmbed refuses jax2tf's unconstrained
symbolic sides in one line naming the polymorphic shape `(b, P*h, P*w, C)`, and the export
with that shape serves 32x40 images equal to the JAX model and refuses 36x40. Two jax2tf
exports and a TensorFlow load (~2 min on 2 busy cores): `large`."""

from __future__ import annotations

import pytest

from tests.backends.subset import run_subset

pytestmark = [pytest.mark.jax, pytest.mark.large]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    pytest.importorskip("jax")
    folder = tmp_path_factory.mktemp("jax_export")
    return run_subset("jax", "tests.helpers.jax_polymorphic_export", folder, env={}, timeout=600)


def test_the_error_names_the_polymorphic_shape_that_works(result):
    assert result["backend"] == "jax"
    message = result["default_error"]
    assert message is not None and "not declared multiples of the patch 8x8" in message
    assert "inconclusive" not in message  # not JAX's symbolic-comparison error
    assert result["named"] == ["(b, 8*h, 8*w, 3)"]


def test_the_named_shape_exports_and_keeps_the_patch_multiple_rule(result):
    assert result["logits_std"] > 1e-2
    assert result["difference"] < 1e-4
    assert result["refused_36"]
