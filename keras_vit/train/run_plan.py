"""What a training run will do, resolved and checked before any work starts.

`RunConfig` is what a user chooses (the `keras-vit train` / `finetune` flags, or Python);
`plan_run(config, strategy)` resolves it against the dataset, the model table, the strategy
and the pre-trained weights, and raises `ConfigError` (a `ValueError`) for anything that would
fail later: unknown dataset or model, image size not divisible by the patch, global batch not
divisible by the replicas, missing or unreadable weights. `keras_vit.train.runs.train` executes the
returned `RunPlan`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import keras

from keras_vit._validation import check_choice, check_divisible, to_pair
from keras_vit.layers.position_embedding import POSITION_EMBEDDINGS
from keras_vit.model import from_source
from keras_vit.runtime import distribute
from keras_vit.runtime.precision import check_policy
from keras_vit.runtime.precision_auto import choose_precision
from keras_vit.spec import configs
from keras_vit.train.run_config import ConfigError, RunConfig

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class RunPlan:
    """A resolved run: everything `keras_vit.train.runs.train` needs.

    Attributes:
        config: the `RunConfig`.
        info: `keras_vit.data.DatasetInfo` of the dataset.
        image_size: (height, width) of the model input.
        channels: image channels fed to the model.
        global_batch_size: batch over all replicas; `per_replica_batch_size` each.
        train_split: the split trained on ("train", or the complement of a validation slice
            carved from it); num_validation_examples: the size of `config.validation_split`.
        test_split: the split evaluated at the end (None: the dataset has no test split).
        num_train_examples, steps_per_epoch, epochs: the schedule.
        model_kwargs: `keras_vit.ViT` arguments of the model to train (for finetune: of the
            model `keras_vit.finetune` returns).
        source_model: finetune only: the loaded pre-trained model.
        jit_compile: what `model.compile(jit_compile=...)` gets.
        precision: the `keras_vit.runtime.precision.PrecisionChoice` (policy, XLA and why).
    """

    config: RunConfig
    info: Any
    image_size: tuple[int, int]
    channels: int
    global_batch_size: int
    per_replica_batch_size: int
    num_train_examples: int
    steps_per_epoch: int
    epochs: int
    model_kwargs: dict
    source_model: Any = None
    jit_compile: Any = "auto"
    train_split: str = "train"
    test_split: str | None = "test"
    num_validation_examples: int | None = None
    precision: Any = None

    def resolved(self) -> dict:
        """JSON-friendly facts for config.json."""
        return {
            "dataset": self.info.name,
            "num_classes": self.info.num_classes,
            "class_names": list(self.info.class_names),
            "channels": self.channels,
            "image_size": list(self.image_size),
            "global_batch_size": self.global_batch_size,
            "per_replica_batch_size": self.per_replica_batch_size,
            "train_split": self.train_split,
            "validation_split": self.config.validation_split,
            "split_seed": self.config.split_seed,
            "test_split": self.test_split,
            "num_train_examples": self.num_train_examples,
            "num_validation_examples": self.num_validation_examples,
            "steps_per_epoch": self.steps_per_epoch,
            "epochs": self.epochs,
            "total_steps": self.steps_per_epoch * self.epochs,
            "model_kwargs": self.model_kwargs,
            "jit_compile": self.jit_compile,
            "mixed_precision": self.precision.policy if self.precision else None,
            "precision_reason": self.precision.reason if self.precision else None,
            "precision_probe": _probe_record(self.precision),
        }


def plan_run(config: RunConfig, strategy) -> RunPlan:
    """Resolves and checks `config` for `strategy` (see the module docstring).

    Raises:
        ConfigError: with one line that says what is wrong and what would work (an image
            size that is no positive int or pair already when the `RunConfig` is made).
    """
    from keras_vit import data

    recipe = config.recipe
    try:
        check_policy(config.mixed_precision, allow_auto=True)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    try:
        info = data.describe(
            recipe.dataset, data_dir=config.data_dir, shots_per_class=config.shots_per_class
        )
    except (ValueError, FileNotFoundError) as error:
        raise ConfigError(_one_line(error)) from None
    check_class_count(info)
    image_size = recipe.image_size  # the pair `RunConfig` checked
    if config.task == "finetune":
        source = load_source_model(config.weights)
        source_kwargs = source_model_kwargs(source)
        channels = source_kwargs["channels"]
        model_kwargs = {
            **source_kwargs,
            "num_classes": info.num_classes,
            "image_size": list(image_size),
            "representation_size": None,
            "remat": config.remat,
        }
        patch = to_pair("patch_size", source_kwargs["patch_size"])
    else:
        source = None
        if config.weights is not None:
            raise ConfigError("--weights belongs to `finetune`; `train` starts from scratch.")
        channels = info.channels
        model_kwargs = train_model_kwargs(config, info.num_classes, channels, image_size)
        patch = to_pair("patch_size", model_kwargs["patch_size"])
    try:
        check_divisible(image_size, patch)
        check_choice(
            "position_embedding", model_kwargs.get("position_embedding"), POSITION_EMBEDDINGS
        )
    except ValueError as error:
        raise ConfigError(str(error)) from None
    shard_for_strategy(config.strategy, model_kwargs)
    try:
        global_batch = distribute.per_replica_batch_size(recipe.batch_size, strategy)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    check_fits_in_memory(model_kwargs, image_size, channels, global_batch)
    train_split, test_split = resolve_splits(config, info)
    num_train, num_validation = _split_sizes(config, info, train_split)
    check_held_out_batches(config, info, num_validation, strategy)
    precision = choose_run_precision(config, model_kwargs, strategy, image_size)
    return RunPlan(
        config=config,
        info=info,
        image_size=image_size,
        channels=channels,
        global_batch_size=recipe.batch_size,
        per_replica_batch_size=global_batch,
        num_train_examples=num_train,
        steps_per_epoch=recipe.steps_per_epoch(num_train),
        epochs=recipe.num_epochs(num_train),
        model_kwargs=model_kwargs,
        source_model=source,
        jit_compile=precision.jit_compile,
        precision=precision,
        train_split=train_split,
        test_split=test_split,
        num_validation_examples=num_validation,
    )


def shard_for_strategy(strategy_name: str, model_kwargs: dict) -> None:
    """For strategy "model_parallel" (JAX), sets Keras' distribution to
    `keras_vit.runtime.model_parallel.vit_model_parallel` of the model's sizes over every
    device, before the model is built; other strategies: nothing.

    Raises:
        ConfigError: a device count the model's sizes cannot be sharded over (one line naming
            the size and the axis).
    """
    if strategy_name != "model_parallel":
        return
    from keras_vit.runtime import model_parallel

    try:
        distribution = model_parallel.vit_model_parallel(model_kwargs)
    except model_parallel.ModelParallelError as error:
        raise ConfigError(str(error)) from None
    keras.distribution.set_distribution(distribution)


def check_class_count(info) -> None:
    """ConfigError when the dataset has fewer than two classes: a softmax classifier over one
    class has a constant output and a zero loss, so nothing would be learnt (a folder with one
    sub-folder per class and a single sub-folder used to fail later, inside Keras, after the
    run directory was written). Names the dataset (the folder), the classes found and the rule."""
    from keras_vit.data.split_counts import class_count_problem

    problem = class_count_problem(info.name, info.num_classes, info.class_names)
    if problem is not None:
        raise ConfigError(problem)


def physical_memory_bytes() -> int | None:
    """The machine's physical memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_fits_in_memory(model_kwargs: dict, image_size, channels: int, batch: int) -> None:
    """ConfigError when one replica's batch of `image_size` images (1 byte a pixel value, as
    decoded) and the model's position table (float32, tokens x hidden_dim) alone exceed the
    machine's physical memory: a lower bound of what a step needs, so the run could only end
    in an out-of-memory crash (`--image-size 100000` did, after writing its run directory)."""
    from keras_vit.runtime.precision_probe import shape_from_kwargs

    memory = physical_memory_bytes()
    shape = shape_from_kwargs(model_kwargs, image_size)
    height, width = image_size
    images = batch * height * width * channels
    table = (shape["tokens"] or 0) * shape["hidden_dim"] * 4
    if memory and images + table > memory:
        need, have = (images + table) / 2**30, memory / 2**30
        raise ConfigError(
            f"image_size {height}x{width} cannot fit: a batch of {batch} images and the "
            f"position table of {shape['tokens']:,} tokens alone need {need:,.1f} GiB, more "
            f"than this machine's {have:.1f} GiB of memory; use a smaller image size or "
            "batch size."
        )


def check_held_out_batches(config: RunConfig, info, num_validation, strategy) -> None:
    """ConfigError when, under Keras' distribution (JAX), the validation split's last batch
    at the global batch size does not split over the devices: Keras' JAX trainer cuts every
    batch into one equal share per device, so that batch would stop the run at the end of
    its first epoch (jax `IndivisibleError`, or an unequal share per process). The test
    split is evaluated by the chief alone, without the distribution, and needs no check."""
    devices = distribute.num_replicas(strategy)
    if keras.backend.backend() == "tensorflow" or devices == 1 or not num_validation:
        return
    batch = config.recipe.batch_size
    last = num_validation % batch or min(batch, num_validation)
    if last % devices:
        raise ConfigError(
            f"The validation split {config.validation_split!r} of {info.name!r} has "
            f"{num_validation} images: at global batch {batch} its last batch of {last} does "
            f"not split over the {devices} devices of keras.distribution's DataParallel; give "
            f"a validation split whose size leaves a multiple of {devices} (--validation-split,"
            f" e.g. {num_validation - last % devices} images) or another --batch-size."
        )


def _split_sizes(config: RunConfig, info, train_split: str) -> tuple[int, int | None]:
    """(training images, validation images) of the run; ConfigError for an empty split or a
    batch larger than the training set (an empty split trained 0 steps, or crashed after the
    first epoch)."""
    from keras_vit.data.pipeline import check_training_batches

    recipe = config.recipe
    count = _split_counter(config)
    num_train = None
    if "train" in info.num_examples:
        num_train = count(train_split)
        if num_train is None:  # a TFDS slice of unrecorded size: the whole split's
            num_train = info.num_examples["train"]
    if not num_train:
        raise ConfigError(
            f"Dataset {info.name!r} has no training images in {train_split!r}; it has "
            f"{info.num_examples}."
        )
    try:
        check_training_batches(num_train, recipe.batch_size, info.name, train_split)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    num_validation = count(config.validation_split)
    if num_validation == 0:
        raise ConfigError(
            f"The validation split {config.validation_split!r} of {info.name!r} holds no "
            "images; every epoch ends with a validation pass, so give a split with images "
            "(e.g. 'train[90%:]')."
        )
    return num_train, num_validation


def resolve_splits(config: RunConfig, info) -> tuple[str, str | None]:
    """(split to train on, test split or None) for `config` on a dataset described by `info`.

    Raises:
        ConfigError: an invalid split string, a split the dataset lacks, or a validation
            split that would overlap the training data (all of "train", or a slice of it
            with both bounds).
    """
    from keras_vit.data import splits

    validation = config.validation_split
    try:
        spec = splits.parse_split(validation)
    except ValueError as error:
        raise ConfigError(_one_line(error)) from None
    if spec.name not in info.num_examples:
        raise ConfigError(
            f"Dataset {info.name!r} has no split {spec.name!r} to validate on; it has "
            f"{sorted(info.num_examples)}."
        )
    train_split = "train"
    if config.train_split is not None:
        train_split = config.train_split
        if train_split.split("[")[0] not in info.num_examples:
            raise ConfigError(
                f"Dataset {info.name!r} has no split {train_split!r} to train on; it has "
                f"{sorted(info.num_examples)}."
            )
    elif spec.name == "train":
        train_split = splits.complement(validation)
        if train_split is None:
            raise ConfigError(
                f"--validation-split {validation!r} would select on images the model trains "
                "on; carve it as a one-sided slice of train, e.g. 'train[90%:]' (the model then "
                "trains on 'train[:90%]'), or name another split."
            )
    test_split = config.test_split
    _check_test_selection(config, info)
    if test_split is not None and test_split.split("[")[0] not in info.num_examples:
        logger.info(
            "Dataset %s has no split %r: the validation split is the only held-out figure.",
            info.name,
            test_split,
        )
        test_split = None
    return train_split, test_split


def _check_test_selection(config: RunConfig, info) -> None:
    """ConfigError for selection on `config.test_split` (see `keras_vit.train.selection`)."""
    from keras_vit.train import selection as test_selection

    chosen = {"--validation-split": config.validation_split, "train_split": config.train_split}
    try:
        test_selection.check_selection(
            chosen,
            ("the test split", config.test_split),
            sizes=info.num_examples,
            allow=config.allow_test_selection,
        )
    except ValueError as error:
        raise ConfigError(str(error)) from None


def _split_counter(config: RunConfig):
    from keras_vit import data

    def count(split):
        try:
            return data.split_size(
                config.recipe.dataset,
                split,
                data_dir=config.data_dir,
                shots_per_class=config.shots_per_class,
            )
        except ValueError as error:
            raise ConfigError(_one_line(error)) from None

    return count


def choose_run_precision(config: RunConfig, model_kwargs: dict, strategy, image_size=None):
    """The run's `PrecisionChoice`: its `mixed_precision` and recipe `jit_compile`, "auto"
    resolved by `keras_vit.runtime.precision_auto.choose_precision` for the device and the
    model's shape (width, MLP width, heads and tokens of `model_kwargs` at `image_size`)."""
    from keras_vit.runtime.precision_probe import shape_from_kwargs

    shape = shape_from_kwargs(model_kwargs, image_size)
    try:
        return choose_precision(
            shape.pop("hidden_dim"),
            strategy=strategy,
            mixed_precision=config.mixed_precision,
            jit_compile=config.recipe.jit_compile,
            **shape,
        )
    except ValueError as error:
        raise ConfigError(str(error)) from None


def _probe_record(choice):
    """How the precision was chosen, for config.json: source ("rule", "probe", "cache") and
    the probe's milliseconds per step by setting (`keras_vit.runtime.precision.PrecisionChoice`)."""
    if choice is None:
        return None
    return {"source": choice.source, "figures": choice.figures}


def _one_line(error) -> str:
    return " ".join(str(error).split())


def model_names() -> list[str]:
    """Accepted `--model` values: "default" (alias "tiny") and the named models (any
    spelling `keras_vit.spec.configs.resolve_model` takes)."""
    return configs.valid_names(recipes=True)


def train_model_kwargs(config: RunConfig, num_classes, channels, image_size) -> dict:
    """`keras_vit.ViT` (or, for a hybrid, `keras_vit.HybridViT`) arguments of a from-scratch
    run; `image_size` is the checked (height, width) pair."""
    recipe = config.recipe
    named = resolve_model_name(config.model)
    if named.is_recipe:
        kwargs = recipe.model_kwargs(num_classes, channels)
    else:
        kwargs = {
            **named.config.as_kwargs(),
            "num_classes": num_classes,
            "channels": channels,
            "pooling": getattr(recipe, "pooling", "token"),
            "position_embedding": getattr(recipe, "position_embedding", "learned"),
        }
    kwargs["image_size"] = list(image_size)
    if config.patch_size is not None:
        kwargs["patch_size"] = config.patch_size
    kwargs["remat"] = config.remat
    return kwargs


def resolve_model_name(name) -> configs.ModelName:
    """`keras_vit.spec.configs.resolve_model` with the recipe names, as a `ConfigError`."""
    try:
        return configs.resolve_model(name, recipes=True)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def named_variant(name: str):
    """The table row of a named model, any spelling ("Ti/16", "ViT_Ti16", "ti16",
    "R50+B/16"); see `keras_vit.spec.configs.resolve_model`.

    Raises:
        ConfigError: an unknown name, or a recipe name.
    """
    try:
        return configs.resolve_model(name).config
    except ValueError as error:
        raise ConfigError(str(error)) from None


# --- pre-trained models for fine-tuning ----------------------------------------------------


def load_source_model(weights) -> keras.Model:
    """Loads the pre-trained model named by `--weights` (see `RunConfig.weights`) with
    `keras_vit.model.from_source.load`.

    Accepts a run directory (its best.keras), a `.keras` file, any checkpoint
    `keras_vit.from_checkpoint` reads (release `.npz`, Hugging Face folder, timm
    `.safetensors`), or a published name ("imagenet21k/ViT-B_32", "augreg/ViT-S_16-224", ...),
    downloaded into the Keras cache. The architecture is read from the file.

    Raises:
        ConfigError: no weights given, a path that does not exist and is no published name,
            a failed download (the message gives the URL and the cache path), or a file that
            cannot be read.
    """
    if not weights:
        raise ConfigError(
            "finetune needs --weights: a run directory, a .keras, .npz, .safetensors or "
            "Hugging Face folder, or a published checkpoint name."
        )
    try:
        path = from_source.locate(weights)
    except (OSError, ValueError) as error:
        raise ConfigError(_one_line(error)) from None
    try:
        return from_source.load(path)
    except (ValueError, OSError) as error:
        raise ConfigError(f"Cannot load weights {path}: {_one_line(error)}") from None


load_model = from_source.load_keras  # the former name, kept for callers


def vit_kwargs_from_npz(arrays: dict) -> dict:
    """`keras_vit.model.from_source.vit_kwargs_from_npz`, a `ConfigError` for arrays that are no
    official ViT checkpoint."""
    try:
        return from_source.vit_kwargs_from_npz(arrays)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def source_model_kwargs(model) -> dict:
    """`keras_vit.model.from_source.kwargs_of_model`, a `ConfigError` for a model that is no
    keras_vit ViT."""
    try:
        return from_source.kwargs_of_model(model)
    except ValueError as error:
        raise ConfigError(str(error)) from None
