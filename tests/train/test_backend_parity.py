"""The default `keras-vit train` recipe steps alike on TensorFlow and on JAX: from the same
initial weights over the same batches (MNIST in order, no augmentation; the recipe has no
dropout), the loss gradient of the first batch agrees within 1e-5 and
the losses and weights (but the attention's key biases, whose gradient is zero in exact
arithmetic) of 20 optimizer steps (AdamW with its decay exclusions, warmup
schedule, global clipnorm, label smoothing; XLA on) agree as float32 rounding allows. Each
backend runs tests/helpers/recipe_steps.py in its own process."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest

from tests.backends.subset import run_subset

STEPS = 20  # tests/helpers/recipe_steps.py's default


def _initial_weights(folder):
    """The recipe's initial weights (seed 0) with a random head (the recipe's is zero, which
    would leave every gradient below the head zero), saved to folder/initial.npz."""
    from keras_vit.train.training import TrainConfig

    keras.utils.set_random_seed(0)
    model = TrainConfig().build(10, 1)
    weights = model.get_weights()
    rng = np.random.default_rng(0)
    for i, variable in enumerate(model.weights):
        if variable.path.startswith("head/"):
            weights[i] = rng.normal(0, 0.05, weights[i].shape).astype("float32")
    np.savez(os.path.join(folder, "initial.npz"), **{f"w{i}": w for i, w in enumerate(weights)})
    return [variable.path for variable in model.weights]


def _arrays(folder, name):
    with np.load(os.path.join(folder, name)) as archive:
        return [archive[f"arr_{i}"] for i in range(len(archive.files))]


@pytest.mark.large  # two processes, ~2 min (.ci/run_jax)
@pytest.mark.jax
def test_tensorflow_and_jax_train_the_recipe_alike(tmp_path):
    pytest.importorskip("jax")
    paths = _initial_weights(tmp_path)
    losses = {}
    for backend in ("tensorflow", "jax"):
        env = {"JAX_PLATFORMS": "cpu", "KERAS_VIT_PRECISION_PROBE": "off"}
        result = run_subset(backend, "tests.helpers.recipe_steps", tmp_path, env=env, timeout=900)
        assert result["backend"] == backend
        losses[backend] = np.array(result["losses"])
    assert len(losses["jax"]) == STEPS
    np.testing.assert_allclose(losses["jax"], losses["tensorflow"], atol=1e-5)
    assert losses["tensorflow"][-1] < losses["tensorflow"][0]  # it trains
    gradients = [_arrays(tmp_path, f"{b}_gradient.npz") for b in ("tensorflow", "jax")]
    for path, expected, actual in zip(paths, *gradients, strict=True):
        np.testing.assert_allclose(actual, expected, atol=1e-5, err_msg=path)
    trained = [_arrays(tmp_path, f"{b}_weights.npz") for b in ("tensorflow", "jax")]
    for path, expected, actual in zip(paths, *trained, strict=True):
        if path.endswith("key/bias"):  # zero gradient: Adam turns rounding into lr-sized steps
            continue
        np.testing.assert_allclose(actual, expected, atol=1e-5, err_msg=path)
