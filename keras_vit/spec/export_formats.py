"""The export formats of `keras_vit.export_formats.export_model` and `keras-vit export`, their
quantize modes and runtime packages, without TensorFlow (the CLI checks its flags with them
before TensorFlow starts)."""

from __future__ import annotations

import importlib.util

FORMATS = ("saved_model", "onnx", "litert", "openvino", "torch")
QUANTIZE_MODES = ("int8", "int4", "float8")
QUANTIZED_FORMATS = {
    "saved_model": QUANTIZE_MODES,
    "onnx": ("int8", "int4"),
    "torch": QUANTIZE_MODES,
    "openvino": ("int8",),
}
"""The quantize modes each format takes: a Keras-quantized graph for "saved_model", "onnx"
(tf2onnx has no float8 type) and "torch"; NNCF's int8 weight compression of the float graph
for "openvino" (`WEIGHT_COMPRESSED`)."""
WEIGHT_COMPRESSED = {"openvino": ("nncf",)}
"""Formats whose `quantize` is the runtime's own weight compression of the float artifact (not
`keras.Model.quantize`), and the packages it needs."""
RUNTIME_MODULES = {
    "saved_model": ("tensorflow",),
    "onnx": ("tf2onnx", "onnx", "onnxruntime"),
    "litert": ("ai_edge_litert",),
    "openvino": ("openvino",),
    "torch": ("torch",),
}
EXTRAS = {"torch": "torch"}
"""The extra that installs a format's runtime when it is not "export"."""
WRITER_BACKENDS = {"torch": "torch"}
"""The Keras backend that writes a format when it is not TensorFlow (`torch.export` traces the
PyTorch backend's graph); another backend writes it in a child process."""


def extra_of(format: str) -> str:
    """The name of the extra that installs `format`'s runtime ("export" or "torch")."""
    return EXTRAS.get(format, "export")


def writer_backend(format: str) -> str:
    """The Keras backend that writes `format` ("tensorflow", or "torch" for "torch")."""
    return WRITER_BACKENDS.get(format, "tensorflow")


class MissingRuntimeError(ImportError):
    """The runtime a format is written with or checked in is not installed."""


def check_runtime(format: str, quantize: str | None = None) -> None:
    """Raises `MissingRuntimeError` in one line when `format`'s packages (with `quantize`, also
    those of its weight compression) are not installed."""
    needed = RUNTIME_MODULES[format] + (WEIGHT_COMPRESSED.get(format, ()) if quantize else ())
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        extra = extra_of(format)
        raise MissingRuntimeError(
            f"Export format {format!r} needs {', '.join(missing)}, the {extra!r} extra: "
            f'pip install "keras_vit[{extra}]".'
        )


def check_format(format, quantize=None) -> None:
    """ValueError naming a format or quantize mode `export_model` does not take.

    Keras-quantized graphs reach TF Serving (every mode), ONNX (int8, int4: tf2onnx has no
    float8 type) and torch.export (every mode); LiteRT's converter refuses their int8 batched
    products, and OpenVINO's conversion of them gave logits 1.9 away from Keras' on logits of
    about 2 (a tiny int8 ViT), so LiteRT takes the float model only and OpenVINO takes int8 as
    NNCF's weight compression of the float graph (`WEIGHT_COMPRESSED`).
    """
    if format not in FORMATS:
        raise ValueError(f"`format` must be one of {FORMATS}. Received: format={format!r}")
    if quantize is not None and quantize not in QUANTIZE_MODES:
        raise ValueError(
            f"`quantize` must be None or one of {QUANTIZE_MODES}. Received: quantize={quantize!r}"
        )
    if quantize is not None and quantize not in QUANTIZED_FORMATS.get(format, ()):
        takers = [name for name, modes in QUANTIZED_FORMATS.items() if quantize in modes]
        raise ValueError(
            f"Export format {format!r} does not take quantize={quantize!r}: {_why_not(format)} "
            f"(formats that take it: {takers})."
        )


def _why_not(format) -> str:
    """Why `format` takes no (or not this) quantize mode."""
    if format in WEIGHT_COMPRESSED:
        return f"its quantization is {WEIGHT_COMPRESSED[format][0]}'s int8 weight compression"
    return "a Keras-quantized graph does not convert to it"
