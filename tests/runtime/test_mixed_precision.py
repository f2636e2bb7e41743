"""Mixed precision against float32: the same weights give the same logits, steps and exports.

Each model is built under the mixed policy with random weights (head included) and a float32
twin gets the same weights (tests/output_checks.py). Tolerances are stated as a fraction of the
float32 reference's largest magnitude (MIXED_TOLERANCE in tests/output_checks.py, with the
reasoning there).
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit.export import export_saved_model
from tests.conftest import TINY_VIT
from tests.model_helpers import random_images
from tests.output_checks import (
    MIXED_TOLERANCE,
    assert_close_to_float32,
    mixed_and_float32_models,
)
from tests.test_export import preprocess_reference

POLICIES = list(MIXED_TOLERANCE)


def tiny_vit(**overrides):
    return lambda: keras_vit.ViT(**{**TINY_VIT, **overrides})


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("pooling", ["token", "gap"])
def test_logits_match_the_float32_model(policy, pooling):
    mixed, reference = mixed_and_float32_models(tiny_vit(pooling=pooling), policy, seed=1)
    assert mixed.get_layer("encoderblock_0").compute_dtype == policy.split("_")[1]
    x = random_images(np.random.default_rng(0), 4, 32, 32)
    logits = mixed.predict(x, verbose=0)
    assert logits.dtype == np.float32
    assert_close_to_float32(logits, reference.predict(x, verbose=0), policy, "logits")


@pytest.mark.parametrize("policy", POLICIES)
def test_one_training_step_matches_the_float32_step(policy):
    """One SGD step from the same weights: the same loss and the same weight updates.

    Under mixed_float16 Keras wraps the optimizer in a LossScaleOptimizer; the scaled and
    unscaled gradients must still give the float32 update.
    """
    mixed, reference = mixed_and_float32_models(tiny_vit(), policy, seed=2)
    start = [np.asarray(w) for w in reference.get_weights()]
    x = random_images(np.random.default_rng(3), 8, 32, 32)
    y = np.arange(8) % TINY_VIT["num_classes"]
    losses, updates = [], []
    for model in (mixed, reference):
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        losses.append(model.train_on_batch(x, y))
        updates.append(
            np.concatenate(
                [(w - w0).ravel() for w, w0 in zip(model.get_weights(), start, strict=True)]
            )
        )
    np.testing.assert_allclose(losses[0], losses[1], rtol=MIXED_TOLERANCE[policy] / 3)
    assert_close_to_float32(updates[0], updates[1], policy, "weight update")


# float16 on a CPU is slow to export (~45 s on 2 cores): that case runs in the large lane, and
# tests/test_export.py's test_b14 exports a mixed_float16 model in every run
EXPORT_POLICIES = [
    pytest.param(p, marks=pytest.mark.large) if p == "mixed_float16" else p for p in POLICIES
]


@pytest.mark.parametrize("policy", EXPORT_POLICIES)
def test_export_of_a_mixed_model_serves_the_float32_logits(policy, tmp_path):
    """The SavedModel of a mixed-precision model against the float32 model on the same pixels.

    Reference: the float32 twin's `predict` on images resized and scaled by the NumPy
    preprocessing of tests/test_export.py.
    """
    mixed, reference = mixed_and_float32_models(tiny_vit(), policy, seed=4)
    path = export_saved_model(mixed, tmp_path / "serving")
    images = np.random.default_rng(5).integers(0, 256, (3, 45, 37, 3), dtype=np.uint8)
    served = tf.saved_model.load(path).signatures["serving_default"](
        images=tf.constant(images, tf.float32)
    )["logits"]
    assert served.dtype == tf.float32
    expected = reference.predict(preprocess_reference(images, (32, 32)), verbose=0)
    assert_close_to_float32(served.numpy(), expected, policy, "served logits")
