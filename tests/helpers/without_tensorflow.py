"""Runs in a fresh process (KERAS_BACKEND=jax) where `import tensorflow` fails, as in a JAX-only
or PyTorch-only environment: a finder first on `sys.meta_path` refuses TensorFlow. Reads every
public name of `keras_vit`, `keras_vit.data`, `keras_vit.runtime` and `keras_vit.train`, and
prints one "RESULT {json}" line: the error of each name that failed ("type: message"), and
whether a tiny model predicts."""

from __future__ import annotations

import json
import sys


class NoTensorFlow:
    """A meta-path finder that makes TensorFlow missing."""

    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def main() -> dict:
    sys.meta_path.insert(0, NoTensorFlow())
    import numpy as np

    import keras_vit

    failed = {}
    for package in (keras_vit, keras_vit.data, keras_vit.runtime, keras_vit.train):
        for name in package.__all__:
            try:
                getattr(package, name)
            except Exception as error:  # noqa: BLE001  (which error, recorded for the test)
                failed[f"{package.__name__}.{name}"] = f"{type(error).__name__}: {error}"
    model = keras_vit.ViT(
        image_size=16, patch_size=8, hidden_dim=8, num_heads=1, mlp_dim=8, num_layers=1,
        num_classes=2,
    )  # fmt: skip
    shape = model.predict(np.zeros((1, 16, 16, 3), "float32"), verbose=0).shape
    return {
        "failed": failed,
        "predict_shape": list(shape),
        "tensorflow_loaded": "tensorflow" in sys.modules,
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(main()))
