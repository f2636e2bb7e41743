"""Entry point of the `keras-vit` command.

Each subcommand lives in its own module under `keras_vit.cli` and exposes
`add_parser(subparsers) -> argparse.ArgumentParser`; the parser it returns must call
`set_defaults(func=run)` where `run(args) -> int` does the work. Bad arguments found before
any work starts raise `keras_vit.cli.common.UsageError`, which `main` turns into one line on
stderr and exit code 2. Helpers two subcommands share live in `keras_vit.cli.common`; no
subcommand imports another.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import warnings

from keras_vit.cli import startup
from keras_vit.cli.common import UsageError

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
    _add_verbose(parser, default=False)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module_name in SUBCOMMAND_MODULES:
        subparser = importlib.import_module(f"keras_vit.cli.{module_name}").add_parser(subparsers)
        # also after the subcommand (`keras-vit train -v`); SUPPRESS keeps a `-v` given
        # before it from being reset by the subcommand's default
        _add_verbose(subparser, default=argparse.SUPPRESS)
    return parser


def _add_verbose(parser, default) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="log debug messages from keras_vit and show TensorFlow's start-up logs "
        "(also KERAS_VIT_VERBOSE=1)",
    )


def main(argv: list[str] | None = None) -> int:
    """Runs `keras-vit`; returns the process exit code (0 ok, 2 bad arguments)."""
    parser = build_parser()
    args = parser.parse_args(argv)  # --help exits here, before TensorFlow is imported
    verbose = args.verbose or startup.verbose_from_env()
    logging.basicConfig(
        level=logging.DEBUG
        if verbose
        else (logging.WARNING if vars(args).get("quiet") else logging.INFO),
        format="%(levelname)s %(name)s: %(message)s",
    )
    previous_showwarning, warnings.showwarning = warnings.showwarning, _show_warning
    try:
        startup.start_tensorflow(verbose)
        return int(args.func(args) or 0)
    except UsageError as error:
        print(f"keras-vit {args.command}: error: {error}", file=sys.stderr)
        return 2
    finally:
        warnings.showwarning = previous_showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Library warnings (`keras_vit.WeightsWarning`, ...) as one line on stderr."""
    print(f"keras-vit: warning: {message}", file=file or sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
