"""The `keras-vit` subcommands' shared flags: argparse types and actions, the data, run and
precision flags, and `UsageError` (the output flags are in `keras_vit.cli.progress`).

Each flag is parsed and checked here, where it enters, and reaches the library as the checked
value (`--image-size` as a `(height, width)` pair, `--jit-compile` as auto/True/False).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os

from keras_vit._atomic import replace_problem
from keras_vit.cli import progress
from keras_vit.runtime import precision
from keras_vit.spec import configs, kept_model


class UsageError(ValueError):
    """A bad command-line argument, reported as one line with exit code 2 before work starts."""


def positive_int(text: str) -> int:
    """argparse type: an integer > 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a finite positive number, got {text!r}")
    return value


def seed(text: str) -> int:
    """argparse type: a random seed, an integer in [0, 2**32) (NumPy's and TensorFlow's)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**32), got {text!r}")
    return value


def run_dir_path(text: str) -> str:
    """argparse type of --run-dir: a non-empty path (an empty one would silently become the
    default runs/<task>-<date>-<time>)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a folder path, got {text!r}")
    return text


IMAGE_SIZE_HELP = "side in pixels, or height and width ('224 160' or 224,160)"
"""The help of every subcommand's --image-size (each adds its default)."""


class ImageSize(argparse.Action):
    """--image-size PIXELS [PIXELS]: one side (square) or height and width, positive ints,
    given as two words or one with a comma ("224,160"), stored as the checked
    `(height, width)` pair that flows unchanged to the model's layer (argparse's error for
    anything else)."""

    def __init__(self, option_strings, dest, **kwargs):
        kwargs.setdefault("metavar", "PX")
        super().__init__(option_strings, dest, **{**kwargs, "nargs": "+"})

    def __call__(self, parser, namespace, values, option_string=None):
        words = [part for value in values for part in value.split(",")]
        if len(words) not in (1, 2):
            parser.error(
                f"argument {option_string}: takes 1 or 2 ints (side, or height width). "
                f"Received: {' '.join(values)}"
            )
        try:
            sides = [positive_int(word) for word in words]
        except argparse.ArgumentTypeError as error:
            parser.error(f"argument {option_string}: {error}")
        setattr(namespace, self.dest, (sides[0], sides[-1]))


def check_output_file(flag: str, path: str) -> None:
    """UsageError, before any work, for an output FILE flag (`--json`, `--out`) that cannot
    name a file keras_vit writes: empty, ending in a path separator (a folder's name), an
    existing folder, or an existing path that is no file (`keras_vit._atomic.replace_problem`:
    /dev/null, a pipe, a socket, which the atomic write would replace)."""
    if not path:
        raise UsageError(f"{flag} '': give a file name")
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} is a folder; give a file name")
    if path.endswith((os.sep, "/")):
        raise UsageError(f"{flag} {path!r} ends in a path separator (a folder); give a file name")
    problem = replace_problem(path)
    if problem:
        raise UsageError(f"{flag} {problem}")


def add_image_size_argument(parser, *, default_text: str, default=None) -> None:
    """--image-size as an `ImageSize` pair (every subcommand that takes a size), with the
    one help text `IMAGE_SIZE_HELP` and `default_text` saying what applies without it."""
    parser.add_argument(
        "--image-size",
        action=ImageSize,
        default=default,
        help=f"{IMAGE_SIZE_HELP} (default: {default_text})",
    )


def image_size_of_name(args, *, default=None) -> None:
    """Honours an image side in `args.model`'s name ("B/16-384", "ViT-B_16-384": 384, as
    timm's and the release's names mean it): it becomes `args.image_size` when --image-size
    is not given (else `default`); an --image-size that differs is refused, both named.

    Raises:
        UsageError: the name's size and --image-size differ, or the name's size is 0.
    """
    from keras_vit.spec import configs

    try:
        size = configs.resolve_model(args.model, recipes=True).image_size
    except ValueError:
        size = None  # an unknown or custom name: its reader names the problem
    if size is None:
        if args.image_size is None:
            args.image_size = default
        return
    if size <= 0:
        raise UsageError(f"--model {args.model!r} names image size {size}; it must be > 0")
    if args.image_size is not None and tuple(args.image_size) != (size, size):
        height, width = args.image_size
        raise UsageError(
            f"--model {args.model!r} names image size {size}, --image-size {height},{width} "
            "another: give one of them"
        )
    args.image_size = (size, size)


def add_bad_images_argument(parser, *, default: str) -> None:
    """--bad-images: what to do with image files that cannot be decoded."""
    parser.add_argument(
        "--bad-images",
        choices=["skip", "fail"],
        default=default,
        help=f"image files that do not decode: skip and name them, or stop (default: {default})",
    )


def add_data_arguments(parser, *, default_dataset_help: str, bad_images: str = "skip") -> None:
    parser.add_argument(
        "--dataset",
        metavar="DATA",
        help=(
            "mnist or digits (embedded), a TFDS name (cifar100), or a folder of class "
            f"sub-folders ({default_dataset_help})"
        ),
    )
    parser.add_argument("--data-dir", metavar="DIR", help="TFDS data directory (never downloads)")
    add_bad_images_argument(parser, default=bad_images)


def add_run_arguments(parser, *, task: str) -> None:
    """Image size, schedule, distribution and run-directory flags of train/finetune; the help
    gives the recipe's defaults (`keras_vit.spec.configs.RECIPE_DEFAULTS`)."""
    recipe = configs.RECIPE_DEFAULTS[task]
    add_image_size_argument(
        parser,
        default_text=f"{recipe['image_size']}, the recipe's" if task == "train" else "the model's",
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        metavar="N",
        help=f"global batch size (default: {recipe['batch_size']})",
    )
    parser.add_argument(
        "--learning-rate",
        type=positive_float,
        metavar="LR",
        help=f"peak learning rate (default: {recipe['learning_rate']:g})",
    )
    parser.add_argument(
        "--seed",
        type=seed,
        metavar="N",
        help=f"random seed of weights, shuffling, augmentation (default: {recipe['seed']})",
    )
    parser.add_argument(
        "--shots-per-class",
        type=positive_int,
        metavar="N",
        help="embedded datasets: N images per class train, the others test",
    )
    parser.add_argument(
        "--validation-split",
        default="train[90%:]",
        metavar="SPLIT",
        help="scored after every epoch, not trained on (default: train[90%%:], a stratified tenth)",
    )
    parser.add_argument(
        "--split-seed", type=seed, default=0, metavar="N", help="seed of that tenth (default 0)"
    )
    add_allow_test_selection_argument(parser, "--validation-split")
    add_select_argument(parser)
    parser.add_argument(
        "--strategy",
        default="auto",
        metavar="NAME",
        help="auto (default), one_device, mirrored, multi_worker (TF_CONFIG), tpu, model_parallel",
    )
    add_precision_arguments(parser)
    parser.add_argument(
        "--remat",
        action="store_true",
        help="recompute activations in the backward pass: less memory, slower steps",
    )
    parser.add_argument(
        "--run-dir",
        type=run_dir_path,
        metavar="DIR",
        help=f"new run directory (default: runs/{task}-<date>-<time>)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue --run-dir from its last finished epoch",
    )
    progress.add_output_arguments(parser)


def add_select_argument(parser) -> None:
    """--select last|best: which epoch's model a run keeps (`keras_vit.spec.kept_model`)."""
    parser.add_argument(
        "--select",
        choices=kept_model.SELECTIONS,
        default=kept_model.DEFAULT_SELECTION,
        help="the model kept as best.keras: the last epoch's (default) or the best on "
        "--validation-split",
    )


def add_allow_test_selection_argument(parser, selecting_flag: str) -> None:
    """--allow-test-selection: `selecting_flag` may share images with the test split."""
    parser.add_argument(
        "--allow-test-selection",
        action="store_true",
        help=f"let {selecting_flag} share images with the test split (recorded)",
    )


PRECISION_CHOICES = precision.CHOICES  # "auto" and the policies (one list)
JIT_WORDS = {"auto": "auto", "true": True, "on": True, "false": False, "off": False}


def jit_compile_value(text: str):
    """argparse type of --jit-compile: auto, true/on or false/off."""
    try:
        return JIT_WORDS[text.lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(
            f"expected auto, true/on or false/off, got {text!r}"
        ) from None


class ValueRequired(argparse.Action):
    """A flag that needs a value, whose bare use gets an error listing the values (argparse's
    own says only "expected one argument"). It parses with nargs="?" to see the bare flag;
    `HelpFormatter` shows the value as required all the same."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, **{**kwargs, "nargs": "?"})

    def __call__(self, parser, namespace, values, option_string=None):
        if values is None:
            choices = list(self.choices or ())
            raise argparse.ArgumentError(
                self,
                f"needs a value, one of {', '.join(choices)} (e.g. {option_string} "
                f"{choices[-1]}); a bare {option_string} has no meaning",
            )
        setattr(namespace, self.dest, values)


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help layout, with the value of a `ValueRequired` flag shown as required
    (`--mixed-precision {auto,...}`, not `[{auto,...}]`), and the help text starting further
    right (`HELP_POSITION`), so that most flags and their help share a line."""

    HELP_POSITION = 30

    def __init__(self, prog, *args, **kwargs):
        kwargs.setdefault("max_help_position", self.HELP_POSITION)
        super().__init__(prog, *args, **kwargs)

    def _format_args(self, action, default_metavar):
        if isinstance(action, ValueRequired):
            (metavar,) = self._metavar_formatter(action, default_metavar)(1)
            return metavar
        return super()._format_args(action, default_metavar)


def add_precision_arguments(parser) -> None:
    """--mixed-precision and --jit-compile/--no-jit-compile (every subcommand that runs a
    model); both default to "auto": `keras_vit.runtime.precision_auto.choose_precision` picks.
    --mixed-precision always takes a value; --jit-compile alone means true."""
    parser.add_argument(
        "--mixed-precision",
        action=ValueRequired,
        choices=PRECISION_CHOICES,
        default="auto",
        metavar="POLICY",
        help=f"{', '.join(PRECISION_CHOICES)}; auto (default): the fastest here, timed on CPUs "
        "(docs/training.md, 'Precision and XLA')",
    )
    jit = parser.add_mutually_exclusive_group()  # --jit-compile X --no-jit-compile: refused
    jit.add_argument(
        "--jit-compile",
        nargs="?",
        const=True,
        default="auto",
        type=jit_compile_value,
        metavar="{auto,true,false}",
        help="compile with XLA; auto (default): chosen with the precision; bare: true",
    )
    jit.add_argument(
        "--no-jit-compile",
        dest="jit_compile",
        action="store_const",
        const=False,
        help="same as --jit-compile false",
    )


def add_model_use_arguments(parser, *, batch_size: int | None = None) -> None:
    """The flags of every subcommand that runs a saved model (evaluate, fewshot, predict,
    explain, export): --batch-size (when `batch_size`, its default), --mixed-precision,
    --jit-compile and --quiet."""
    if batch_size is not None:
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            default=batch_size,
            help=f"batch size (default {batch_size})",
        )
    add_precision_arguments(parser)
    progress.add_output_arguments(parser, log_every=False)


def run_config_flags(args) -> dict:
    """The `keras_vit.train.runs.RunConfig` arguments train and finetune take from the same flags
    (data, distribution, precision, validation carve)."""
    names = ("data_dir", "strategy", "mixed_precision", "shots_per_class", "bad_images")
    names += ("validation_split", "split_seed", "allow_test_selection", "select", "remat")
    return {name: getattr(args, name) for name in names}


def _suppress_defaults(parser) -> None:
    """Sets every default of `parser` and of its subcommands' parsers to argparse.SUPPRESS,
    so that a parse leaves only the arguments typed on the command line in the namespace."""
    parser._defaults.clear()  # set_defaults(func=...)
    for action in parser._actions:
        action.default = argparse.SUPPRESS
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                _suppress_defaults(subparser)


def typed_flags(build_parser, argv) -> frozenset[str]:
    """The argparse dests of the flags and arguments typed in `argv` (also those typed at
    their default value), from a second parse by a fresh `build_parser()` whose defaults are
    all suppressed. Call it after a successful parse of the same `argv`."""
    parser = build_parser()
    _suppress_defaults(parser)
    return frozenset(vars(parser.parse_args(argv))) - {"command"}


RUN_RECIPE_FLAGS = ("dataset", "image_size", "batch_size", "learning_rate", "jit_compile", "seed")
"""Recipe fields that train's and finetune's flags of the same dest set."""


def recipe_overrides(args, fields) -> dict:
    """{recipe field: value} for the flags the user gave (`fields`: the recipe fields that
    flags of the same dest set, e.g. ("epochs", "seed"))."""
    return {
        field: getattr(args, field) for field in fields if getattr(args, field, None) is not None
    }


# The Python API's advice in library messages (keras_vit.checkpoints.loading), and what the
# command line offers instead (it has no skip= / strict= / adapt_channels= arguments).
API_ADVICE = {
    "Use skip=[...] or head='skip' to leave keys out, or strict=False to load what fits.": (
        "Give the model the file holds (convert: --model auto, the default, reads it from "
        "the file; --num-classes builds a new head)."
    ),
    "load with strict=False (or adapt_channels=True) to adapt it by timm's rule": (
        "the command line does not adapt input channels (keras_vit.from_checkpoint with "
        "channels= does)"
    ),
}


def cli_message(error) -> str:
    """`error`'s message on one line, with the Python API's advice (`skip=`, `strict=`)
    replaced by the command line's (`API_ADVICE`)."""
    text = " ".join(str(error).split())
    for advice, instead in API_ADVICE.items():
        text = text.replace(advice, instead)
    return text


@contextlib.contextmanager
def usage_errors():
    """Turns the configuration errors found before any work into `UsageError`."""
    from keras_vit.data.image_check import BadImageError
    from keras_vit.runtime import distribute
    from keras_vit.train import callbacks, run_config, run_directory

    try:
        yield
    except (
        run_config.ConfigError,
        run_directory.RunDirError,
        callbacks.BackupError,  # a backup that cannot be resumed from (workers disagree)
        distribute.StrategyUnavailableError,
        BadImageError,
    ) as e:
        raise UsageError(cli_message(e)) from None
