"""Export to every format Keras writes, each artifact checked in its own runtime.

`export_model(model, export_dir, format)` writes a keras_vit classifier as

- "saved_model" (default): TF Serving's layout, `keras_vit.export.export_saved_model`
  (`export_dir/<version>/`, resizing, decoding and top-k inside); checked with TensorFlow.
- "onnx": `export_dir/model.onnx` (Keras' `model.export(format="onnx")`, tf2onnx on
  TensorFlow); checked with onnxruntime.
- "litert": `export_dir/model.tflite` (LiteRT, formerly TensorFlow Lite); checked with
  `ai_edge_litert`'s interpreter.
- "openvino": `export_dir/model.xml` + `model.bin`; checked with OpenVINO's CPU plugin.
- "torch": `export_dir/model.pt2` (Keras' `model.export(format="torch")`, a `torch.export`
  ExportedProgram traced under Keras' PyTorch backend); checked with `torch.export.load`.

A format is written under the Keras backend it needs (TensorFlow; PyTorch for "torch"): from
another backend the model goes through a `.keras` file to a child process under that backend
(`keras_vit._export_process`), and the check runs here, against this process' Keras model.

Every format has the same input contract: float32 pixels in [0, 255], `(batch, height,
width, channels)` at the model's size with a dynamic batch; the scaling the model records
(the release's `(x - 127.5) / 127.5`, or ImageNet's / CLIP's mean and std) runs inside. The
output is the float32 logits `(batch, num_classes)`. The graph is traced in float32 (a model
built under a mixed policy is copied to float32 first) with `dispatch.portable_kernels()`, so
the exact GELU reaches every converter as `Erf`. A `dynamic_image_size` model is exported at a
fixed size (`image_size`, default its position table's size): the converters drop the graph
assertion that refuses a side which is not a patch multiple, so a fixed-size artifact is the
form that keeps the refusal (its runtime refuses any other size).

Right after writing, the artifact is loaded in its runtime and its logits compared with
Keras' on a probe batch of 1 and of 5 random images; a difference over `tolerance` (1e-4 by
default for float32; `QUANTIZED_TOLERANCE` of the logits' scale for a quantized model) removes
the artifact and raises `ExportMismatchError`.

`quantize="int8" | "int4" | "float8"` applies `keras.Model.quantize` to a copy of the model
before export (the check then compares with the quantized Keras model) for "saved_model",
"onnx" (int8, int4) and "torch"; for "openvino", `quantize="int8"` is NNCF's int8 weight
compression of the float artifact (`nncf.compress_weights`, asymmetric per output channel;
activations stay float), checked against the float Keras model. LiteRT takes the float model
only (`check_format` says why).

The runtimes are the `export` extra (`pip install "keras_vit[export]"`, NNCF included;
"torch" needs the `torch` extra); a format whose runtime is missing is refused in one line
naming the extra before any work.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import warnings

import keras
import numpy as np

from keras_vit.checkpoints.base.lora import merged_weights
from keras_vit.checkpoints.keras_files.model_io import model_input_preprocessing
from keras_vit.kernels import dispatch
from keras_vit.spec import layer_names as names
from keras_vit.spec.export_formats import (  # noqa: F401  (importable here too)
    FORMATS,
    QUANTIZE_MODES,
    QUANTIZED_FORMATS,
    WEIGHT_COMPRESSED,
    MissingRuntimeError,
    check_format,
    check_runtime,
    writer_backend,
)
from keras_vit.spec.input_scaling import MEAN_STD

logger = logging.getLogger(__name__)

ARTIFACTS = {
    "onnx": ("model.onnx",),
    "litert": ("model.tflite",),
    "openvino": ("model.xml", "model.bin"),
    "torch": ("model.pt2",),
}
PROBE_BATCHES = (1, 5)
TOLERANCE = 1e-4
QUANTIZED_TOLERANCE = 0.05
"""For a quantized export, the tolerance as a share of the largest |logit|: Keras quantizes the
activations per call, and a runtime's float rounding moves some across an int8 step (a tiny
int8 ViT in ONNX Runtime: 0.013 on logits of ~1)."""


class ExportMismatchError(ValueError):
    """An artifact whose logits in its runtime differ from Keras' by more than the tolerance
    (the artifact has been removed)."""


@dataclasses.dataclass
class ExportReport:
    """What `export_model` wrote: `path` (the artifact, or the SavedModel's version folder),
    `format`, `image_size` `(height, width)`, `quantize` (None or the mode),
    `max_difference`, the largest absolute logit difference to Keras over the probes, and
    `top1_agreement`, the share of the probe images (6) whose top-1 class is Keras'."""

    path: str
    format: str
    image_size: tuple[int, int]
    quantize: str | None
    max_difference: float
    top1_agreement: float = 1.0

    def __repr__(self) -> str:
        mode = f", quantize={self.quantize!r}" if self.quantize else ""
        return (
            f"ExportReport(path={self.path!r}, format={self.format!r}, "
            f"image_size={self.image_size}{mode}, max_difference={self.max_difference:.2g}, "
            f"top1_agreement={self.top1_agreement:.2f})"
        )


def _check_arguments(format, quantize, tolerance) -> None:
    check_format(format, quantize)
    if not isinstance(tolerance, (int, float)) or not tolerance > 0:
        raise ValueError(f"`tolerance` must be a positive number. Received: {tolerance!r}")


def export_model(
    model: keras.Model,
    export_dir: str | os.PathLike,
    format: str = "saved_model",
    *,
    quantize: str | None = None,
    image_size=None,
    overwrite: bool = False,
    tolerance: float | None = None,
    **saved_model_kwargs,
) -> ExportReport:
    """Writes `model` in `format` into `export_dir` and checks it in its runtime.

    Args:
        model: a keras_vit classifier (ViT or hybrid; a `head` giving logits), built at a
            fixed image size or with `dynamic_image_size=True`.
        export_dir: the folder to write into (created if missing).
        format: "saved_model" (default), "onnx", "litert", "openvino" or "torch" (module
            docstring).
        quantize: None (default), "int8", "int4" or "float8": `keras.Model.quantize` on a
            copy of the model before export (int8/int4: Keras' per-channel abs-max weights,
            activations quantized per call); for "openvino", "int8" only: NNCF's int8 weight
            compression of the float artifact (`QUANTIZED_FORMATS` lists what each takes).
        image_size: `(height, width)` (or an int) to export a `dynamic_image_size` model at;
            default its position table's size. Must be None or the model's size otherwise.
        overwrite: replace an existing artifact (default False: `FileExistsError`).
        tolerance: the largest absolute logit difference to Keras accepted; default 1e-4,
            and for a quantized export `QUANTIZED_TOLERANCE` x the largest |logit| (of the
            quantized Keras model, or of the float one for NNCF's OpenVINO int8).
        **saved_model_kwargs: "saved_model" only: `version`, `class_names`, `top_k`
            (`keras_vit.export.export_saved_model`).

    Returns:
        An `ExportReport`.

    Raises:
        ValueError: an unknown format or quantize mode, a bad tolerance, keyword arguments
            another format does not take, a model without a fixed size and no `image_size`.
        MissingRuntimeError: the format's runtime (or NNCF, for OpenVINO int8) is not
            installed (names the extra).
        FileExistsError: the artifact exists and `overwrite` is False.
        ExportMismatchError: the runtime's logits differ from Keras' by more than `tolerance`
            (the artifact is removed).
    """
    _check_arguments(format, quantize, TOLERANCE if tolerance is None else tolerance)
    if saved_model_kwargs and format != "saved_model":
        raise ValueError(
            f"{sorted(saved_model_kwargs)} are options of format='saved_model' only. "
            f"Received: format={format!r}"
        )
    check_runtime(format, quantize)
    export_dir = os.fspath(export_dir)
    size = _export_size(model, image_size)
    if format != "saved_model":
        _check_targets(export_dir, format, overwrite)
    copy = _float32_at_size(model, size)
    if format == "saved_model":
        prepared = _quantized(copy, quantize)
        served = serving_model(prepared, size)
        path, checked = _saved_model(
            prepared, served, export_dir, tolerance, overwrite, saved_model_kwargs, quantize
        )
        return ExportReport(path, format, size, quantize, *checked)
    os.makedirs(export_dir, exist_ok=True)
    paths = [os.path.join(export_dir, name) for name in ARTIFACTS[format]]
    compressed = format in WEIGHT_COMPRESSED and quantize is not None
    try:
        served = _write(copy, paths[0], format, None if compressed else quantize)
        if compressed:
            compress_openvino_weights(paths[0], quantize)
        runner = RUNNERS[format]
        checked = _compare(served, lambda x: runner(paths[0], x), tolerance, format, quantize)
    except BaseException:
        _remove(paths)
        raise
    logger.info("Exported %s (max logit difference %.2g)", paths[0], checked[0])
    return ExportReport(paths[0], format, size, quantize, *checked)


def _write(copy, path, format, quantize) -> keras.Model:
    """Writes the artifact of the float32 fixed-size `copy` to `path` (in a child process when
    this process' backend is not the format's); returns the serving model to compare with."""
    backend = writer_backend(format)
    if keras.backend.backend() == backend:
        return write_artifact(copy, path, format=format, quantize=quantize)
    from keras_vit._export_process import run_in_backend_process

    logger.info("Writing the %s artifact in a KERAS_BACKEND=%s process", format, backend)
    options = {"format": format, "quantize": quantize}
    run_in_backend_process(__name__, backend, copy, path, options, f"the {format} artifact")
    return serving_model(_quantized(copy, quantize), tuple(copy.inputs[0].shape[1:3]))


def write_artifact(copy, path, *, format, quantize=None) -> keras.Model:
    """Writes `copy` (a float32 keras_vit classifier at a fixed size) behind its input scaling
    as `format` to `path` with Keras' `model.export`, under `dispatch.portable_kernels()`,
    quantized first if asked (in place); returns the serving model it wrote."""
    served = serving_model(_quantized(copy, quantize), tuple(copy.inputs[0].shape[1:3]))
    with dispatch.portable_kernels():
        served(probe_images(served.inputs[0].shape[1:3], served.inputs[0].shape[3], 1))
        served.export(path, format=format, verbose=False, **_export_options(format))
    return served


def _export_options(format) -> dict:
    """Keras' `model.export` keywords of a format: a dynamic batch for "torch"."""
    if format != "torch":
        return {}
    import torch

    return {"dynamic_shapes": {0: torch.export.Dim("batch", min=1)}}


def _saved_model(prepared, served, export_dir, tolerance, overwrite, kwargs, quantized):
    """`(version folder, (max difference, top-1 agreement))` of `export_saved_model`, checked
    with TensorFlow (the SavedModel loaded once)."""
    import tensorflow as tf

    from keras_vit.export import SERVING_SIGNATURE, export_saved_model

    target = export_saved_model(prepared, export_dir, overwrite=overwrite, **kwargs)
    try:
        signature = tf.saved_model.load(target).signatures[SERVING_SIGNATURE]

        def run(pixels):
            return signature(images=tf.constant(pixels))["logits"].numpy()

        return target, _compare(served, run, tolerance, "saved_model", quantized)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise


def _check_targets(export_dir, format, overwrite) -> None:
    existing = [
        name for name in ARTIFACTS[format] if os.path.exists(os.path.join(export_dir, name))
    ]
    if existing and not overwrite:
        raise FileExistsError(f"{existing[0]} exists; pass overwrite=True to replace it.")


def _remove(paths) -> None:
    for path in paths:
        if os.path.exists(path):
            os.remove(path)


def _export_size(model, image_size) -> tuple[int, int]:
    """The `(height, width)` the artifact takes: the model's, or for a `dynamic_image_size`
    model `image_size` (default: its position table's size)."""
    height, width = model.inputs[0].shape[1:3]
    if image_size is not None:
        size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        if None not in (height, width) and size != (height, width):
            raise ValueError(
                f"Model {model.name!r} takes {height}x{width} images; image_size={image_size} "
                "is only for dynamic_image_size models."
            )
        return size
    if None not in (height, width):
        return int(height), int(width)
    native = getattr(_find_layer(model, names.EMBEDDING), "native_image_size", None)
    if native is None:
        raise ValueError(
            f"Model {model.name!r} takes images of any size; pass image_size=(height, width) "
            "to export it at (the artifact takes that size only)."
        )
    logger.info("Exporting the dynamic-size model at its table's size %s", native)
    return tuple(native)


def _find_layer(model, name):
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if layer.name == name:
            return layer
    return None


def _float32_at_size(model, size) -> keras.Model:
    """A float32 copy of `model` (LoRA adapters merged) taking `(batch, *size, channels)`."""
    copy = _float32_copy(model)
    if None in copy.inputs[0].shape[1:3]:
        images = keras.Input((*size, copy.inputs[0].shape[3]), name=copy.inputs[0].name)
        copy = keras.Model(images, copy(images), name=copy.name)
    return copy


def _quantized(copy, quantize) -> keras.Model:
    """`copy` quantized in place by `keras.Model.quantize` (unchanged when `quantize` is None)."""
    if quantize is not None:
        with warnings.catch_warnings():  # Keras names every layer without a quantize form
            warnings.filterwarnings("ignore", "Layer .* does not have a `quantize` method")
            copy.quantize(quantize)
    return copy


def _float32_copy(model) -> keras.Model:
    """`model` rebuilt from its config under the float32 policy with its (LoRA-merged) weights:
    the converters take float32 graphs only (OpenVINO refuses a mixed_bfloat16 graph's
    bfloat16 constants); a model built under another policy is said so in a log line."""
    policy = model.dtype_policy.name
    if policy != "float32":
        logger.info("Exporting a float32 copy of %r (built under %s)", model.name, policy)
    config = model.get_config()
    for layer in config.get("layers", []):
        dtype = layer["config"].get("dtype")
        if isinstance(dtype, dict):
            layer["config"]["dtype"] = keras.dtype_policies.serialize(keras.DTypePolicy("float32"))
    copy = model.__class__.from_config(config)
    copy.set_weights(merged_weights(model))
    return copy


def serving_model(model, size) -> keras.Model:
    """`model` behind its input scaling: input float32 pixels in [0, 255] `(batch, *size,
    channels)`, output float32 logits.

    The scaling's offset is added as a `(1, *size, channels)` constant, not a scalar: an add
    whose shapes do not broadcast is an error in every runtime, so an artifact given another
    size refuses it (LiteRT's non-strict `resize_tensor_input` otherwise lets a valid-padding
    patch convolution crop a 39x39 image to 32x32 silently). The constant costs
    `4 * height * width * channels` bytes of the artifact."""
    channels = model.inputs[0].shape[3]
    scale, offset = input_affine(model_input_preprocessing(model), channels)
    pixels = keras.Input((*size, channels), name="images", dtype="float32")
    offsets = np.broadcast_to(np.asarray(offset, np.float32), (1, *size, channels)).copy()
    scaled = keras.ops.add(
        keras.ops.multiply(
            pixels, np.float32(scale) if np.ndim(scale) == 0 else np.asarray(scale, np.float32)
        ),
        offsets,
    )
    logits = keras.ops.cast(model(scaled), "float32")
    return keras.Model(pixels, logits, name=f"{model.name}_serving")


def input_affine(preprocessing: str, channels: int):
    """`(scale, offset)` with `pixels * scale + offset` = the model's input scaling:
    "[-1,1]": 1/127.5 and -1; "imagenet" / "clip": per channel `1 / (255 std)` and
    `-mean / std` (`keras_vit.spec.input_scaling`)."""
    if preprocessing == "[-1,1]":
        return 1.0 / 127.5, -1.0
    mean, std = (np.asarray(values, np.float32) for values in MEAN_STD[preprocessing])
    if channels != 3:
        raise ValueError(f"The {preprocessing} mean/std needs 3 channels, not {channels}.")
    return 1.0 / (255.0 * std), -mean / std


def probe_images(size, channels, batch, seed=0) -> np.ndarray:
    """float32 pixels in [0, 255] `(batch, *size, channels)`, seeded."""
    rng = np.random.default_rng(seed + batch)
    return rng.uniform(0.0, 255.0, (batch, *size, channels)).astype(np.float32)


def _compare(served, run, tolerance, format, quantized=False) -> tuple[float, float]:
    """`(largest |runtime - Keras| logit difference, top-1 agreement)` over the probe batches;
    raises `ExportMismatchError` when the difference is above `tolerance`."""
    size, channels = tuple(served.inputs[0].shape[1:3]), served.inputs[0].shape[3]
    worst, largest, agree, images = 0.0, 0.0, 0, 0
    for batch in PROBE_BATCHES:
        pixels = probe_images(size, channels, batch)
        expected = keras.ops.convert_to_numpy(served(pixels, training=False)).astype(np.float64)
        got = np.asarray(run(pixels), np.float64).reshape(expected.shape)
        worst = max(worst, float(np.max(np.abs(got - expected))))
        largest = max(largest, float(np.max(np.abs(expected))))
        agree += int(np.sum(got.argmax(-1) == expected.argmax(-1)))
        images += batch
    if tolerance is None:
        tolerance = QUANTIZED_TOLERANCE * largest if quantized else TOLERANCE
    if not worst <= tolerance:
        raise ExportMismatchError(
            f"The {format} artifact's logits differ from Keras' by {worst:.3g} (> tolerance "
            f"{tolerance:g}) on the probe batches {PROBE_BATCHES}; it was removed."
        )
    return worst, agree / images


OPENVINO_INT8_MODE = "INT8_ASYM"
"""NNCF's int8 weight compression for OpenVINO: per output channel, with a zero point."""


def compress_openvino_weights(path, quantize="int8") -> None:
    """Replaces the OpenVINO artifact at `path` (`.xml` + `.bin`) by NNCF's int8 weight
    compression of it (`nncf.compress_weights`, `OPENVINO_INT8_MODE`): the weights of every
    matrix product and convolution stored as int8 with a float scale (and zero point) per
    output channel, dequantized by the CPU plugin; activations stay float. The rest of the
    graph is saved in float32 (`compress_to_fp16=False`)."""
    if quantize != "int8":
        raise ValueError(f"OpenVINO takes quantize='int8' only. Received: {quantize!r}")
    import nncf
    import openvino

    nncf.set_log_level(logging.ERROR)  # its per-layer table would fill the CLI's output
    model = openvino.Core().read_model(path)
    mode = getattr(nncf.CompressWeightsMode, OPENVINO_INT8_MODE)
    compressed = nncf.compress_weights(model, mode=mode)
    stem = os.path.splitext(path)[0]
    staged = f"{stem}.compressing"
    try:
        openvino.save_model(compressed, f"{staged}.xml", compress_to_fp16=False)
        del model, compressed
        for suffix in (".xml", ".bin"):
            os.replace(f"{staged}{suffix}", f"{stem}{suffix}")
    finally:
        _remove([f"{staged}.xml", f"{staged}.bin"])
    logger.info("Compressed the OpenVINO weights of %s to int8 (NNCF %s)", path, mode.value)


def run_onnx(path, pixels) -> np.ndarray:
    """Logits of an ONNX artifact in onnxruntime (CPU)."""
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: pixels})[0]


def run_litert(path, pixels) -> np.ndarray:
    """Logits of a LiteRT artifact in `ai_edge_litert`'s interpreter (batch resized)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path)
    source = interpreter.get_input_details()[0]
    interpreter.resize_tensor_input(source["index"], pixels.shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(source["index"], pixels)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


def run_openvino(path, pixels) -> np.ndarray:
    """Logits of an OpenVINO artifact on its CPU plugin."""
    import openvino

    # f32: the CPU plugin would otherwise run bfloat16 on CPUs that have it
    compiled = openvino.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return compiled(pixels)[compiled.outputs[0]]


def run_torch(path, pixels) -> np.ndarray:
    """Logits of a `.pt2` ExportedProgram loaded with `torch.export.load` (CPU)."""
    import torch

    program = torch.export.load(path).module()
    with torch.no_grad():
        return program(torch.from_numpy(pixels)).detach().cpu().numpy()


RUNNERS = {
    "onnx": run_onnx,
    "litert": run_litert,
    "openvino": run_openvino,
    "torch": run_torch,
}


def _child_write(model, path, *, format, quantize=None) -> str:
    """The child process' work: `write_artifact` of the loaded `.keras` copy; returns `path`."""
    write_artifact(model, path, format=format, quantize=quantize)
    return path


if __name__ == "__main__":  # the child process of an export from another backend
    import sys

    from keras_vit._export_process import child_main

    sys.exit(child_main(sys.argv[1], _child_write))
