"""Export from a backend other than the one a format is written with: the model goes through a
`.keras` file (backend-neutral) to a child process under the writing backend. A SavedModel is
a TensorFlow graph: `python -m keras_vit.export` runs `keras_vit.export.export_saved_model`
under Keras' TensorFlow backend. `keras_vit.export_formats` writes ONNX, LiteRT and OpenVINO
under TensorFlow and `torch.export`'s `.pt2` under PyTorch the same way
(`python -m keras_vit.export_formats`, through `run_in_backend_process`).

`export_saved_model` calls `export_in_tensorflow_process` itself when Keras runs on another
backend, so the same call exports on every backend; the child costs a backend import and a
model load (seconds). Its errors come back as the same exception types with the same
one-line messages (`ValueError`, `FileExistsError`, other `OSError`s); anything else as a
`RuntimeError` naming the child's last line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

ERRORS = {"ValueError": ValueError, "FileExistsError": FileExistsError, "OSError": OSError}
"""Exception types the child reports by name and the parent raises again."""


def export_in_tensorflow_process(model, export_dir, **options) -> str:
    """`keras_vit.export.export_saved_model(model, export_dir, **options)` in a child process
    under KERAS_BACKEND=tensorflow; returns the written version folder.

    Args:
        model: a keras_vit classifier (any backend); saved to a temporary `.keras` file.
        export_dir, options: as `export_saved_model` (JSON-serialisable: class names as a
            list of strings).

    Raises:
        ValueError, FileExistsError, OSError: as `export_saved_model` raises them.
        RuntimeError: the child failed otherwise (its last stderr line in the message).
    """
    return run_in_backend_process(
        "keras_vit.export", "tensorflow", model, export_dir, options, "the SavedModel"
    )


def run_in_backend_process(module, backend, model, target, options, what) -> str:
    """`python -m module REQUEST` under KERAS_BACKEND=`backend`: the child loads `model` from
    a temporary `.keras` file and writes `what` to `target` (`child_main`); returns the path
    it answers.

    Raises:
        ValueError, FileExistsError, OSError: as the child's writer raised them.
        RuntimeError: the child failed otherwise (its last stderr line in the message).
    """
    with tempfile.TemporaryDirectory(prefix="keras_vit_export_") as folder:
        path = os.path.join(folder, "model.keras")
        model.save(path)
        request = {"model": path, "export_dir": os.fspath(target), "options": options}
        env = {**os.environ, "KERAS_BACKEND": backend}
        done = subprocess.run(
            [sys.executable, "-m", module, json.dumps(request)],
            capture_output=True,
            text=True,
            env=env,
        )
    answer = _answer(done.stdout)
    if done.returncode == 0 and "path" in answer:
        return answer["path"]
    if answer.get("error") in ERRORS:
        raise ERRORS[answer["error"]](answer["message"])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else f"exit code {done.returncode}"
    raise RuntimeError(f"The {backend} process that writes {what} failed: {last}")


def _answer(stdout: str) -> dict:
    """The child's JSON answer, its last stdout line ({} when there is none)."""
    for line in reversed(stdout.splitlines()):
        try:
            answer = json.loads(line)
        except ValueError:
            continue
        if isinstance(answer, dict):
            return answer
    return {}


def child_main(request_text: str, export) -> int:
    """The child's work (`python -m keras_vit.export REQUEST`, under KERAS_BACKEND=tensorflow):
    load the request's `.keras` file (keras_vit's layers are registered by the package's
    import) and `export(model, export_dir, **options)`; prints the JSON answer, returns the
    exit code."""
    import keras

    request = json.loads(request_text)
    model = keras.models.load_model(request["model"])
    try:
        answer = {"path": export(model, request["export_dir"], **request["options"])}
    except (ValueError, OSError) as error:
        name = next(name for name, kind in ERRORS.items() if isinstance(error, kind))
        answer = {"error": name, "message": str(error)}
    sys.stdout.write(json.dumps(answer) + "\n")  # the answer the parent process reads
    return 0 if "path" in answer else 1
