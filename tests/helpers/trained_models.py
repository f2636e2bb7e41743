"""Tiny ViT and hybrid classifiers, randomised and trained one step on random data under the
running Keras backend, saved as `.keras` files beside their own logits (`predict`) on seeded
pixels in [0, 255] (scaled by NumPy as the release does): the models of
tests/cli/test_export_trained.py.

`python -m tests.helpers.trained_models FOLDER` (KINDS: comma-separated kinds, default "vit";
TRAIN=0: randomised only) runs it under the backend KERAS_BACKEND names and prints one
`RESULT` JSON line.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

BATCHES = (1, 5)


def build(kind: str):
    """The untrained tiny `kind` ("vit": exact GELU, 32x24; "hybrid": one ResNet stage)."""
    import keras_vit
    from tests.checkpoints.random_models import TINY_SIZES

    if kind == "vit":
        return keras_vit.ViT(
            patch_size=8, image_size=(32, 24), num_classes=5, gelu_approximate=False, **TINY_SIZES
        )
    return keras_vit.HybridViT(
        resnet_stages=(1,), resnet_width=32, patch_size=2, image_size=32, num_classes=5,
        **TINY_SIZES,
    )  # fmt: skip


def pixels(model, batch: int) -> np.ndarray:
    """Seeded float32 pixels in [0, 255] `(batch, height, width, channels)` for `model`."""
    height, width, channels = model.input_shape[1:]
    rng = np.random.default_rng(100 + batch)
    return rng.uniform(0, 255, (batch, height, width, channels)).astype(np.float32)


def train_and_save(kind: str, folder: str, train: bool = True) -> str:
    """Builds `kind`, randomises it, fits one step of SGD on random images (`train`), saves
    `folder/<kind>.keras` and `folder/<kind>.npz` (`pixels_<b>`, `logits_<b>` for b in
    `BATCHES`: this backend's logits of the model); returns the `.keras` path."""
    from tests.checkpoints.random_models import randomise

    model = randomise(build(kind), seed=len(kind))
    if train:
        _fit_one_step(model)
    path = os.path.join(folder, f"{kind}.keras")
    model.save(path)
    arrays = {}
    for batch in BATCHES:
        arrays[f"pixels_{batch}"] = pixels(model, batch)
        scaled = arrays[f"pixels_{batch}"] / 127.5 - 1.0
        arrays[f"logits_{batch}"] = model.predict(scaled, batch_size=batch, verbose=0)
    np.savez(os.path.join(folder, f"{kind}.npz"), **arrays)
    return path


def _fit_one_step(model) -> None:
    import keras

    model.compile(
        optimizer=keras.optimizers.SGD(0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    rng = np.random.default_rng(1)
    images = rng.uniform(-1, 1, (4, *model.input_shape[1:])).astype(np.float32)
    model.fit(images, rng.integers(0, 5, (4,)), batch_size=4, epochs=1, verbose=0)


def main(folder: str) -> None:
    import keras

    kinds = os.environ.get("KINDS", "vit").split(",")
    train = os.environ.get("TRAIN", "1") != "0"
    files = {kind: train_and_save(kind, folder, train) for kind in kinds}
    print("RESULT " + json.dumps({"backend": keras.backend.backend(), "files": files}))


if __name__ == "__main__":
    main(sys.argv[1])
