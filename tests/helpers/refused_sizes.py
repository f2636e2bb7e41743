"""A refused image size leaves the model usable: run as `python -m tests.helpers.refused_sizes
DIR` under a KERAS_BACKEND (the backend lanes) or imported (TensorFlow, in process); prints
one "RESULT {json}" line.

For a 32x32 model (patch 8) refused at 48x40 and a dynamic-size one refused at 36x40 (not a
patch multiple), through `predict` and `evaluate`: the error message, and whether the next
`predict` at 32x32 gives the logits of before.
"""

from __future__ import annotations

import json
import sys

import numpy as np

ARCH = dict(patch_size=8, hidden_dim=16, num_heads=2, mlp_dim=32, num_layers=1, num_classes=3)
WRONG = {"fixed": (48, 40), "dynamic": (36, 40)}


def tiny_model(kind: str):
    import keras_vit

    model = keras_vit.ViT(image_size=32, dynamic_image_size=kind == "dynamic", **ARCH)
    rng = np.random.default_rng(0)
    for weight in model.weights:  # heads are zero-initialised: randomise every weight
        weight.assign(rng.normal(0, 0.2, weight.shape).astype("float32"))
    model.compile(loss="sparse_categorical_crossentropy")
    return model


def refusal(model, call: str, size) -> dict:
    """Calls `model.<call>` on 2 images of `size`; the error it raised, then whether the next
    `predict` at 32x32 equals the one before."""
    rng = np.random.default_rng(1)
    good = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    before = model.predict(good, verbose=0)
    wrong = rng.uniform(-1, 1, (2, *size, 3)).astype("float32")
    error = None
    try:
        if call == "predict":
            model.predict(wrong, verbose=0)
        else:
            model.evaluate(wrong, np.zeros(2, "int32"), verbose=0)
    except Exception as raised:  # noqa: BLE001  (which error, recorded for the test)
        error = f"{type(raised).__name__}: {raised}"
    try:
        after = model.predict(good, verbose=0)
        usable = bool(np.allclose(after, before, atol=1e-6))
    except Exception as raised:  # noqa: BLE001
        usable = f"{type(raised).__name__}: {raised}"[:300]
    return {"error": error, "usable": usable}


def main(workdir: str) -> dict:
    import keras

    del workdir
    results = {"backend": keras.backend.backend()}
    for kind, size in WRONG.items():
        for call in ("predict", "evaluate"):
            results[f"{kind}/{call}"] = refusal(tiny_model(kind), call, size)
    return results


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1])))
