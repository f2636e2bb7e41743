"""The zero-head guard of tests/output_checks.py fails on the outputs it exists to reject."""

import numpy as np
import pytest

import keras_vit
from tests.conftest import TINY_VIT
from tests.model_helpers import random_images
from tests.output_checks import assert_informative, assert_outputs_close, randomize_weights


def test_an_untrained_model_is_rejected_as_a_reference():
    model = keras_vit.ViT(**TINY_VIT)
    x = random_images(np.random.default_rng(0), 3, 32, 32)
    logits = model.predict(x, verbose=0)
    with pytest.raises(AssertionError, match="all zero"):
        assert_outputs_close(logits, logits)


def test_a_zero_head_kernel_with_a_bias_is_rejected():
    model = randomize_weights(keras_vit.ViT(**TINY_VIT))
    model.get_layer("head").kernel.assign(np.zeros((32, 10), np.float32))
    logits = model.predict(random_images(np.random.default_rng(0), 3, 32, 32), verbose=0)
    with pytest.raises(AssertionError, match="same for every input"):
        assert_informative(logits)


def test_randomized_weights_give_informative_logits():
    model = randomize_weights(keras_vit.ViT(**TINY_VIT))
    assert_informative(model.predict(random_images(np.random.default_rng(0), 3, 32, 32), verbose=0))


def test_randomize_weights_reaches_the_head():
    model = randomize_weights(keras_vit.ViT(**TINY_VIT), seed=1)
    assert np.abs(np.asarray(model.get_layer("head").kernel)).min() > 0
