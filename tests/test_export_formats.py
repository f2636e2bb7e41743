"""`keras_vit.export_formats.export_model`: every format written, then run in its own runtime
(onnxruntime, the LiteRT interpreter, OpenVINO, TensorFlow) on pixels in [0, 255] and
compared with the NumPy-scaled Keras model, for a ViT (exact GELU, non-square) and a hybrid.
The "torch" format's runtime cases are in tests/test_export_torch.py (the PyTorch lane).
"""

from __future__ import annotations

import importlib.util
import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import export_formats
from keras_vit.export_formats import ExportMismatchError, MissingRuntimeError, export_model
from tests.checkpoints.random_models import TINY_SIZES, randomise

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("onnxruntime", "openvino", "ai_edge_litert")),
    reason="the export extra is not installed",
)

RUNTIMES = {
    "onnx": export_formats.run_onnx,
    "litert": export_formats.run_litert,
    "openvino": export_formats.run_openvino,
}


@pytest.fixture(scope="module")
def vit():
    model = keras_vit.ViT(
        patch_size=8, image_size=(32, 24), num_classes=5, gelu_approximate=False, **TINY_SIZES
    )
    return randomise(model, seed=4)


@pytest.fixture(scope="module")
def hybrid():
    model = keras_vit.HybridViT(
        resnet_stages=(1,), resnet_width=32, patch_size=2, image_size=32, num_classes=5,
        **TINY_SIZES,
    )  # fmt: skip
    return randomise(model, seed=5)


def _expected(model, pixels):
    """The model's logits on pixels scaled by NumPy, as the release does: x / 127.5 - 1."""
    return np.asarray(model(pixels / 127.5 - 1.0, training=False), np.float64)


def _pixels(model, batch, seed=9):
    height, width, channels = model.input_shape[1:]
    rng = np.random.default_rng(seed)
    return rng.uniform(0, 255, (batch, height, width, channels)).astype(np.float32)


def _run(report, pixels):
    if report.format == "saved_model":
        import tensorflow as tf

        served = tf.saved_model.load(report.path).signatures["serving_default"]
        return served(images=tf.constant(pixels))["logits"].numpy()
    return RUNTIMES[report.format](report.path, pixels)


def _check_format(model, folder, format):
    report = export_model(model, folder, format)
    assert os.path.isfile(report.path) or format == "saved_model"
    assert report.max_difference <= 1e-4
    for batch in (1, 5):
        pixels = _pixels(model, batch)
        got = np.asarray(_run(report, pixels), np.float64)
        np.testing.assert_allclose(got, _expected(model, pixels), atol=1e-4, rtol=0, err_msg=format)
        assert np.abs(got).max() > 1e-2
    return report


def test_a_vit_in_onnx_runtime_equals_keras_through_erf(vit, tmp_path):
    """The exact GELU reaches ONNX as `Erf` (Keras' own lowering, `Erfc`, does not convert)."""
    import onnx

    report = _check_format(vit, tmp_path, "onnx")
    ops = {node.op_type for node in onnx.load(report.path).graph.node}
    assert "Erf" in ops and "Erfc" not in ops
    with pytest.raises(FileExistsError, match="overwrite"):
        export_model(vit, tmp_path, "onnx")


@pytest.mark.slow
@pytest.mark.parametrize("format", ["litert", "openvino", "saved_model"])
def test_a_vit_in_every_runtime_equals_keras(vit, tmp_path, format):
    _check_format(vit, tmp_path, format)


@pytest.mark.large
@pytest.mark.parametrize("format", ["onnx", "litert", "openvino", "saved_model"])
def test_a_hybrid_in_every_runtime_equals_keras(hybrid, tmp_path, format):
    _check_format(hybrid, tmp_path, format)


@pytest.fixture(scope="module")
def bfloat16_vit():
    """A ViT built under mixed_bfloat16 (as `auto` picks on hosts with bfloat16 units) and its
    float32 twin with the same weights, the reference."""
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model = randomise(
            keras_vit.ViT(patch_size=8, image_size=32, num_classes=5, **TINY_SIZES), seed=6
        )
    finally:
        keras.config.set_dtype_policy("float32")
    twin = keras_vit.ViT(patch_size=8, image_size=32, num_classes=5, **TINY_SIZES)
    twin.set_weights(model.get_weights())
    return model, twin


@pytest.mark.parametrize(
    "format",
    ["openvino", *(pytest.param(f, marks=pytest.mark.large) for f in ("onnx", "litert"))],
)
def test_a_mixed_bfloat16_model_exports_its_float32_copy(bfloat16_vit, tmp_path, caplog, format):
    """Keras' own OpenVINO export of a mixed_bfloat16 model fails ("Const of unknown type")."""
    model, twin = bfloat16_vit
    assert model.dtype_policy.name == "mixed_bfloat16"
    with caplog.at_level("INFO", logger="keras_vit.export_formats"):
        report = export_model(model, tmp_path, format)
    assert "float32 copy" in caplog.text and "mixed_bfloat16" in caplog.text
    for batch in (1, 5):
        pixels = _pixels(twin, batch)
        got = np.asarray(_run(report, pixels), np.float64)
        np.testing.assert_allclose(got, _expected(twin, pixels), atol=1e-4, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "format", ["onnx", "litert", pytest.param("openvino", marks=pytest.mark.large)]
)
def test_a_dynamic_size_model_is_exported_at_its_table_size_and_refuses_others(tmp_path, format):
    """Another size is refused by the runtime, never cropped: LiteRT's interpreter resizes
    its input on request (`run_litert`: non-strict) and a valid-padding patch convolution
    would take 39x39 as its 32x32 crop; a 16x64 image has the same 16 patches."""
    model = randomise(
        keras_vit.ViT(patch_size=8, image_size=32, num_classes=5, dynamic_image_size=True,
                      **TINY_SIZES)
    )  # fmt: skip
    report = export_model(model, tmp_path, format)
    assert report.image_size == (32, 32)
    pixels = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(_run(report, pixels), _expected(model, pixels), atol=1e-4)
    for size in ((36, 40), (39, 39), (16, 64)):
        with pytest.raises(Exception, match="(?i)dimension|shape|reshape|broadcast|prepare"):
            _run(report, np.zeros((1, *size, 3), np.float32))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Layer .* does not have a `quantize`")
def test_an_int8_model_exports_to_onnx_and_matches_the_quantized_keras_model(vit, tmp_path):
    """Keras quantizes activations per call: a runtime's rounding moves a few across an int8
    step, so the bound is a share of the logits' scale (`QUANTIZED_TOLERANCE`)."""
    report = export_model(vit, tmp_path, "onnx", quantize="int8")
    quantized = keras.models.clone_model(vit)
    quantized.set_weights(vit.get_weights())
    quantized.quantize("int8")
    pixels = _pixels(vit, 5)
    expected = _expected(quantized, pixels)
    bound = export_formats.QUANTIZED_TOLERANCE * np.abs(expected).max()
    assert report.quantize == "int8" and report.max_difference <= bound
    np.testing.assert_allclose(_run(report, pixels), expected, atol=bound, rtol=0)
    assert np.abs(_expected(vit, pixels) - expected).max() > 1e-5  # it is quantized


@pytest.mark.skipif(importlib.util.find_spec("nncf") is None, reason="no nncf")
def test_openvino_int8_is_nncf_weight_compression_agreeing_with_the_float_model(vit, tmp_path):
    """OpenVINO's conversion of Keras' int8 graph is wrong (logits 1.9 away on logits of ~2),
    so `quantize="int8"` compresses the float artifact's weights with NNCF: the reference is
    the float Keras model, within `QUANTIZED_TOLERANCE` of the logits' scale; the top-1 class
    is the float model's wherever its margin is over twice the largest difference."""
    report = export_model(vit, tmp_path, "openvino", quantize="int8")
    assert report.quantize == "int8" and 0.0 <= report.top1_agreement <= 1.0
    pixels = _pixels(vit, 5)
    expected = _expected(vit, pixels)
    got = np.asarray(_run(report, pixels), np.float64)
    difference = np.abs(got - expected).max()
    bound = export_formats.QUANTIZED_TOLERANCE * np.abs(expected).max()
    assert 1e-5 < difference <= bound  # the weights were compressed, and not far
    top_two = np.sort(expected, axis=-1)[:, -2:]
    clear = top_two[:, 1] - top_two[:, 0] > 2 * difference
    assert clear.any()
    assert np.array_equal(got.argmax(-1)[clear], expected.argmax(-1)[clear])
    float_weight_bytes = 4 * vit.count_params()
    assert os.path.getsize(tmp_path / "model.bin") < 0.5 * float_weight_bytes
    assert sorted(os.listdir(tmp_path)) == ["model.bin", "model.xml"]


def test_a_mismatch_removes_the_artifact(vit, tmp_path, monkeypatch):
    def write(model, path, format, verbose):
        with open(path, "wb") as handle:
            handle.write(b"artifact")

    monkeypatch.setattr(keras.Model, "export", write)
    monkeypatch.setitem(export_formats.RUNNERS, "litert", lambda path, x: np.zeros((len(x), 5)))
    with pytest.raises(ExportMismatchError, match="removed"):
        export_model(vit, tmp_path, "litert")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(format="tflite"), "format"),
        (dict(format="onnx", quantize="int2"), "quantize"),
        (dict(format="litert", quantize="int8"), "does not take"),
        (dict(format="litert", quantize="float8"), "does not take"),
        (dict(format="openvino", quantize="int4"), "nncf's int8 weight compression"),
        (dict(format="onnx", tolerance=0), "tolerance"),
        (dict(format="onnx", version=2), "saved_model"),
    ],
)
def test_bad_arguments_are_refused_before_any_work(vit, tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        export_model(vit, tmp_path / "out", **kwargs)
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize(
    "format, quantize, missing, extra",
    [
        ("openvino", None, "openvino", "export"),
        ("torch", None, "torch", "torch"),
        ("openvino", "int8", "nncf", "export"),
    ],
)
def test_a_missing_runtime_names_the_extra(
    vit, tmp_path, monkeypatch, format, quantize, missing, extra
):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == missing else real(name)
    )
    with pytest.raises(
        MissingRuntimeError, match=rf"'{format}' needs {missing}\b.*keras_vit\[{extra}\]"
    ):
        export_model(vit, tmp_path, format, quantize=quantize)
    assert os.listdir(tmp_path) == []
