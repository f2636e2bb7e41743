"""Entry point of the `keras-vit` command.

Each subcommand lives in its own module under `keras_vit.cli` and exposes
`add_parser(subparsers) -> argparse.ArgumentParser`; the parser it returns must call
`set_defaults(func=run)` where `run(args) -> int` does the work. Bad arguments found before
any work starts raise `UsageError`, which `main` turns into one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

# Subcommand modules, in the order `keras-vit --help` lists them.
SUBCOMMAND_MODULES: list[str] = [
    "train",
    "finetune",
    "evaluate",
    "fewshot",
    "transfer_suite",
    "predict",
    "export",
    "explain",
    "convert",
    "benchmark",
]


class UsageError(ValueError):
    """A bad command-line argument, reported as one line with exit code 2 before work starts."""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="keras-vit",
        description=(
            "Vision Transformer (ViT) for Keras/TensorFlow: train, fine-tune, evaluate, few-shot "
            "evaluate, predict, "
            "export, convert, benchmark and explain."
        ),
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log debug messages from keras_vit"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module_name in SUBCOMMAND_MODULES:
        importlib.import_module(f"keras_vit.cli.{module_name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs `keras-vit`; returns the process exit code (0 ok, 2 bad arguments)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except UsageError as error:
        print(f"keras-vit {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
