"""Entry point of the `keras-vit` command.

Each subcommand lives in its own module under `keras_vit.cli` and exposes
`add_parser(subparsers) -> argparse.ArgumentParser`; the parser it returns must call
`set_defaults(func=run)` where `run(args) -> int` does the work. A subcommand may also set
`check=check` where `check(args)` raises `UsageError` for what needs no TensorFlow: `main`
runs it before TensorFlow is imported. Bad arguments found before
any work starts raise `keras_vit.cli.flags.UsageError`, which `main` turns into one line on
stderr and exit code 2; a file that cannot be written (`OSError`: disk full, I/O error) gives
one line naming the path and the cause and exit code 1; Ctrl-C gives one line saying how to
continue and exit code 130. Helpers two subcommands share live in
`keras_vit.cli.flags`, `model_files` and `run_driver`; no subcommand imports another.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import warnings

from keras_vit._lazy import verbose_from_env
from keras_vit._version import __version__
from keras_vit.cli import startup
from keras_vit.cli.flags import HelpFormatter, UsageError, typed_flags

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


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line, `PROG: error: MESSAGE (see PROG --help)`,
    without the usage block; exit code 2 as argparse's (subcommands' parsers are of this
    class too: `add_subparsers` makes them of the parent's class)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = ArgumentParser(
        prog="keras-vit",
        description=(
            "Vision Transformer (ViT) for Keras/TensorFlow: train, fine-tune, evaluate, few-shot "
            "evaluate, predict, "
            "export, convert, benchmark and explain."
        ),
        formatter_class=HelpFormatter,
    )
    _add_verbose(parser, default=False)
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}", help="print the version"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module_name in SUBCOMMAND_MODULES:
        subparser = importlib.import_module(f"keras_vit.cli.{module_name}").add_parser(subparsers)
        subparser.formatter_class = HelpFormatter  # the usage of flags that need a value
        subparser.usage = short_usage(subparser)
        # also after the subcommand (`keras-vit train -v`); SUPPRESS keeps a `-v` given
        # before it from being reset by the subcommand's default
        _add_verbose(subparser, default=argparse.SUPPRESS)
    return parser


def short_usage(parser) -> str:
    """`%(prog)s [options] POSITIONAL ...`: the usage line of a subcommand, its flags listed
    once, below, rather than also in a usage block of many lines."""
    words = ["%(prog)s", "[options]"]
    for action in parser._actions:  # argparse keeps no public list of the arguments
        if action.option_strings:
            continue
        metavar = action.metavar or action.dest.upper()
        if action.nargs in ("+", "*"):
            metavar = f"{metavar} [...]"
        words.append(f"[{metavar}]" if action.nargs in ("?", "*") else metavar)
    return " ".join(words)


def _add_verbose(parser, default) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="debug logs, TensorFlow's start-up messages (also KERAS_VIT_VERBOSE=1)",
    )


def main(argv: list[str] | None = None) -> int:
    """Runs `keras-vit`; returns the process exit code (0 ok, 1 write error, 2 bad
    arguments, 130 interrupted)."""
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):  # `keras-vit` alone: its commands
        parser.print_help()
        return 2
    args = parser.parse_args(argv)  # --help exits here, before TensorFlow is imported
    args.typed_flags = typed_flags(build_parser, argv)  # what --resume names if it ignores
    verbose = args.verbose or verbose_from_env()
    logging.basicConfig(
        level=logging.DEBUG
        if verbose
        else (logging.WARNING if vars(args).get("quiet") else logging.INFO),
        format="%(levelname)s %(name)s: %(message)s",
    )
    previous_showwarning, warnings.showwarning = warnings.showwarning, _show_warning
    try:
        check_before_tensorflow(args)
        startup.start_tensorflow(verbose)
        startup.use_jax_compile_cache()
        return int(args.func(args) or 0)
    except UsageError as error:
        print(f"keras-vit {args.command}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # disk full, I/O error: the previous files are intact
        print(f"keras-vit {args.command}: error: {describe_os_error(error)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        end_partial_line()
        print(f"keras-vit {args.command}: interrupted. {resume_hint(args)}", file=sys.stderr)
        return 130
    finally:
        warnings.showwarning = previous_showwarning


def check_before_tensorflow(args) -> None:
    """Runs the subcommand's `check(args)` (set with `set_defaults(check=...)`), the argument
    checks that need no TensorFlow, so that their one-line error comes at once rather than
    after TensorFlow's import (10-14 s on a busy 2-core host). Raises `UsageError`."""
    check = getattr(args, "check", None)
    if check is not None:
        check(args)


def end_partial_line() -> None:
    """Ends the line a terminal's progress bar was drawing (Keras redraws it with a carriage
    return and no newline), so that what follows starts on its own line."""
    if sys.stdout.isatty():
        sys.stdout.write("\n")
        sys.stdout.flush()


def describe_os_error(error: OSError) -> str:
    """One line naming the path and the cause of a failed file operation."""
    from keras_vit._atomic import WriteError

    if isinstance(error, WriteError):
        return str(error)
    cause = error.strerror or " ".join(str(error).split()) or type(error).__name__
    return cause if error.filename is None else f"{error.filename}: {cause}"


def resume_hint(args) -> str:
    """How to continue an interrupted command (train/finetune: --resume)."""
    run_dir = getattr(args, "run_dir", None)
    if args.command in ("train", "finetune") and run_dir:
        return (
            "The run keeps its last finished epoch; continue with:\n"
            f"  keras-vit {args.command} --resume --run-dir {run_dir}"
        )
    return "Stopped before finishing; files already in place are unchanged."


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Library warnings (`keras_vit.WeightsWarning`, ...) as one line on stderr."""
    print(f"keras-vit: warning: {message}", file=file or sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
