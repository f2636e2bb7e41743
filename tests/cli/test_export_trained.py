"""`keras-vit export SOURCE DIR --format F` of `.keras` files trained one step on TensorFlow
and on JAX (tests/helpers/trained_models.py; the JAX ones in a KERAS_BACKEND=jax process,
once per module): the artifact's logits in its own runtime equal the saving backend's Keras
logits (computed there, on NumPy-scaled pixels) within 1e-4 at batch 1 and 5.

The default run exports a ViT randomised and saved under JAX to ONNX; every format x {ViT,
hybrid} x {trained on TensorFlow, trained on JAX} is `large`, and "torch" is in the PyTorch
lane (`-m pytorch`).
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from keras_vit import export_formats
from keras_vit.cli.main import main
from keras_vit.spec.export_formats import RUNTIME_MODULES
from tests.backends.subset import run_subset
from tests.helpers import trained_models

FORMATS = ("saved_model", "onnx", "litert", "openvino")


@pytest.fixture(scope="module")
def jax_randomised_vit(tmp_path_factory):
    return _jax_files(tmp_path_factory, "vit", train=False)


@pytest.fixture(scope="module")
def jax_vit(tmp_path_factory):
    return _jax_files(tmp_path_factory, "vit")


@pytest.fixture(scope="module")
def jax_hybrid(tmp_path_factory):
    return _jax_files(tmp_path_factory, "hybrid")


@pytest.fixture(scope="module")
def tensorflow_vit(tmp_path_factory):
    return trained_models.train_and_save("vit", str(tmp_path_factory.mktemp("tensorflow")))


@pytest.fixture(scope="module")
def tensorflow_hybrid(tmp_path_factory):
    return trained_models.train_and_save("hybrid", str(tmp_path_factory.mktemp("tensorflow")))


def _jax_files(tmp_path_factory, kind, train=True) -> str:
    pytest.importorskip("jax")
    folder = tmp_path_factory.mktemp(f"jax_{kind}")
    env = {"KINDS": kind, "TRAIN": "1" if train else "0"}
    result = run_subset("jax", "tests.helpers.trained_models", folder, env=env, timeout=600)
    assert result["backend"] == "jax"
    return result["files"][kind]


def _run_artifact(format, export_dir, pixels) -> np.ndarray:
    if format == "saved_model":
        import tensorflow as tf

        served = tf.saved_model.load(os.path.join(export_dir, "1")).signatures["serving_default"]
        return served(images=tf.constant(pixels))["logits"].numpy()
    artifact = os.path.join(export_dir, export_formats.ARTIFACTS[format][0])
    return export_formats.RUNNERS[format](artifact, pixels)


def _export_and_compare(keras_file, format, export_dir, capsys) -> float:
    """Exports `keras_file` with `keras-vit export --format F`; returns the largest |runtime
    - training backend| logit difference over batch 1 and 5, asserted within 1e-4."""
    missing = [name for name in RUNTIME_MODULES[format] if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"{format} needs {missing}")
    assert main(["export", keras_file, str(export_dir), "--format", format]) == 0
    assert ("within" in capsys.readouterr().out) == (format != "saved_model")
    reference = np.load(keras_file[: -len(".keras")] + ".npz")
    worst = 0.0
    for batch in trained_models.BATCHES:
        expected = reference[f"logits_{batch}"].astype(np.float64)
        got = np.asarray(_run_artifact(format, export_dir, reference[f"pixels_{batch}"]))
        np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0, err_msg=format)
        assert np.abs(expected).max() > 1e-2
        worst = max(worst, float(np.abs(got - expected).max()))
    return worst


def test_a_vit_saved_under_jax_exports_to_onnx(jax_randomised_vit, tmp_path, capsys):
    _export_and_compare(jax_randomised_vit, "onnx", tmp_path, capsys)


MATRIX = [
    (source, kind, format)
    for source in ("tensorflow", "jax")
    for kind in ("vit", "hybrid")
    for format in FORMATS
]


@pytest.mark.large
@pytest.mark.parametrize("source, kind, format", MATRIX)
def test_every_format_of_a_trained_model_equals_keras(
    request, tmp_path, capsys, source, kind, format
):
    keras_file = request.getfixturevalue(f"{source}_{kind}")
    _export_and_compare(keras_file, format, tmp_path, capsys)


@pytest.mark.pytorch
@pytest.mark.parametrize("source", ["tensorflow", "jax"])
@pytest.mark.parametrize("kind", ["vit", "hybrid"])
def test_a_trained_model_in_torch_export_equals_keras(request, tmp_path, capsys, source, kind):
    pytest.importorskip("torch")
    keras_file = request.getfixturevalue(f"{source}_{kind}")
    _export_and_compare(keras_file, "torch", tmp_path, capsys)
