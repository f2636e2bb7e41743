"""Runs under KERAS_BACKEND=jax, started by tests/backends/test_jax_export.py: Keras'
automatic JAX export (jax2tf, `(batch, a, b, 3)`) of a `dynamic_image_size` ViT, then the
export with the polymorphic shape its error names, loaded in TensorFlow at 32x40 (against
the JAX model) and at 36x40 (refused); prints one RESULT JSON line."""

from __future__ import annotations

import json
import os
import re
import sys

import numpy as np


def main(folder: str) -> None:
    import keras
    import tensorflow as tf

    import keras_vit
    from tests.checkpoints.random_models import TINY_SIZES, randomise

    model = randomise(
        keras_vit.ViT(patch_size=8, image_size=32, num_classes=5, dynamic_image_size=True,
                      **TINY_SIZES)
    )  # fmt: skip
    result = {"backend": keras.backend.backend()}
    try:
        model.export(os.path.join(folder, "default"), format="tf_saved_model", verbose=False)
        result["default_error"] = None
    except ValueError as error:
        result["default_error"] = str(error)
    named = re.findall(r"'(\(b, [^']*\))'", result["default_error"] or "")
    result["named"] = named[:1]
    path = os.path.join(folder, "polymorphic")
    kwargs = {"polymorphic_shapes": named[:1]}
    model.export(path, format="tf_saved_model", verbose=False, jax2tf_kwargs=kwargs)
    served = tf.saved_model.load(path)
    pixels = np.random.default_rng(0).uniform(-1, 1, (2, 32, 40, 3)).astype("float32")
    expected = np.asarray(model(pixels))
    result["difference"] = float(np.abs(served.serve(pixels).numpy() - expected).max())
    result["logits_std"] = float(expected.std())
    try:
        served.serve(np.zeros((1, 36, 40, 3), np.float32))
        result["refused_36"] = False
    except Exception:  # noqa: BLE001  (TensorFlow's shape-assertion error type varies)
        result["refused_36"] = True
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
