"""Argument helpers shared by the `keras-vit` subcommands (data, run, precision flags; the
output flags are in `keras_vit.cli.progress`)."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import logging
import os

from keras_vit.cli import progress

RUN_MODEL_FILE = "best.keras"
RUN_CONFIG_FILE = "config.json"
MODEL_SUFFIXES = (".keras", ".npz")


class UsageError(ValueError):
    """A bad command-line argument, reported as one line with exit code 2 before work starts."""


logger = logging.getLogger(__name__)


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
    """argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def add_bad_images_argument(parser, *, default: str) -> None:
    """--bad-images: what to do with image files that cannot be decoded."""
    parser.add_argument(
        "--bad-images",
        choices=["skip", "fail"],
        default=default,
        help="image files that cannot be decoded (corrupt, empty, too large, unknown format): "
        f"skip them and log their names, or stop at the first one (default: {default})",
    )


def add_data_arguments(parser, *, default_dataset_help: str, bad_images: str = "skip") -> None:
    parser.add_argument(
        "--dataset",
        help=(
            "data source: 'mnist' or 'digits' (embedded), a TFDS name such as 'cifar100', "
            f"or a folder with one sub-folder per class ({default_dataset_help})"
        ),
    )
    parser.add_argument("--data-dir", help="TFDS data directory (never downloads)")
    add_bad_images_argument(parser, default=bad_images)


def add_run_arguments(parser, *, task: str) -> None:
    """Image size, schedule, distribution and run-directory flags of train/finetune."""
    parser.add_argument("--image-size", type=positive_int, help="input side in pixels")
    parser.add_argument("--batch-size", type=positive_int, help="global batch size")
    parser.add_argument("--learning-rate", type=positive_float, help="base learning rate")
    parser.add_argument("--seed", type=int, help="random seed (weights, shuffling, augmentation)")
    parser.add_argument(
        "--shots-per-class",
        type=positive_int,
        help="embedded datasets: train on N images per class, evaluate on all the others",
    )
    parser.add_argument(
        "--validation-split",
        default="train[90%:]",
        help="split that picks the best epoch (default 'train[90%%:]': a stratified tenth of "
        "train drawn with --split-seed, which is then not trained on); the 'test' split is "
        "only evaluated at the end, with the best model",
    )
    parser.add_argument(
        "--split-seed", type=int, default=0, help="seed of the validation carve (default 0)"
    )
    add_allow_test_selection_argument(parser, "--validation-split")
    parser.add_argument(
        "--strategy",
        default="auto",
        help="tf.distribute strategy: auto, one_device, mirrored, multi_worker (TF_CONFIG), "
        "tpu (default: auto)",
    )
    add_precision_arguments(parser)
    parser.add_argument(
        "--run-dir",
        help=f"run directory (default: runs/{task}-<date>-<time>); must be new unless --resume",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --run-dir from its last finished epoch, with its stored "
        "configuration",
    )
    progress.add_output_arguments(parser)


def add_allow_test_selection_argument(parser, selecting_flag: str) -> None:
    """--allow-test-selection: `selecting_flag` may share images with the test split."""
    parser.add_argument(
        "--allow-test-selection",
        action="store_true",
        help=f"allow {selecting_flag} to share images with the test split (refused by "
        "default: the test figure would no longer be held out); recorded and warned about",
    )


PRECISION_CHOICES = ("auto", "float32", "mixed_float16", "mixed_bfloat16")
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
    (`--mixed-precision {auto,...}`, not `[{auto,...}]`)."""

    def _format_args(self, action, default_metavar):
        if isinstance(action, ValueRequired):
            (metavar,) = self._metavar_formatter(action, default_metavar)(1)
            return metavar
        return super()._format_args(action, default_metavar)


def add_precision_arguments(parser) -> None:
    """--mixed-precision and --jit-compile/--no-jit-compile (every subcommand that runs a
    model); both default to "auto": `keras_vit.distribute.choose_precision` picks.
    --mixed-precision always takes a value; --jit-compile alone means true."""
    parser.add_argument(
        "--mixed-precision",
        action=ValueRequired,
        choices=PRECISION_CHOICES,
        default="auto",
        help="dtype policy (a value is always needed, unlike --jit-compile); auto (default) "
        "picks the fastest for this device and model width (mixed_bfloat16 on CPUs with "
        "bfloat16 units for wide models, else float32; mixed precision on GPUs/TPUs)",
    )
    parser.add_argument(
        "--jit-compile",
        nargs="?",
        const=True,
        default="auto",
        type=jit_compile_value,
        metavar="{auto,true,false}",
        help="compile with XLA; auto (default) picks with the precision (XLA off for "
        "bfloat16 on CPU and for several CPU replicas); the bare flag means true",
    )
    parser.add_argument(
        "--no-jit-compile",
        dest="jit_compile",
        action="store_const",
        const=False,
        help="same as --jit-compile false",
    )


class DeprecatedAlias(argparse.Action):
    """An old flag that stores `const` (or its value) into the new flag's dest, with a
    warning naming the new spelling."""

    def __init__(self, option_strings, dest, new_flag, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) != parser.get_default(self.dest):
            parser.error(f"{option_string} is the old spelling of {self.new_flag}; give one")
        logger.warning("%s is deprecated; use %s.", option_string, self.new_flag)
        setattr(namespace, self.dest, self.const if values in (None, []) else values)


def add_deprecated_precision_aliases(parser) -> None:
    """`keras-vit benchmark`'s old --dtype-policy POLICY and --no-xla (hidden in --help)."""
    parser.add_argument(
        "--dtype-policy",
        dest="mixed_precision",
        choices=PRECISION_CHOICES,
        action=DeprecatedAlias,
        new_flag="--mixed-precision",
        help=argparse.SUPPRESS,
    )
    parser.add_argument(
        "--no-xla",
        dest="jit_compile",
        nargs=0,
        const=False,
        action=DeprecatedAlias,
        new_flag="--no-jit-compile",
        help=argparse.SUPPRESS,
    )


def choose_precision(args, model):
    """The `PrecisionChoice` of --mixed-precision/--jit-compile for a loaded `model`; logs it."""
    from keras_vit import distribute

    choice = distribute.choose_precision(
        distribute.model_width(model),
        mixed_precision=args.mixed_precision,
        jit_compile=args.jit_compile,
    )
    logger.info("Precision: %s", choice.describe())
    return choice


def model_with_precision(args, model):
    """(model under the chosen policy, the `PrecisionChoice`); XLA set on the model."""
    from keras_vit import distribute

    choice = choose_precision(args, model)
    model = distribute.with_dtype_policy(model, choice.policy)
    model.jit_compile = choice.jit_compile
    return model, choice


def recipe_overrides(args, fields: dict[str, str]) -> dict:
    """{recipe field: value} for the flags the user gave (`fields`: arg name -> field)."""
    return {
        field: getattr(args, arg)
        for arg, field in fields.items()
        if getattr(args, arg, None) is not None
    }


def default_run_dir(task: str) -> str:
    return os.path.join("runs", f"{task}-{datetime.datetime.now():%Y%m%d-%H%M%S}")


def resolve_strategy(name: str):
    """The strategy, or UsageError for an unknown name or one that cannot run here."""
    from keras_vit import distribute

    try:
        return distribute.resolve_strategy(name)
    except (ValueError, distribute.StrategyUnavailableError) as error:
        raise UsageError(str(error)) from None


@contextlib.contextmanager
def usage_errors():
    """Turns the configuration errors found before any work into `UsageError`."""
    from keras_vit import distribute, run_plan, runs
    from keras_vit.data.image_check import BadImageError

    try:
        yield
    except (
        run_plan.ConfigError,
        runs.RunDirError,
        distribute.StrategyUnavailableError,
        BadImageError,
    ) as e:
        raise UsageError(" ".join(str(e).split())) from None


def run_training(config, args, task: str) -> int:
    """Shared body of `train` and `finetune`: resolve, train, print the summary."""
    from keras_vit import runs

    if args.resume and not args.run_dir:
        raise UsageError("--resume needs the --run-dir of the run to continue.")
    run_dir = args.run_dir = args.run_dir or default_run_dir(task)  # main's --resume hint
    mode = progress.output_mode(args)
    if args.resume:
        from keras_vit.cli.resume_flags import resume_refusal

        with usage_errors():
            stored = runs.RunConfig.from_dict(runs.read_config(run_dir)["run"])
        if refusal := resume_refusal(args, config, stored, task):  # flags it would ignore
            raise UsageError(refusal)
        config = stored
    strategy = resolve_strategy(args.strategy if not args.resume else config.strategy)
    check_jit_compile(args, strategy)

    def announce(record):
        if mode != "quiet":
            precision = record["resolved"]["dtype_policy"]
            print(progress.start_line(run_dir, record, precision), flush=True)
            if args.resume:
                print(f"Resuming {run_dir} with its stored configuration.", flush=True)

    with usage_errors():
        result = runs.train(
            config,
            run_dir,
            strategy=strategy,
            resume=args.resume,
            verbose=progress.keras_verbose(mode),
            extra_callbacks=[progress.interrupt_guard()]
            + ([progress.epoch_lines()] if mode == "epoch" else []),
            on_start=announce,
        )
    print_summary(result)
    return 0


def check_jit_compile(args, strategy) -> None:
    """UsageError for an explicit --jit-compile that the strategy cannot run on this device
    (without the flag, the recipe's XLA default is turned off there instead)."""
    from keras_vit import distribute

    reason = distribute.xla_unsupported_reason(strategy)
    if getattr(args, "jit_compile", None) is True and reason:
        raise UsageError(f"--jit-compile cannot run here: {reason}; drop the flag.")


def print_summary(result) -> None:
    """The few lines `train`/`finetune` end with: the test figures of best.keras (the model
    `evaluate` and `export` use), how the best epoch was picked, where the files are."""
    from keras_vit import runs

    metrics = result.metrics
    run_dir = result.run_dir
    resolved = (runs.read_config(run_dir) or {}).get("resolved", {})
    best = metrics.get("best") or {}
    test = metrics.get("test")
    if test:
        print(
            f"Test accuracy: {100 * test['accuracy']:.2f}% on '{resolved.get('test_split')}' "
            f"(best.keras; test loss {test['loss']:.4f}, {test['loss_name']})"
        )
    elif "validation" in metrics:
        validation = metrics["validation"]
        print(
            f"Validation accuracy: {100 * validation['accuracy']:.2f}% after the last epoch "
            "(no test split; loss with the training label smoothing "
            f"{validation['loss']:.4f})"
        )
    if best:
        images = resolved.get("num_validation_examples")
        print(
            f"Best epoch: {best['epoch'] + 1} of {metrics['epochs']} by {best['monitor']} "
            f"{best['value']:.4f} on '{resolved.get('validation_split')}' "
            f"({images} images, not trained on)"
        )
    print(
        f"Trained {metrics['epochs']} epochs, {metrics['steps']} steps on "
        f"{metrics['num_replicas']} replica(s); run directory: {run_dir}"
    )
    print(f"Models: {os.path.join(run_dir, 'best.keras')} (best), last.keras, best.npz")


def resolve_model_path(path: str, *, suffixes=MODEL_SUFFIXES) -> tuple[str, str | None]:
    """(model file, run directory or None) for a RUN_OR_MODEL argument.

    A run directory gives its best.keras; a model file (one of `suffixes`: `.keras` and
    `.npz` by default, `export` and `explain` take `.keras` only) inside a run directory also
    reports that run (for its dataset and class names).

    Raises:
        UsageError: the path does not exist, is a directory without best.keras, or is not a
            file of `suffixes`.
    """
    wanted = " or ".join(suffixes)
    if os.path.isdir(path):
        model_file = os.path.join(path, RUN_MODEL_FILE)
        if not os.path.isfile(model_file):
            raise UsageError(f"{path!r} is not a run directory: it has no {RUN_MODEL_FILE}")
        return model_file, path
    if not os.path.isfile(path):
        raise UsageError(
            f"RUN_OR_MODEL not found: {path!r} (a {wanted} file or a run directory with "
            f"{RUN_MODEL_FILE})"
        )
    if not path.endswith(tuple(suffixes)):
        raise UsageError(
            f"RUN_OR_MODEL must be a {wanted} file or a run directory with {RUN_MODEL_FILE}. "
            f"Received: {path!r}"
        )
    folder = os.path.dirname(os.path.abspath(path))
    return path, folder if os.path.isfile(os.path.join(folder, RUN_CONFIG_FILE)) else None


def class_names_from_run(run_dir: str | None) -> list[str] | None:
    """The `class_names` recorded in a run's config.json.

    `keras-vit train`/`finetune` write them under "resolved"; hand-written configs may hold
    them at the top level or under "data"/"dataset".
    """
    if run_dir is None:
        return None
    config_path = os.path.join(run_dir, RUN_CONFIG_FILE)
    if not os.path.isfile(config_path):
        return None
    with open(config_path, encoding="utf-8") as handle:
        config = json.load(handle)
    sections = (config.get("resolved"), config, config.get("data"), config.get("dataset"))
    for section in sections:
        names = section.get("class_names") if isinstance(section, dict) else None
        if names:
            return [str(name) for name in names]
    return None


def outputs_logits(model) -> bool:
    """False if the model's head ends in a softmax (probabilities), else True."""
    from keras_vit.layer_names import HEAD

    present = {layer.name for layer in model.layers}
    activation = model.get_layer(HEAD).activation if HEAD in present else None
    return getattr(activation, "__name__", "linear") != "softmax"


def read_run_config(path: str) -> dict | None:
    """The config.json of the run RUN_OR_MODEL belongs to (None outside a run), without
    loading the model; UsageError as `resolve_model_path`."""
    from keras_vit import runs

    _, run_dir = resolve_model_path(path)
    return runs.read_config(run_dir) if run_dir else None


def model_image_shape(model) -> tuple[int, int, int]:
    """`keras_vit.models.image_shape_of(model)`, a UsageError where it has none."""
    from keras_vit.models import image_shape_of

    try:
        return image_shape_of(model)
    except ValueError as error:
        raise UsageError(str(error)) from None


def load_model(path: str):
    """Loads RUN_OR_MODEL (safe mode for .keras); returns (model, run config dict or None)."""
    from keras_vit import run_plan

    model_file, _ = resolve_model_path(path)
    with usage_errors():
        model = run_plan.load_source_model(model_file)
    return model, read_run_config(path)
