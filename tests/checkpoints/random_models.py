"""Tiny keras_vit models with random weights, for round trips through checkpoint formats.

Heads are zero-initialised, so every variable is drawn afresh (LayerNorm scales around 1);
`logits` calls the model directly (no `predict` tracing) and checks the output is not zero.
"""

from __future__ import annotations

import numpy as np

import keras_vit

TINY_SIZES = dict(hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2)


def randomise(model, seed=0, scale=0.2):
    """Assigns N(0, scale) to every variable (N(1, scale) to LayerNorm scales); returns model."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        shape = tuple(variable.shape)
        value = rng.normal(0.0, scale, shape)
        if variable.path.endswith("gamma"):
            value += 1.0
        variable.assign(value.astype(variable.dtype))
    return model


def tiny_vit(*, grid=(4, 4), patch=8, channels=3, seed=0, **kwargs):
    """A tiny ViT (hidden 32, 2 blocks) of `grid` patches, randomised with `seed`."""
    arguments = dict(TINY_SIZES, num_classes=5, gelu_approximate=True)
    arguments.update(kwargs)
    model = keras_vit.ViT(
        patch_size=patch,
        image_size=(grid[0] * patch, grid[1] * patch),
        channels=channels,
        **arguments,
    )
    return randomise(model, seed)


def images_for(model, seed=1, batch=2):
    """Images in [-1, 1] of the model's input shape."""
    height, width, channels = model.input_shape[1:]
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (batch, height, width, channels)).astype("float32")


def logits(model, images):
    """The model's output as float64 NumPy, asserted not (almost) all zero."""
    out = np.asarray(model(images, training=False), np.float64)
    assert np.abs(out).max() > 1e-3, "the output is ~0: weights not randomised?"
    return out
