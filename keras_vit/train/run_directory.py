"""Run directories: the files of one training run, the checks before a run starts and the
readers of a finished or interrupted run.

A run directory holds everything about one training run:

    config.json            the resolved configuration (written before training starts)
    history.csv            one row per finished epoch: epoch, steps, learning_rate, logs
    learning_curves.png    loss and accuracy per epoch (redrawn as epochs end)
    logs/                  TensorBoard event files (`tensorboard --logdir RUN/logs`)
    last.keras, last.npz   the model after the latest finished epoch (.npz: official layout)
    best.keras, best.npz   the run's kept model (`select`: the last epoch's by default, or
                           the best epoch's by the monitored metric); best.json
    backup/                resume state (removed when the run completes)
    metrics.json           final metrics; its presence marks a completed run
    .lock                  the training process's id while it runs (`keras_vit.train.run_lock`)

The names live in `keras_vit.spec.run_files`. Every file is replaced atomically
(`keras_vit._atomic`), so a run killed at any moment leaves valid files.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import keras

from keras_vit import _atomic
from keras_vit.spec import run_files
from keras_vit.train import callbacks, run_lock
from keras_vit.train.run_config import ConfigError, RunConfig
from keras_vit.train.run_plan import load_model

logger = logging.getLogger(__name__)


class RunDirError(ValueError):
    """The run directory does not fit the request (exists without resume, missing with it,
    or in use by another live process)."""


@dataclasses.dataclass
class RunResult:
    """What `fit_run` and `train` return.

    Attributes:
        run_dir: the run directory.
        model: the trained model (after the last epoch).
        history: one dict per finished epoch (the rows of history.csv).
        metrics: the contents of metrics.json.
    """

    run_dir: str
    model: keras.Model
    history: list[dict]
    metrics: dict


def is_complete(run_dir) -> bool:
    """True if the run in `run_dir` finished (its metrics.json exists)."""
    return os.path.isfile(os.path.join(run_dir, run_files.METRICS_FILE))


def check_run_dir(run_dir, resume: bool) -> None:
    """Checks `run_dir` before any work: fresh runs need a new or empty folder, resumed runs
    an existing run.

    Raises:
        RunDirError: with `resume=False`, `run_dir` exists and is not empty; with
            `resume=True`, `run_dir` has no config.json or another live process holds its
            lock (`keras_vit.train.run_lock`).
    """
    run_dir = os.fspath(run_dir)
    if resume:
        _check_is_run(run_dir)
        try:
            run_lock.check_free(run_dir)
        except run_lock.RunDirLockedError as error:
            raise RunDirError(str(error)) from None
    elif os.path.isdir(run_dir) and os.listdir(run_dir):
        raise RunDirError(
            f"Run directory {run_dir!r} already exists and is not empty; pass --resume to "
            "continue it, or choose a new --run-dir."
        )
    elif os.path.exists(run_dir) and not os.path.isdir(run_dir):
        raise RunDirError(f"Run directory {run_dir!r} exists and is not a folder.")


def _check_is_run(run_dir) -> None:
    if not os.path.isfile(os.path.join(run_dir, run_files.CONFIG_FILE)):
        raise RunDirError(
            f"Cannot resume: {run_dir!r} is not a run directory (no {run_files.CONFIG_FILE})."
        )


def read_config(run_dir) -> dict:
    """The config.json of a run directory. Reading does not need the run's lock: the other
    workers of a multi-worker run, and the summary after a run, read it while the chief may
    still hold it.

    Raises:
        RunDirError: `run_dir` has no config.json, or it is not valid JSON or has no "run"
            object; the message names the file.
    """
    run_dir = os.fspath(run_dir)
    _check_is_run(run_dir)
    record = read_run_json(run_dir, run_files.CONFIG_FILE)
    if not isinstance(record.get("run"), dict):
        raise RunDirError(
            f'{os.path.join(run_dir, run_files.CONFIG_FILE)!r} has no "run" object: it is not the '
            "configuration keras_vit wrote for this run."
        )
    return record


def read_run_config(run_dir) -> RunConfig:
    """The `RunConfig` stored in a run directory's config.json (what a resume continues).

    Raises:
        RunDirError: `run_dir` has no config.json, or it is not valid JSON / no run's record.
        ConfigError: the stored configuration names unknown fields or bad values (a file
            edited by hand, or written by another version); the message names the file.
    """
    record = read_config(run_dir)
    try:
        return RunConfig.from_dict(record["run"])
    except ConfigError as error:
        path = os.path.join(os.fspath(run_dir), run_files.CONFIG_FILE)
        raise ConfigError(f"The configuration stored in {path!r} is unusable: {error}") from None


def read_run_json(run_dir, name, default=None):
    """The JSON object in `run_dir`/`name` (`default` when the file does not exist).

    Raises:
        RunDirError: the file is not valid UTF-8 JSON or not a JSON object.
    """
    path = os.path.join(run_dir, name)
    try:
        record = _atomic.read_json(path, default)
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise RunDirError(f"{path!r} is not valid JSON ({error}).") from None
    if record is not default and not isinstance(record, dict):
        raise RunDirError(f"{path!r} holds a JSON {type(record).__name__}, not an object.")
    return record


def resumed_select(run_dir, select: str | None) -> str | None:
    """`fit_run` step 1b: the rule a resumed run keeps its model by: the one its best.json
    records ("best" when it records none), which a given `select` must equal; `select` itself
    when no epoch has finished yet (no best.json)."""
    stored = read_run_json(run_dir, run_files.BEST_RECORD)
    if stored is None:
        return select
    rule = stored.get("select", "best")
    if select is not None and select != rule:
        raise RunDirError(
            f"Cannot resume {run_dir!r} with select={select!r}: its best.json keeps the "
            f"{rule!r} epoch's model; pass select={rule!r} (or None) to continue it."
        )
    return rule


def remove_leftovers(run_dir) -> None:
    """`fit_run` on resume: the temporary files a killed process left mid-write in the run
    directory and its backup folder (`keras_vit._atomic.remove_leftovers`)."""
    for folder in (run_dir, os.path.join(run_dir, run_files.BACKUP_DIR)):
        for name in _atomic.remove_leftovers(folder):
            logger.info("Removed %s, left by a process killed while writing it", name)


def take_lock(run_dir) -> str:
    """Creates `run_dir` and takes its lock (see `keras_vit.train.run_lock`)."""
    os.makedirs(run_dir, exist_ok=True)
    try:
        return run_lock.acquire(run_dir)
    except run_lock.RunDirLockedError as error:
        raise RunDirError(str(error)) from None


def backup_dir(run_dir, strategy, chief) -> str:
    """The chief's backup is run_dir/backup; other workers keep their own next to it."""
    if chief:
        return os.path.join(run_dir, run_files.BACKUP_DIR)
    task_id = strategy.cluster_resolver.task_id
    return os.path.join(run_dir, f"{run_files.WORKER_BACKUP_PREFIX}{task_id}")


def load_result(run_dir) -> RunResult:
    """The stored results of a completed run (model from last.keras, safe mode on)."""
    model = load_model(os.path.join(run_dir, run_files.LAST_MODEL))
    return RunResult(
        os.fspath(run_dir),
        model,
        callbacks.read_history(os.path.join(run_dir, run_files.HISTORY_FILE)),
        _atomic.read_json(os.path.join(run_dir, run_files.METRICS_FILE)),
    )
