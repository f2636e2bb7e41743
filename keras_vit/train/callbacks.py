"""Keras callbacks of a run directory: resumable backup, CSV history, best/last snapshots, plot.

Every file is written atomically (`keras_vit._atomic`): a run killed at any moment, even with
SIGKILL, leaves the previous good file in place, never a half-written one. The callbacks
survive a restart: on resume each one reloads its state from the run directory, and rows or
snapshots of an epoch that did not reach its backup are redone.

Callback order in `keras_vit.train.runs` matters and is: `HistoryCSV`, `ModelSnapshots`,
`LearningCurvePlot`, TensorBoard, `AtomicBackupAndRestore` (last), so that a backup of epoch
`e` implies that history and snapshots of epoch `e` are already on disk.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import hashlib
import io
import logging
import math
import os
import shutil
import tempfile
import time

import keras
import numpy as np

from keras_vit import _atomic
from keras_vit._validation import check_choice
from keras_vit.spec import run_files
from keras_vit.spec.kept_model import DEFAULT_SELECTION, SELECTIONS

logger = logging.getLogger(__name__)

BACKUP_STATE = "state.json"


def random_state_variables(model) -> list:
    """The model's random-number state: the `keras.random.SeedGenerator` states of its layers
    (`model.variables` that are not `model.weights`), in layer order."""
    weights = {id(v) for v in model.weights}
    return [v for v in model.variables if id(v) not in weights]


class BackupError(ValueError):
    """A backup that cannot be resumed from (its files do not hold the state its state.json
    records, or, under several workers, backups that disagree: `keras_vit.train.worker_restart`)."""


def backup_variables(model) -> dict[str, list]:
    """Everything a backup restores, by group, each in a fixed order: "weights" (the model's
    weights), "optimizer" (its variables, step counter included) and "random" (the layers'
    random state, `random_state_variables`)."""
    optimizer = getattr(model, "optimizer", None)
    return {
        "weights": list(model.weights),
        "optimizer": list(optimizer.variables) if optimizer is not None else [],
        "random": random_state_variables(model),
    }


def _backup_arrays(model) -> dict[str, list[np.ndarray]]:
    return {
        group: [np.array(keras.ops.convert_to_numpy(v)) for v in variables]
        for group, variables in backup_variables(model).items()
    }


def state_digest(model) -> str:
    """SHA-256 (hex) of everything a backup restores (`backup_variables`: the model's
    weights, the optimizer's variables, the layers' random state, in that order), each as
    its dtype, shape and bytes. Under a multi-worker strategy every worker holds the same
    values (the updates come from one all-reduce), so workers at the same epoch agree."""
    return _digest_of(_backup_arrays(model))


def _digest_of(arrays: dict[str, list[np.ndarray]]) -> str:
    digest = hashlib.sha256()
    for values in arrays.values():
        for value in values:
            value = np.ascontiguousarray(value)  # (as since digests were recorded: 0-d as 1-d)
            digest.update(f"{value.dtype.str}{value.shape}".encode())
            digest.update(value.tobytes())
    return digest.hexdigest()


def _array_name(group: str, index: int) -> str:
    return f"{group}/{index:05d}"


def _write_backup_arrays(path, arrays: dict[str, list[np.ndarray]]) -> None:
    """One `.npz` holding every group's arrays, named "<group>/<index>" (`_array_name`)."""
    named = {
        _array_name(group, i): value
        for group, values in arrays.items()
        for i, value in enumerate(values)
    }
    with open(path, "wb") as handle:
        np.savez(handle, **named)


def _restore_backup_arrays(model, path) -> None:
    """Assigns the arrays of a `_write_backup_arrays` file to `backup_variables(model)`;
    `BackupError` when a group's count or an array's shape or dtype differs (a backup of
    another model)."""
    with np.load(path, allow_pickle=False) as saved:
        for group, variables in backup_variables(model).items():
            names = [n for n in saved.files if n.startswith(f"{group}/")]
            if len(names) != len(variables):
                raise BackupError(
                    f"{path} holds {len(names)} {group} arrays; the model has "
                    f"{len(variables)} (a different architecture than the one backed up?)"
                )
            for i, variable in enumerate(variables):
                value = saved[_array_name(group, i)]
                expected = (tuple(variable.shape), keras.backend.standardize_dtype(variable.dtype))
                if (value.shape, keras.backend.standardize_dtype(value.dtype)) != expected:
                    raise BackupError(
                        f"{path}: {group} array {i} is {value.dtype} {value.shape}; the "
                        f"model's {variable.path} is {expected[1]} {expected[0]}"
                    )
                variable.assign(value)


def _restore_random_state(model, path) -> None:
    variables = random_state_variables(model)
    with np.load(path, allow_pickle=False) as saved:
        values = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    if len(values) != len(variables):
        raise ValueError(
            f"{path} holds {len(values)} random states; the model has {len(variables)} "
            "(a different architecture than the one backed up?)"
        )
    for variable, value in zip(variables, values, strict=True):
        variable.assign(value)


class AtomicBackupAndRestore(keras.callbacks.BackupAndRestore):
    """`keras.callbacks.BackupAndRestore` whose backup is replaced in one atomic step.

    Keras' callback writes `latest.weights.h5` in place and then `training_metadata.json`;
    a SIGKILL during the first write leaves a corrupt file, and one between the two writes
    leaves weights of epoch `e + 1` labelled epoch `e`, so a resumed run trains one epoch too
    many. Here each epoch's state goes to a new file `epoch-NNNNN.state.npz`, and only then
    `state.json`, which names the file and the epoch, is replaced atomically; files older than
    the previous epoch's are removed afterwards. A restart sees either the old state or the
    new one. The previous epoch's state stays (state.json's "previous" entry,
    `backup_states`) until the next is written: workers stopped between their backups of one
    epoch all resume from the epoch before it (`keras_vit.train.worker_restart.agreed_epoch` sets
    `restore_epoch`; None, the default, restores the newest).

    The file holds `backup_variables`: the model's weights, the optimizer's variables (so
    the step counter too) and the random state of the model's layers (the
    `keras.random.SeedGenerator` states behind dropout and stochastic depth, which Keras'
    `save_weights` leaves out), so the resumed epochs draw the same masks as an uninterrupted
    run would. It is a plain NumPy archive of the variables read once: Keras' `save_weights`
    walks the whole object graph and costs ~0.2 s an epoch for the default `keras-vit train`
    model, ~4% of its 5 s epoch, where this costs ~0.03 s.

    `state.json` also records `steps` (the optimizer's step counter) and `digest`
    (`state_digest` of what was saved); a restore recomputes the digest of what it loaded and
    raises `BackupError` when it differs (weights of another epoch or run under this state).
    The epoch is also the position in the training data: `keras_vit.train.runs` rebuilds the data
    stream from it (`epoch_ordered_batches`, `epoch_passes`; each worker's own with
    `worker_passes`), and under several workers `keras_vit.train.worker_restart.agreed_epoch`
    checks that every worker restores the same one.

    Only the epoch-end schedule (`save_freq="epoch"`) is supported: runs resume from their
    last epoch boundary. Restoring sets `model._initial_epoch`, the hook Keras' own callback
    uses to make `fit` start at the restored epoch.

    Args:
        backup_dir: folder of the backup; removed when training ends normally
            (`delete_checkpoint=True`).
        delete_checkpoint: remove the backup when `fit` ends (default True).
    """

    def __init__(self, backup_dir, delete_checkpoint=True):
        super().__init__(backup_dir, save_freq="epoch", delete_checkpoint=delete_checkpoint)
        self.restore_epoch: int | None = None

    @property
    def state_path(self) -> str:
        return os.path.join(self.backup_dir, BACKUP_STATE)

    def restored_epoch(self) -> int:
        """The epoch a resumed `fit` starts at: `restore_epoch` when set, else that of the
        newest backup, 0 without one."""
        if self.restore_epoch is not None:
            return self.restore_epoch
        state = _atomic.read_json(self.state_path)
        return 0 if state is None else int(state["epoch"])

    def on_train_begin(self, logs=None):
        state = backup_states(self.backup_dir).get(self.restored_epoch())
        if state is None:
            if self.restore_epoch:
                raise BackupError(
                    f"Cannot resume from {self.backup_dir}: it holds no backup of epoch "
                    f"{self.restore_epoch} (it has {sorted(backup_states(self.backup_dir))})"
                )
            return
        model = self.model
        if not model.built:
            raise ValueError(
                "To resume from a backup the model must be built before `fit()`. "
                f"Model {model.name!r} is not built."
            )
        if model.optimizer is not None and not model.optimizer.built:
            with model.distribute_strategy.scope():
                model.optimizer.build(model.trainable_variables)
        if "state" in state:
            _restore_backup_arrays(model, os.path.join(self.backup_dir, state["state"]))
        else:  # written before backups were one .npz: a Keras weights file and an rng file
            model.load_weights(os.path.join(self.backup_dir, state["weights"]))
            if state.get("rng"):
                _restore_random_state(model, os.path.join(self.backup_dir, state["rng"]))
        _check_digest(model, state, self.backup_dir)
        model._initial_epoch = int(state["epoch"])
        logger.info("Resumed from the backup of epoch %d in %s", state["epoch"], self.backup_dir)

    def on_epoch_end(self, epoch, logs=None):
        os.makedirs(self.backup_dir, exist_ok=True)
        name = f"epoch-{epoch + 1:05d}.state.npz"
        arrays = _backup_arrays(self.model)  # read once: written and digested
        with _atomic.atomic_path(os.path.join(self.backup_dir, name)) as tmp:
            _write_backup_arrays(tmp, arrays)
        steps = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        state = {"epoch": epoch + 1, "state": name, "steps": steps, "digest": _digest_of(arrays)}
        previous = backup_states(self.backup_dir).get(epoch)  # the backup of epoch `epoch`
        if previous is not None and "state" in previous:
            state["previous"] = {k: previous[k] for k in ("epoch", "state", "steps", "digest")}
        _atomic.write_json(self.state_path, state)
        kept = {name, previous["state"] if state.get("previous") else name}
        for old in glob.glob(os.path.join(self.backup_dir, "epoch-*")):
            if os.path.basename(old) not in kept:
                os.remove(old)

    def on_train_batch_end(self, batch, logs=None):
        pass

    def on_train_end(self, logs=None):
        if self.delete_checkpoint and os.path.exists(self.backup_dir):
            shutil.rmtree(self.backup_dir, ignore_errors=True)


def backup_states(backup_dir) -> dict[int, dict]:
    """{epoch: state record} of the backups in `backup_dir`: the newest (`state.json`) and,
    when kept, the one before it (its "previous" entry: `AtomicBackupAndRestore` keeps the
    previous epoch's state until the next is written, so that workers stopped between their
    backups can all resume from the epoch every one of them has). Empty without a backup."""
    state = _atomic.read_json(os.path.join(os.fspath(backup_dir), BACKUP_STATE))
    if state is None:
        return {}
    states = {int(state["epoch"]): state}
    previous = state.get("previous")
    if previous and os.path.exists(os.path.join(os.fspath(backup_dir), previous["state"])):
        states[int(previous["epoch"])] = previous
    return states


def _check_digest(model, state, backup_dir) -> None:
    """Raises `BackupError` when the restored state's digest differs from the one recorded
    in `state` (backups written before digests were recorded are not checked)."""
    recorded = state.get("digest")
    if recorded and state_digest(model) != recorded:
        name = state.get("state") or state["weights"]
        raise BackupError(
            f"Cannot resume from {backup_dir}: {name} does not hold the state its "
            f"{BACKUP_STATE} records for epoch {state['epoch']} (digest differs); the backup "
            "was mixed with files of another epoch or run."
        )


class HistoryCSV(keras.callbacks.Callback):
    """The per-epoch logs as a CSV file, rewritten atomically at each epoch end.

    Columns: `epoch`, `steps` (optimizer iterations so far), `learning_rate`, then every key
    of the logs (loss, accuracy, val_loss, ...). On resume, rows from epochs that are about to
    be trained again are dropped, so the file has exactly one row per finished epoch.

    Args:
        path: the CSV file.
        write: False on non-chief workers: rows are kept in memory only.
    """

    def __init__(self, path, write=True):
        super().__init__()
        self.path = os.fspath(path)
        self.write = write
        self.rows: list[dict] = []
        self._first_epoch_seen = False

    def on_train_begin(self, logs=None):
        self.rows = read_history(self.path)
        self._first_epoch_seen = False

    def on_epoch_begin(self, epoch, logs=None):
        if not self._first_epoch_seen:
            self._first_epoch_seen = True
            self.rows = [row for row in self.rows if int(row["epoch"]) < epoch]

    def on_epoch_end(self, epoch, logs=None):
        optimizer = self.model.optimizer
        row = {"epoch": epoch, "steps": int(keras.ops.convert_to_numpy(optimizer.iterations))}
        with contextlib.suppress(Exception):
            row["learning_rate"] = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
        row.update({key: float(value) for key, value in (logs or {}).items()})
        self.rows.append(row)
        if self.write:
            _atomic.write_text(self.path, format_history(self.rows))


def format_history(rows: list[dict]) -> str:
    """Rows as CSV text; the header is the union of keys in first-seen order."""
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def read_history(path) -> list[dict]:
    """Reads a history CSV written by `HistoryCSV` (numbers as int/float); [] if absent."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        return []
    parsed = []
    for row in rows:
        values = {key: float(value) for key, value in row.items() if value not in ("", None)}
        for key in ("epoch", "steps"):
            if key in values:
                values[key] = int(values[key])
        parsed.append(values)
    return parsed


class ModelSnapshots(keras.callbacks.Callback):
    """Saves the last model and the run's kept one as `.keras` and official `.npz`.

    Files in `run_dir`: `last.keras`, `last.npz`, `best.keras`, `best.npz`, and `best.json`
    (`{"epoch", "monitor", "value", "select"}`) written after the best files, so that a
    restart knows the value to beat. With `select="best"` the best files hold the epoch with
    the best `monitor` value; with `select="last"` they follow the last epoch
    (`keras_vit.spec.kept_model`), and best.json still records that epoch's `monitor` value. The
    `.npz` files use `keras_vit.checkpoints.save_npz`; a model that does not fit the official
    layout (e.g. extra layers) gets `.keras` files only. The model is serialised once per
    epoch, to the last files; the best files are copies of them (a Keras save of a small
    model costs ~0.2 s, a copy ~1 ms).

    Args:
        run_dir: folder of the files.
        monitor: the log to compare, e.g. "val_accuracy" (higher is better) or "val_loss"
            (lower is better: any name containing "loss").
        select: "last" (default: every epoch replaces the best files) or "best" (the epoch
            with the best `monitor` value). Raises ValueError for anything else.
        write: False on non-chief workers: the model is saved to `scratch_dir` (or a
            temporary folder) and removed again (every worker takes part in saving, as Keras
            expects under a multi-worker strategy), and nothing is written to `run_dir`.
        scratch_dir: where a non-writing worker saves (`keras_vit.train.worker_restart.scratch_dir`:
            a fixed folder that a restart empties, so a SIGKILL leaves nothing behind);
            None: a new temporary folder per save.
    """

    def __init__(
        self,
        run_dir,
        monitor="val_accuracy",
        write=True,
        scratch_dir=None,
        select=DEFAULT_SELECTION,
    ):
        super().__init__()
        check_choice("select", select, SELECTIONS)
        self.run_dir = os.fspath(run_dir)
        self.scratch_dir = scratch_dir
        self.monitor = monitor
        self.select = select
        self.write = write
        self.lower_is_better = "loss" in monitor
        self.best = None
        self._npz_ok = True

    def on_train_begin(self, logs=None):
        state = _atomic.read_json(os.path.join(self.run_dir, run_files.BEST_RECORD))
        if state is not None and state.get("monitor") == self.monitor:
            self.best = state["value"]

    def _improved(self, value) -> bool:
        if self.select == "last":
            return True
        if value is None or math.isnan(value):
            return False
        if self.best is None:
            return True
        return value < self.best if self.lower_is_better else value > self.best

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None:
            raise ValueError(
                f"ModelSnapshots monitors {self.monitor!r}, which is not in the logs "
                f"{sorted(logs or {})}; pass validation data or another monitor."
            )
        self._save(run_files.LAST_STEM)
        if self._improved(float(value)):
            self.best = float(value)
            if self.write:  # the same state as last.*: a file copy, not a second save
                self._copy_last_to_best()
                _atomic.write_json(
                    os.path.join(self.run_dir, run_files.BEST_RECORD),
                    {
                        "epoch": epoch,
                        "monitor": self.monitor,
                        "value": self.best,
                        "select": self.select,
                    },
                )

    def _copy_last_to_best(self) -> None:
        for suffix in (".keras", ".npz") if self._npz_ok else (".keras",):
            last = os.path.join(self.run_dir, run_files.LAST_STEM + suffix)
            with _atomic.atomic_path(
                os.path.join(self.run_dir, run_files.KEPT_STEM + suffix)
            ) as tmp:
                shutil.copyfile(last, tmp)

    def _save(self, stem: str) -> None:
        if not self.write:
            if self.scratch_dir:
                os.makedirs(self.scratch_dir, exist_ok=True)
            folder = self.scratch_dir or tempfile.mkdtemp(prefix="keras_vit_worker_")
            try:
                self.model.save(os.path.join(folder, f"{stem}.keras"))
            finally:
                if self.scratch_dir:
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(os.path.join(folder, f"{stem}.keras"))
                else:
                    shutil.rmtree(folder, ignore_errors=True)
            return
        save_model(self.model, os.path.join(self.run_dir, f"{stem}.keras"))
        if self._npz_ok:
            self._npz_ok = save_official_npz(self.model, os.path.join(self.run_dir, f"{stem}.npz"))


def save_model(model, path) -> None:
    """`model.save(path)` (native `.keras` format) through an atomic temp file."""
    with _atomic.atomic_path(path) as tmp:
        model.save(tmp)


def save_official_npz(model, path) -> bool:
    """Writes the official `.npz` if the model fits its layout; returns whether it did."""
    try:
        from keras_vit.checkpoints import CheckpointError, save_npz
    except ImportError:  # the checkpoints package is optional for runs
        logger.warning("keras_vit.checkpoints is not available: no .npz written")
        return False
    try:
        save_npz(model, path)
    except CheckpointError as error:
        logger.warning("No official .npz for this model: %s", error)
        return False
    return True


class LearningCurvePlot(keras.callbacks.Callback):
    """Redraws the learning-curve PNG from a `HistoryCSV`'s rows as epochs end.

    The title is `title` (runs: the run directory's name), the best epoch by `monitor` is
    marked, and with a label-smoothing loss (read from the compiled model) the loss floor
    is drawn (`keras_vit.train.learning_curves.plot_learning_curves`).

    A redraw costs ~0.2 s (matplotlib's layout and PNG encoding), as much as 4% of a 5 s
    epoch of the default `keras-vit train`: the figure is redrawn at the first epoch end, then
    at an epoch end only once `min_interval_s` have passed since the previous drawing, and at
    the end of training whatever the interval. So the PNG on disk lags the history by at most
    `min_interval_s` (plus one epoch) while training runs, and holds every epoch after it.

    Args:
        history: the `HistoryCSV` callback of the same `fit`.
        path: the PNG file (written atomically).
        write: False on non-chief workers (nothing is drawn).
        title: figure title.
        monitor: the log that picks the best model, e.g. "val_accuracy".
        min_interval_s: seconds between two redraws while training runs (default 20;
            0 redraws at every epoch end).
    """

    def __init__(
        self, history: HistoryCSV, path, write=True, title=None, monitor=None, min_interval_s=20.0
    ):
        super().__init__()
        self.history = history
        self.path = os.fspath(path)
        self.write = write
        self.title = title
        self.monitor = monitor
        self.min_interval_s = float(min_interval_s)
        self._drawn_at = None  # time.monotonic() of the last drawing
        self._drawn_rows = 0

    def on_epoch_end(self, epoch, logs=None):
        now = time.monotonic()
        if self._drawn_at is None or now - self._drawn_at >= self.min_interval_s:
            self._draw(now)

    def on_train_end(self, logs=None):
        if len(self.history.rows) != self._drawn_rows:
            self._draw(time.monotonic())

    def _draw(self, now: float) -> None:
        if not self.write:
            return
        from keras_vit.train.learning_curves import plot_learning_curves

        plot_learning_curves(
            self.history.rows,
            self.path,
            title=self.title,
            monitor=self.monitor,
            label_smoothing=_label_smoothing(self.model),
            num_classes=int(self.model.output_shape[-1]),
        )
        self._drawn_at = now
        self._drawn_rows = len(self.history.rows)


def _label_smoothing(model) -> float:
    """The compiled loss's label smoothing (0.0 when it has none)."""
    loss = getattr(model, "loss", None)
    value = getattr(loss, "label_smoothing", None)
    if value is None and hasattr(loss, "get_config"):
        value = loss.get_config().get("label_smoothing")
    return float(value or 0.0)
