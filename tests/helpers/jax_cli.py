"""Runs in a fresh process with KERAS_BACKEND=jax and two host devices (XLA_FLAGS), started
by tests/backends/test_jax_cli.py: the CLI's train, --resume, evaluate, predict, finetune
and fewshot on the embedded digits with the tiny model, the strategies TensorFlow alone has
refused in one line, Keras' DataParallel against one device, and one step of keras_vit's
ModelParallel over the two devices against one device; prints one JSON line."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

import numpy as np

TINY = ["--model", "tiny", "--stem", "patch", "--dataset", "digits", "--shots-per-class", "10"]


def cli(*argv) -> tuple[int, str]:
    """(exit code, stderr) of `keras-vit argv` in this process."""
    from keras_vit.cli.main import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as stop:
            code = stop.code
    return int(code or 0), err.getvalue()


def data_parallel_losses() -> dict:
    """Per-epoch losses of the same tiny ViT fitted on one device and under DataParallel on
    two (the same global batches)."""
    import keras

    import keras_vit
    from keras_vit.runtime import distribute

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (8, 16, 16, 3)).astype("float32")  # one batch: gradient descent
    y = rng.integers(0, 4, 8)
    losses = {}
    for name in ("auto", "mirrored"):
        strategy = distribute.resolve_strategy(name)
        keras.utils.set_random_seed(1)
        model = keras_vit.ViT(
            image_size=16, patch_size=8, hidden_dim=16, num_heads=2, mlp_dim=32, num_layers=1,
            num_classes=4,
        )  # fmt: skip
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(keras.optimizers.SGD(0.1), loss)
        history = model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
        losses[name] = history.history["loss"]
        losses[f"{name}_replicas"] = distribute.num_replicas(strategy)
    keras.distribution.set_distribution(None)
    return losses


def main(workdir: str) -> dict:
    import keras

    run = os.path.join(workdir, "run")
    out = {"backend": keras.backend.backend()}
    out["train"] = cli("train", *TINY, "--epochs", "1", "--run-dir", run, "--quiet")[0]
    out["run_files"] = sorted(os.listdir(run))
    out["resume"] = cli("train", "--run-dir", run, "--resume", "--quiet")[0]
    out["evaluate"] = cli("evaluate", run, "--quiet")[0]
    images = os.path.join(workdir, "images")
    os.makedirs(images)
    from PIL import Image

    Image.fromarray(np.random.default_rng(0).integers(0, 255, (28, 28), "uint8")).save(
        os.path.join(images, "a.png")
    )
    out["predict"] = cli("predict", run, images, "--quiet")[0]
    tuned = os.path.join(workdir, "tuned")
    out["finetune"] = cli(
        "finetune", "--weights", run, "--dataset", "digits", "--shots-per-class", "10",
        "--steps", "2", "--run-dir", tuned, "--quiet",
    )[0]  # fmt: skip
    out["fewshot"] = cli("fewshot", run, "--shots", "1", "--seeds", "1", "--quiet")[0]
    for name in ("multi_worker", "tpu"):
        out[f"refused_{name}"] = cli("train", *TINY, "--strategy", name, "--run-dir", run + name)
    out["refused_batch"] = cli(
        "train", *TINY, "--strategy", "mirrored", "--batch-size", "3", "--run-dir", run + "b"
    )
    out["losses"] = data_parallel_losses()
    from tests.helpers import model_parallel_step

    out["model_parallel"] = model_parallel_step.main(["1x2"])
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1])))
