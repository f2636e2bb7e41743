"""Loading what a `keras-vit` subcommand's RUN_OR_MODEL names: a run directory (its
best.keras and config.json) or a model file, and putting it under the chosen precision."""

from __future__ import annotations

import json
import logging
import os

from keras_vit.cli.flags import UsageError, cli_message, usage_errors
from keras_vit.spec import run_files
from keras_vit.spec.run_config_file import RUN_CONFIG_FILE

RUN_MODEL_FILE = run_files.BEST_MODEL
MODEL_SUFFIXES = (".keras", ".npz")

logger = logging.getLogger(__name__)


def choose_precision(args, model, probe=None):
    """The `PrecisionChoice` of --mixed-precision/--jit-compile for a loaded `model`; logs it.
    `probe`: as `keras_vit.runtime.precision_auto.choose_precision` ("cached" for the one-off
    commands: a cached probe of this host and model shape, else the flag rule)."""
    from keras_vit.runtime import precision, precision_auto
    from keras_vit.runtime.precision_probe import model_shape

    shape = model_shape(model) or {}
    choice = precision_auto.choose_precision(
        precision.model_width(model),
        mixed_precision=args.mixed_precision,
        jit_compile=args.jit_compile,
        tokens=shape.get("tokens"),
        mlp_dim=shape.get("mlp_dim"),
        num_heads=shape.get("num_heads"),
        probe=probe,
    )
    logger.info("%s", choice.brief())
    logger.debug("Precision: %s", choice.describe())
    return choice


def model_with_precision(args, model, probe=None):
    """(model under the chosen policy, the `PrecisionChoice`); XLA set on the model.
    `probe`: as `choose_precision`."""
    from keras_vit.runtime import precision

    choice = choose_precision(args, model, probe)
    model = precision.with_dtype_policy(model, choice.policy)
    model.jit_compile = choice.jit_compile
    return model, choice


def resolve_model_path(path: str, *, suffixes=MODEL_SUFFIXES) -> tuple[str, str | None]:
    """(model file, run directory or None) for a RUN_OR_MODEL argument.

    A run directory gives its best.keras (a folder with best.keras but no config.json gives
    it as a model outside a run: no dataset or class names to take); a model file (one of
    `suffixes`: `.keras` and `.npz` by default, `export` and `explain` take `.keras` only)
    inside a run directory also reports that run (for its dataset and class names).

    Raises:
        UsageError: the path does not exist, is a directory without best.keras, or is not a
            file of `suffixes`.
    """
    wanted = " or ".join(suffixes)
    if os.path.isdir(path):
        model_file = os.path.join(path, RUN_MODEL_FILE)
        if not os.path.isfile(model_file):
            raise UsageError(f"{path!r} is not a run directory: it has no {RUN_MODEL_FILE}")
        is_run = os.path.isfile(os.path.join(path, RUN_CONFIG_FILE))
        return model_file, path if is_run else None  # a bare best.keras: a model, no run
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


def check_model_argument(args) -> None:
    """`resolve_model_path(args.model)` as a subcommand's `check` (no TensorFlow needed)."""
    resolve_model_path(args.model)


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
    from keras_vit.spec.layer_names import HEAD

    present = {layer.name for layer in model.layers}
    activation = model.get_layer(HEAD).activation if HEAD in present else None
    return getattr(activation, "__name__", "linear") != "softmax"


def read_run_config(path: str) -> dict | None:
    """The config.json of the run RUN_OR_MODEL belongs to (None outside a run), without
    loading the model; UsageError as `resolve_model_path`."""
    from keras_vit.train import run_directory

    _, run_dir = resolve_model_path(path)
    with usage_errors():  # a damaged config.json: one line naming it
        return run_directory.read_config(run_dir) if run_dir else None


def model_image_shape(model) -> tuple[int, int, int]:
    """`keras_vit.model.vit.image_shape_of(model)`, a UsageError where it has none."""
    from keras_vit.model.vit import image_shape_of

    try:
        return image_shape_of(model)
    except ValueError as error:
        raise UsageError(str(error)) from None


def load_keras_file(model_file: str):
    """A `.keras` file loaded uncompiled in safe mode (`keras_vit.model.from_source.load_keras`);
    UsageError naming a missing, truncated or unreadable file."""
    from keras_vit.model import from_source

    try:
        return from_source.load_keras(model_file, compile=False)
    except (ValueError, OSError) as error:
        raise UsageError(cli_message(error)) from None


def load_model(path: str):
    """Loads RUN_OR_MODEL (safe mode for .keras); returns (model, run config dict or None)."""
    from keras_vit.train import run_plan

    model_file, _ = resolve_model_path(path)
    with usage_errors():
        model = run_plan.load_source_model(model_file)
    return model, read_run_config(path)
