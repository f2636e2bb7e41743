"""`keras-vit export SOURCE EXPORT_DIR [--format F] [--quantize Q]`: a trained model for serving.

SOURCE is a `.keras` file, a run directory holding `best.keras` (as written by `keras-vit
train` / `finetune`) or a checkpoint `keras_vit.from_checkpoint` reads (`.npz`, timm
`.safetensors`, a Hugging Face folder); the run's `config.json` supplies the class names when
it has them and `--class-names` is not given. `--format saved_model` (default) writes TF
Serving's layout (`keras_vit.export_saved_model`); `onnx`, `litert`, `openvino` and `torch`
write one artifact checked in its runtime (`keras_vit.export_formats.export_model`). See
docs/serving.md.
"""

from __future__ import annotations

import argparse
import json
import os

from keras_vit.cli import flags, model_files, progress
from keras_vit.cli.flags import UsageError
from keras_vit.cli.model_files import class_names_from_run, resolve_model_path
from keras_vit.spec.export_formats import (
    FORMATS,
    QUANTIZE_MODES,
    MissingRuntimeError,
    check_format,
    check_runtime,
)


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Registers `export` on the `keras-vit` subparsers."""
    parser = subparsers.add_parser(
        "export",
        help="export a trained model as a TF Serving SavedModel (EXPORT_DIR/<version>/)",
        description=(
            "Writes EXPORT_DIR/<version>/ with the signatures serving_default (float32 "
            "`images` (batch, height, width, channels) in [0, 255], any size), serving_bytes "
            "(`image_bytes`: encoded JPEG/PNG) and features; resizing and scaling happen "
            "inside the graph."
        ),
    )
    parser.add_argument(
        "model",
        metavar="SOURCE",
        help="a .keras file, a run directory, or a checkpoint (.npz, .safetensors, HF folder)",
    )
    parser.add_argument(
        "export_dir", metavar="EXPORT_DIR", help="TF Serving model base path, or the folder"
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="saved_model",
        help="saved_model (TF Serving, default), onnx (model.onnx), litert (model.tflite), "
        "openvino (model.xml + .bin) or torch (model.pt2); every artifact is checked in its "
        "runtime against Keras (logits within 1e-4, else removed); onnx/litert/openvino need "
        "the export extra, torch the torch extra",
    )
    parser.add_argument(
        "--quantize",
        choices=QUANTIZE_MODES,
        default=None,
        help="keras.Model.quantize before export (saved_model; onnx int8/int4; torch); "
        "openvino: int8 weights by NNCF's compression",
    )
    parser.add_argument(
        "--image-size",
        type=flags.positive_int,
        default=None,
        help="the size to export a dynamic_image_size model at (default: its table's size)",
    )
    parser.add_argument(
        "--version", type=int, default=None, help="version folder (default: next integer)"
    )
    parser.add_argument(
        "--class-names",
        metavar="FILE",
        default=None,
        help="class names: a text file with one name per line, or a JSON list",
    )
    parser.add_argument("--top-k", type=int, default=5, help="classes in top_k_* (default 5)")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing version folder"
    )
    flags.add_model_use_arguments(parser)
    parser.set_defaults(func=run, check=check)
    return parser


def read_class_names_file(path: str) -> list[str]:
    """Class names from a JSON list or a text file with one name per line."""
    if not os.path.isfile(path):
        raise UsageError(f"--class-names file not found: {path!r}")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    if path.endswith(".json"):
        names = json.loads(text)
        if not isinstance(names, list):
            raise UsageError(f"--class-names JSON must be a list of strings: {path!r}")
        return [str(name) for name in names]
    return [line.strip() for line in text.splitlines() if line.strip()]


def check(args) -> None:
    """The argument checks that need no TensorFlow (run before importing it)."""
    if args.version is not None and args.version <= 0:
        raise UsageError(f"--version must be a positive integer. Received: {args.version}")
    if args.top_k <= 0:
        raise UsageError(f"--top-k must be a positive integer. Received: {args.top_k}")
    source_of(args.model)
    if args.format != "saved_model":
        try:
            check_format(args.format, args.quantize)
            check_runtime(args.format, args.quantize)
        except (ValueError, MissingRuntimeError) as error:
            raise UsageError(str(error)) from None
    if args.class_names is not None:
        read_class_names_file(args.class_names)
    if args.version is not None and not args.overwrite:
        target = os.path.join(args.export_dir, str(args.version))
        if os.path.exists(target):
            raise UsageError(
                f"version {args.version} already exists at {target!r}; "
                "pass --overwrite to replace it"
            )


def source_of(path: str) -> tuple[str, str | None, bool]:
    """(model file or checkpoint, run directory or None, whether it is a `.keras` model)."""
    if path.endswith(".keras") or os.path.isfile(os.path.join(path, model_files.RUN_MODEL_FILE)):
        model_path, run_dir = resolve_model_path(path, suffixes=(".keras",))
        return model_path, run_dir, True
    if not os.path.exists(path):
        raise UsageError(
            f"SOURCE not found: {path!r} (a .keras file, a run directory with "
            f"{model_files.RUN_MODEL_FILE}, or a checkpoint)"
        )
    return path, None, False


def _load(model_path: str, is_keras: bool):
    if is_keras:
        return model_files.load_keras_file(model_path)
    from keras_vit.model.from_kwargs import from_checkpoint

    try:
        return from_checkpoint(model_path)
    except (ValueError, OSError) as error:
        raise UsageError(f"Cannot build a model from {model_path!r}: {error}") from None


def run(args) -> int:
    """Loads the model, exports it, prints what was written; returns the exit code."""
    check(args)
    model_path, run_dir, is_keras = source_of(args.model)
    if args.class_names is not None:
        class_names = read_class_names_file(args.class_names)
    else:
        class_names = class_names_from_run(run_dir)
    model = _load(model_path, is_keras)
    if args.format != "saved_model" or args.quantize or args.image_size:
        return _export_checked(args, model, model_path, class_names)

    from keras_vit.export import export_saved_model

    model, precision = model_files.model_with_precision(args, model)
    try:
        target = export_saved_model(
            model,
            args.export_dir,
            version=args.version,
            class_names=class_names,
            top_k=args.top_k,
            overwrite=args.overwrite,
            jit_compile=precision.jit_compile,
        )
    except ValueError as error:
        raise UsageError(str(error)) from error
    xla = "on" if precision.jit_compile else "off"
    print(f"Exported {model_path} to {target} (precision {precision.policy}, XLA {xla})")
    if progress.output_mode(args) != "quiet":
        print(
            "Signatures: serving_default (images), serving_bytes (image_bytes), features (images)"
        )
    return 0


def _export_checked(args, model, model_path, class_names) -> int:
    """`keras_vit.export_formats.export_model`: the artifact checked in its runtime."""
    from keras_vit.export_formats import ExportMismatchError, export_model

    extra = {}
    if args.format == "saved_model":
        extra = dict(version=args.version, class_names=class_names, top_k=args.top_k)
    try:
        report = export_model(
            model,
            args.export_dir,
            args.format,
            quantize=args.quantize,
            image_size=args.image_size,
            overwrite=args.overwrite,
            **extra,
        )
    except (ValueError, FileExistsError) as error:
        if isinstance(error, ExportMismatchError):
            raise
        raise UsageError(str(error)) from error
    agreement = f", top-1 agreement {report.top1_agreement:.0%}" if args.quantize else ""
    print(
        f"Exported {model_path} to {report.path} ({args.format}"
        f"{', ' + args.quantize if args.quantize else ''}, float32, "
        f"{report.image_size[0]}x{report.image_size[1]}): logits within "
        f"{report.max_difference:.2g} of Keras' in its runtime at batch 1 and 5{agreement}"
    )
    return 0
