"""Runs what each row of README.md's "Backends" table claims, under the Keras backend of this
process (tests/backends/test_readme_backends.py starts it with KERAS_BACKEND set, or calls
`main` in its own TensorFlow process); prints one JSON line {row: {"ok", "detail"}}.

Each probe does the row's work on a tiny problem and either returns (the row works here) or
raises / returns a non-zero exit code (it does not), with the error's last line as detail.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import traceback

import numpy as np

ARCH = dict(patch_size=4, hidden_dim=16, num_heads=2, mlp_dim=32, num_layers=1)
TRAIN = ["--image-size", "8", "--shots-per-class", "5", "--batch-size", "20", "--epochs", "1"]
TRAIN += ["--no-jit-compile", "--mixed-precision", "float32", "--quiet"]


def models(workdir: str) -> None:
    """Build, predict, fit on NumPy arrays, `.npz` and `.keras` round trips."""
    import keras

    import keras_vit

    model = keras_vit.ViT(image_size=8, channels=1, num_classes=3, **ARCH)
    x = np.random.default_rng(0).uniform(-1, 1, (4, 8, 8, 1)).astype("float32")
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(True))
    model.fit(x, np.array([0, 1, 2, 0]), epochs=1, batch_size=4, verbose=0)
    logits = model.predict(x, verbose=0)
    keras_vit.checkpoints.save_npz(model, os.path.join(workdir, "m.npz"))
    again = keras_vit.ViT(
        image_size=8, channels=1, num_classes=3, weights=os.path.join(workdir, "m.npz"), **ARCH
    )
    model.save(os.path.join(workdir, "m.keras"))
    loaded = keras.models.load_model(os.path.join(workdir, "m.keras"))
    for other in (again, loaded):
        assert np.allclose(other.predict(x, verbose=0), logits, atol=1e-5)


def data_pipelines(workdir: str) -> None:
    """`keras_vit.data.load` batches fed to `model.fit`, as the README's Python story does."""
    import keras

    import keras_vit

    train = keras_vit.data.load("mnist", "train", image_size=8, batch_size=8, training=True)
    model = keras_vit.ViT(image_size=8, channels=1, num_classes=10, **ARCH)
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(True))
    model.fit(train, epochs=1, steps_per_epoch=1, verbose=0)


def _cli(argv: list[str]) -> None:
    from keras_vit.cli.main import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(argv)
    if code != 0:
        raise RuntimeError(f"keras-vit {argv[0]} exited {code}: {err.getvalue().strip()[-300:]}")


def _model_file(workdir: str) -> str:
    """A tiny 8x8 gray 10-class model saved as .keras (no run needed)."""
    import keras_vit

    path = os.path.join(workdir, "m.keras")
    keras_vit.ViT(image_size=8, channels=1, num_classes=10, **ARCH).save(path)
    return path


def cli_train(workdir: str) -> None:
    """`keras-vit train` on the embedded MNIST, made tiny."""
    _cli(["train", *TRAIN, "--run-dir", os.path.join(workdir, "run")])


def cli_evaluate(workdir: str) -> None:
    """`keras-vit evaluate` of a model file on the embedded MNIST test split."""
    _cli(["evaluate", _model_file(workdir), "--dataset", "mnist", "--quiet"])


def cli_predict(workdir: str) -> None:
    """`keras-vit predict` of a model file on one PNG."""
    from PIL import Image

    image = os.path.join(workdir, "digit.png")
    Image.new("L", (8, 8), 200).save(image)
    _cli(["predict", _model_file(workdir), image, "--quiet"])


def cli_export(workdir: str) -> None:
    """`keras-vit export` of a model file (the SavedModel for TF Serving)."""
    _cli(["export", _model_file(workdir), os.path.join(workdir, "serving")])


PROBES = {
    "models": models,
    "data": data_pipelines,
    "train": cli_train,
    "evaluate": cli_evaluate,
    "predict": cli_predict,
    "export": cli_export,
}
"""The README table's rows, by the word before the colon of their first cell."""


def main(workdir: str) -> dict:
    import keras

    results = {"backend": keras.backend.backend()}
    for name, probe in PROBES.items():
        folder = os.path.join(workdir, name)
        os.makedirs(folder, exist_ok=True)
        try:
            probe(folder)
        except Exception as error:  # a row that does not work here: its last line
            text = "".join(traceback.format_exception_only(type(error), error))
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            results[name] = {"ok": False, "detail": lines[-1][-400:] if lines else repr(error)}
        else:
            results[name] = {"ok": True, "detail": ""}
    return results


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        print("RESULT " + json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else folder)))
