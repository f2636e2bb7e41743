"""Runs in a fresh process with KERAS_BACKEND=torch (started by tests/backends/test_torch.py).

The backend subset of tests/helpers/jax_subset.py (build, predict against the NumPy
reference, fit, every checkpoint format, dynamic image size, fine-tuning), plus what the
PyTorch backend path adds: `.weights.h5` round trips, a mixed_bfloat16 copy of the model
(`keras_vit.runtime.precision.with_dtype_policy`) against its float32 logits, and `evaluate`.
Prints one JSON line of results.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np


def torch_extras(workdir: str) -> dict:
    """The checks only this lane makes (see the module docstring)."""
    import keras
    import torch

    import keras_vit
    from keras_vit.runtime.precision import with_dtype_policy

    arch = dict(patch_size=8, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2)
    model = keras_vit.ViT(image_size=32, num_classes=10, **arch)
    rng = np.random.default_rng(4)
    model.set_weights([rng.normal(0, 0.3, w.shape).astype(w.dtype) for w in model.get_weights()])
    x = rng.uniform(-1, 1, (4, 32, 32, 3)).astype("float32")
    logits = model.predict(x, verbose=0)
    out = {
        "torch_version": torch.__version__,
        "weights_are_torch": isinstance(model.get_layer("head").kernel.value, torch.Tensor),
        "extras_logits_std": float(np.std(logits)),
    }
    path = os.path.join(workdir, "tiny.weights.h5")
    model.save_weights(path)
    twin = keras_vit.ViT(image_size=32, num_classes=10, **arch)
    twin.load_weights(path)
    out["weights_h5_vs_model"] = float(np.abs(twin.predict(x, verbose=0) - logits).max())

    bf16 = with_dtype_policy(model, "mixed_bfloat16")
    out["bf16_block_dtype"] = bf16.get_layer("encoderblock_0").compute_dtype
    bf16_logits = bf16.predict(x, verbose=0)
    out["bf16_logits_dtype"] = str(bf16_logits.dtype)
    scale = float(np.abs(logits).max())
    out["bf16_vs_float32"] = float(np.abs(bf16_logits - logits).max()) / scale

    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    labels = rng.integers(0, 10, 4)
    before = model.evaluate(x, labels, verbose=0, return_dict=True)
    model.fit(x, labels, epochs=3, batch_size=4, verbose=0)
    after = model.evaluate(x, labels, verbose=0, return_dict=True)
    out["evaluate_loss_before_after"] = [float(before["loss"]), float(after["loss"])]
    return out


def main(workdir: str) -> dict:
    from tests.helpers import jax_subset

    return {**jax_subset.main(workdir), **torch_extras(workdir)}


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        print("RESULT " + json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else folder)))
