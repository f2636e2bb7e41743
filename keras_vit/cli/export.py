"""`keras-vit export RUN_OR_MODEL EXPORT_DIR`: a TF Serving SavedModel from a trained model.

RUN_OR_MODEL is a `.keras` file or a run directory holding `best.keras` (as written by
`keras-vit train` / `finetune`); the run's `config.json` supplies the class names when it
has them and `--class-names` is not given. See `keras_vit.export_saved_model` and
docs/serving.md.
"""

from __future__ import annotations

import argparse
import json
import os

from keras_vit.cli import flags, model_files, progress
from keras_vit.cli.flags import UsageError
from keras_vit.cli.model_files import class_names_from_run, resolve_model_path


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
    parser.add_argument("model", metavar="RUN_OR_MODEL", help="a .keras file or a run directory")
    parser.add_argument("export_dir", metavar="EXPORT_DIR", help="TF Serving model base path")
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
    resolve_model_path(args.model, suffixes=(".keras",))
    if args.class_names is not None:
        read_class_names_file(args.class_names)
    if args.version is not None and not args.overwrite:
        target = os.path.join(args.export_dir, str(args.version))
        if os.path.exists(target):
            raise UsageError(
                f"version {args.version} already exists at {target!r}; "
                "pass --overwrite to replace it"
            )


def run(args) -> int:
    """Loads the model, exports it, prints the version folder; returns the exit code."""
    check(args)
    model_path, run_dir = resolve_model_path(args.model, suffixes=(".keras",))
    if args.class_names is not None:
        class_names = read_class_names_file(args.class_names)
    else:
        class_names = class_names_from_run(run_dir)

    from keras_vit.export import export_saved_model

    model = model_files.load_keras_file(model_path)
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
    print(f"Exported {model_path} to {target} ({precision.describe()})")
    if progress.output_mode(args) != "quiet":
        print(
            "Signatures: serving_default (images), serving_bytes (image_bytes), features (images)"
        )
    return 0
