"""Guards for tests that compare model outputs: a zero head must not make a comparison pass.

keras_vit's heads are zero-initialised (the paper, appendix B.1.1), so an untrained model's
logits are exactly 0 whatever the image or the weights below the head: two such models
compare equal even when nothing was saved, loaded or computed. Every test that compares
model outputs randomises the weights (head included) with `randomize_weights` and compares
with `assert_outputs_close`, which fails before comparing when the reference carries no
information (all zero, or the same row for every image).
"""

from __future__ import annotations

import keras
import numpy as np


def randomize_weights(model, seed=0, scale=0.3):
    """Sets every weight of `model` to N(0, scale^2) draws (head included); returns `model`.

    Integer and boolean variables are left alone. Raises AssertionError when a head kernel
    is still all zero afterwards (a layer this helper did not reach).
    """
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        dtype = np.dtype(keras.backend.standardize_dtype(variable.dtype))
        if not np.issubdtype(dtype, np.floating):
            continue
        values = rng.normal(0.0, scale, tuple(variable.shape))
        if "variance" in variable.path:  # BatchNormalization's moving variance stays positive
            values = np.abs(values) + scale
        variable.assign(values.astype(dtype))
    assert_head_not_zero(model)
    return model


def _head_kernels(model):
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if layer.name == "head" and getattr(layer, "kernel", None) is not None:
            yield np.asarray(layer.kernel)


def assert_head_not_zero(model):
    """Fails when any layer named `head` has an all-zero kernel (outputs would ignore input)."""
    for kernel in _head_kernels(model):
        assert np.any(kernel != 0), f"{model.name}: the head kernel is all zero"


def onednn_bfloat16_kernels() -> bool:
    """True when this TensorFlow process runs oneDNN's CPU kernels (TensorFlow's own report;
    off on AVX2-only hosts and under `TF_ENABLE_ONEDNN_OPTS=0`)."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:
        return False
    return bool(_pywrap_util_port.IsMklEnabled())


def bfloat16_slack() -> float:
    """Factor on bfloat16 tolerances: 1 with oneDNN (products, bias, activations and norms
    fused, each rounded once), 2 with Eigen's kernels, where every elementwise op rounds its
    own output to bfloat16 (measured: block errors 1.05-1.46x the oneDNN bounds)."""
    return 1.0 if onednn_bfloat16_kernels() else 2.0


def assert_informative(outputs, what="model output"):
    """Fails when `outputs` cannot tell a working model from a broken one.

    That is: not finite, all zero, or (for a batch of two or more) every row the same, which
    is what a zero head kernel with any bias gives.
    """
    outputs = np.asarray(keras.ops.convert_to_numpy(outputs), np.float64)
    assert np.isfinite(outputs).all(), f"{what} is not finite"
    assert np.any(outputs != 0), f"{what} is all zero: randomise the weights (head included)"
    if outputs.ndim >= 2 and outputs.shape[0] > 1:
        assert not np.allclose(outputs, outputs[:1], rtol=0, atol=1e-7), (
            f"{what} is the same for every input in the batch (a zero head kernel?)"
        )


def assert_outputs_close(actual, expected, *, rtol=1e-7, atol=0.0, what="model output"):
    """`np.testing.assert_allclose` after checking that `expected` is informative."""
    assert_informative(expected, f"reference {what}")
    actual = np.asarray(keras.ops.convert_to_numpy(actual))
    np.testing.assert_allclose(actual, np.asarray(expected), rtol=rtol, atol=atol, err_msg=what)


def mixed_and_float32_models(build, policy, seed=0, scale=0.3):
    """`build()` under `policy` with random weights, and a float32 `build()` with the same weights.

    The global dtype policy is restored afterwards. Returns `(mixed, reference)`.
    """
    previous = keras.config.dtype_policy()
    try:
        keras.config.set_dtype_policy(policy)
        mixed = randomize_weights(build(), seed, scale)
        keras.config.set_dtype_policy("float32")
        reference = build()
    finally:
        keras.config.set_dtype_policy(previous)
    reference.set_weights(mixed.get_weights())
    return mixed, reference


# Largest |mixed - float32| allowed, as a fraction of max |float32 reference|. float16 keeps 11
# significant bits (unit roundoff 2^-11, ~5e-4), bfloat16 8 (2^-8, ~4e-3); a tiny model's two
# blocks compound a few such roundings (measured on the tiny ViT with N(0, 0.3^2) weights:
# ~1e-3 of the largest logit under float16, ~8e-3 under bfloat16).
MIXED_TOLERANCE = {"mixed_float16": 5e-3, "mixed_bfloat16": 3e-2}


def assert_close_to_float32(actual, reference, policy, what="logits"):
    """`actual` (computed under `policy`) within MIXED_TOLERANCE of the float32 `reference`."""
    reference = np.asarray(keras.ops.convert_to_numpy(reference), np.float64)
    atol = MIXED_TOLERANCE[policy] * np.abs(reference).max()
    assert_outputs_close(actual, reference, rtol=0, atol=atol, what=f"{what} under {policy}")
