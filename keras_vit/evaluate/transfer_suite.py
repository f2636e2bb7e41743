"""A VTAB-1k style transfer protocol: fine-tune one checkpoint on each task of a list.

VTAB-1k (Zhai et al. 2019; the paper's section 4.1 and table 2) fine-tunes on 1,000 training
examples per task, 800 for training and 200 for validation, and reports the test accuracy of
every task and their mean. Each task here is a `keras_vit.train.runs.train` fine-tuning run (task
"finetune": zero-initialised head, position table resized, the release's SGD recipe with
momentum 0.9, global-norm clipping 1.0, warmup and cosine decay; paper appendix B.1.1) in its
own run directory; the model at the end of the schedule (or with `select="best"` the best
checkpoint on the 200 validation examples) is scored on the task's test split.

The 1,000 examples: for a TFDS task, VTAB's own "train[:800]" and "train[800:1000]"; for an
embedded set or an image folder, 1000 // K examples per class drawn with `split_seed` (80% of
them train, 20% validation), a stratified version of the same.

Importing this module does not start TensorFlow (the CLI's `--help` reads its defaults).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence

from keras_vit.spec import kept_model, run_files

logger = logging.getLogger(__name__)

DEFAULT_TASKS = ("digits", "mnist")
"""The embedded sets: the suite runs anywhere without a download."""
VTAB_TRAIN = 800
VTAB_VAL = 200
VTAB_STEPS = 2500
VTAB_LEARNING_RATE = 0.01
"""The paper's VTAB fine-tuning: 2,500 steps at learning rate 0.01 (appendix B.1.1)."""


@dataclasses.dataclass
class TaskResult:
    """One task of the suite: its splits, and the validation and test accuracy of the kept
    checkpoint (`RunConfig.select`)."""

    task: str
    num_classes: int
    train_split: str
    validation_split: str
    num_train: int
    num_validation: int
    num_test: int
    validation_accuracy: float
    test_accuracy: float
    run_dir: str


def vtab_splits(task: str, num_classes: int, *, data_dir=None) -> tuple[str, str]:
    """(train split, validation split) of the 800/200 protocol for `task`.

    Raises:
        ConfigError: more than 1,000 classes (fewer than one example per class).
    """
    from keras_vit.data.sources import find_source
    from keras_vit.train.run_config import ConfigError

    if not find_source(task).per_class_slices:  # TFDS: its stored order
        return f"train[:{VTAB_TRAIN}]", f"train[{VTAB_TRAIN}:{VTAB_TRAIN + VTAB_VAL}]"
    per_class = (VTAB_TRAIN + VTAB_VAL) // num_classes
    if per_class < 2:
        raise ConfigError(
            f"Task {task!r} has {num_classes} classes: 1,000 examples leave fewer than 2 per "
            "class for the 800/200 split."
        )
    train = round(per_class * VTAB_TRAIN / (VTAB_TRAIN + VTAB_VAL))
    return f"train[:{train}]", f"train[{train}:{per_class}]"


def task_config(
    task: str,
    weights,
    *,
    data_dir=None,
    image_size=None,
    steps: int = VTAB_STEPS,
    learning_rate: float = VTAB_LEARNING_RATE,
    batch_size: int = 32,
    seed: int = 0,
    split_seed: int = 0,
    jit_compile="auto",
    mixed_precision="auto",
    bad_images="skip",
    select=kept_model.DEFAULT_SELECTION,
):
    """The fine-tuning `keras_vit.train.runs.RunConfig` of one task (see the module docstring);
    `bad_images` is `RunConfig`'s ("skip" or "fail" on image files that do not decode),
    `select` too ("last": the model at the end of the schedule; "best": the best epoch on
    the validation examples).

    Raises:
        ConfigError: an unknown task or one without a train or test split.
    """
    from keras_vit import data
    from keras_vit.train import training
    from keras_vit.train.run_config import ConfigError, RunConfig

    try:
        info = data.describe(task, data_dir=data_dir)
    except (ValueError, FileNotFoundError) as error:
        raise ConfigError(" ".join(str(error).split())) from None
    for split in ("train", "test"):
        if split not in info.num_examples:
            raise ConfigError(f"Task {task!r} has no {split!r} split; it has {info.num_examples}.")
    train_split, validation_split = vtab_splits(task, info.num_classes, data_dir=data_dir)
    recipe = training.FinetuneConfig(
        dataset=task,
        steps=steps,
        learning_rate=learning_rate,
        batch_size=batch_size,
        seed=seed,
        jit_compile=jit_compile,
        **({"image_size": image_size} if image_size else {}),
    )
    return RunConfig(
        task="finetune",
        recipe=recipe,
        weights=os.fspath(weights),
        data_dir=data_dir,
        mixed_precision=mixed_precision,
        bad_images=bad_images,
        train_split=train_split,
        validation_split=validation_split,
        split_seed=split_seed,
        test_split="test",
        select=select,
    )


def run_suite(
    weights,
    run_dir,
    tasks: Sequence[str] = DEFAULT_TASKS,
    *,
    source_image_size=None,
    verbose=0,
    **task_kwargs,
) -> list[TaskResult]:
    """Fine-tunes `weights` on every task; returns one `TaskResult` per task.

    Args:
        weights: the pre-trained model: a run directory, a `.keras` or an official `.npz`.
        run_dir: parent folder; task `t` runs in `run_dir/<t>` (a finished task is reused,
            a killed one resumed, only when made with the same settings: `check_reusable`).
        tasks: embedded set names, TFDS names (prepared in `data_dir`) or image folders.
        source_image_size: default image size of the tasks when `image_size` is not given:
            the pre-trained model's (its position table then needs no resize).
        verbose: `fit` verbosity.
        **task_kwargs: `task_config` arguments (data_dir, image_size, steps, learning_rate,
            batch_size, seed, split_seed, jit_compile, mixed_precision, bad_images, select).

    Raises:
        ConfigError: a bad task, or a task folder of other settings, checked for every task
            before any training.
    """
    from keras_vit import data
    from keras_vit.train import run_directory, runs

    if not task_kwargs.get("image_size") and source_image_size:
        task_kwargs["image_size"] = source_image_size
    configs = {task: task_config(task, weights, **task_kwargs) for task in tasks}
    for task, config in configs.items():
        check_reusable(config, os.path.join(os.fspath(run_dir), _folder_name(task)))
    results = []
    for task, config in configs.items():
        task_dir = os.path.join(os.fspath(run_dir), _folder_name(task))
        resume = os.path.isfile(os.path.join(task_dir, run_files.CONFIG_FILE))  # done or killed
        logger.info("Transfer suite: fine-tuning on %s in %s", task, task_dir)
        result = runs.train(config, task_dir, resume=resume, verbose=verbose)
        resolved = run_directory.read_config(task_dir)["resolved"]
        metrics = result.metrics
        results.append(
            TaskResult(
                task=task,
                num_classes=resolved["num_classes"],
                train_split=resolved["train_split"],
                validation_split=resolved["validation_split"],
                num_train=resolved["num_train_examples"],
                num_validation=resolved["num_validation_examples"],
                num_test=data.split_size(task, "test", data_dir=config.data_dir) or 0,
                validation_accuracy=float(metrics["best"]["value"]),
                test_accuracy=float(metrics["test"]["accuracy"]),
                run_dir=task_dir,
            )
        )
    return results


def check_reusable(config, task_dir) -> None:
    """ConfigError unless the run in `task_dir` (if any: a finished or killed task of an
    earlier suite) was made with `config`, so that reusing or resuming it reports what the
    new settings ask for; the differences are named ("steps 2 (the folder has 5)").

    Args:
        config: the task's `RunConfig` (`task_config`).
        task_dir: its run directory; a folder without config.json is not checked.
    """
    import json

    from keras_vit.train import run_directory
    from keras_vit.train.run_config import ConfigError

    if not os.path.isfile(os.path.join(task_dir, run_files.CONFIG_FILE)):
        return
    try:
        stored = run_directory.read_run_config(task_dir)
    except ValueError as error:  # RunDirError, ConfigError: they name the file
        raise ConfigError(f"{task_dir!r} cannot be reused: {error}") from None
    old, new = (_flat_fields(json.loads(json.dumps(c.to_dict()))) for c in (stored, config))
    differences = [
        f"{key} {new.get(key)!r} (the folder has {old.get(key)!r})"
        for key in sorted(set(old) | set(new))
        if old.get(key) != new.get(key)
    ]
    if differences:
        raise ConfigError(
            f"{task_dir!r} holds a run of other settings: {', '.join(differences)}. It is "
            "reused only with the same settings; give another --run-dir, or the same flags."
        )


def _flat_fields(values: dict) -> dict:
    recipe = {f"recipe.{key}": value for key, value in values.pop("recipe", {}).items()}
    return {**values, **recipe}


def mean_accuracy(results: Sequence[TaskResult]) -> float:
    """The suite's score: the unweighted mean of the tasks' test accuracies (as VTAB)."""
    return sum(r.test_accuracy for r in results) / len(results)


def _folder_name(task: str) -> str:
    name = os.path.basename(os.path.normpath(task)) if os.path.isdir(task) else task
    return name.replace("/", "_").replace(":", "_") or "task"
