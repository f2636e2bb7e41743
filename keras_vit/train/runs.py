"""Run directories: `model.fit` under a strategy, with files that survive being killed.

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

The kept model is, by default (`select="last"`), the one at the end of the schedule, as the
paper reports its runs (appendix B.1); `select="best"` keeps instead the best epoch on the
validation data (by default carved from the training images, see
`RunConfig.validation_split`). The test split, never used for selection, is evaluated
once at the end with the model saved as best.keras (the one `evaluate` and `export` use), with
plain cross-entropy (no label smoothing) as its loss, as `keras-vit evaluate` computes it.
The per-epoch `loss`/`val_loss` of history.csv are the training loss (with the recipe's
label smoothing).

The `epoch` fields of history.csv and best.json count from 0, as Keras' `CSVLogger` and
`History` do; the console and the learning-curve plot count from 1, as Keras' progress bar
("Epoch 1/15") does.

Every file is replaced atomically, so a run killed at any moment (SIGKILL included) leaves
valid files, and `resume=True` continues from the last finished epoch: the run ends with the
same number of epochs and optimizer steps as an uninterrupted one. With in-memory arrays it
is the same run: each epoch's order depends on (`shuffle_seed`, epoch) alone
(`epoch_ordered_batches`) and the backup holds the dropout / stochastic-depth random state,
so history and weights equal the uninterrupted run's (bitwise on one CPU host). A finite
`tf.data.Dataset` (the CLI's `keras_vit.data.load`) draws each epoch's shuffle and
augmentation seeds from a state advanced once per pass; a resumed run first advances it past
the finished epochs (`epoch_passes`), so under the default strategy it also trains on the
same batches (tested with a small pipeline; a resumed `keras-vit train` run still ends with
other losses than the uninterrupted one, cause not found); with an epoch that is not one
pass of the dataset (an infinite one), a dataset of unknown size, or under other strategies
than the default and the multi-worker one the resumed epochs see other batches.

Under a multi-worker strategy every worker trains and saves, but only the chief writes the
run's files; the other workers write their throw-away saves to `.scratch-worker-<index>`
(emptied at each start, so a SIGKILLed worker's leftovers go at the restart) and keep their
resume state in `.backup-worker-<index>` (both removed at the end). Each worker resumes its
data stream at its backup's epoch (`worker_passes`: one `repeat()` of its pipeline, the
finished passes and batches skipped), so a restarted job ends with the uninterrupted run's
losses and weights, and before training continues the
workers compare their backups' epochs and digests through the strategy's all-reduce
(`keras_vit.train.worker_restart.agreed_epoch`) and resume from the newest epoch all of them have
(each keeps its previous backup until it writes the next); backups of that epoch holding
different states stop every worker with
one `BackupMismatchError` line naming them. Resuming a multi-worker run expects the run
directory on a file system every worker sees, and every worker restarted with `resume=True`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
from collections.abc import Callable

import keras

from keras_vit import _atomic
from keras_vit._validation import check_choice, check_labels, check_positive_int
from keras_vit.kernels import dispatch
from keras_vit.runtime import distribute
from keras_vit.spec import kept_model
from keras_vit.train import callbacks, run_lock, training, worker_restart
from keras_vit.train.run_plan import ConfigError, RunConfig, RunPlan, load_model, plan_run

__all__ = [
    "ConfigError",
    "RunConfig",
    "RunDirError",
    "RunResult",
    "check_run_dir",
    "evaluate",
    "fit_run",
    "is_complete",
    "load_model",
    "load_result",
    "read_config",
    "read_run_config",
    "train",
]

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.json"
HISTORY_FILE = "history.csv"
PLOT_FILE = "learning_curves.png"
BACKUP_DIR = "backup"
LOG_DIR = "logs"


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
    return os.path.isfile(os.path.join(run_dir, METRICS_FILE))


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
    if not os.path.isfile(os.path.join(run_dir, CONFIG_FILE)):
        raise RunDirError(f"Cannot resume: {run_dir!r} is not a run directory (no {CONFIG_FILE}).")


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
    record = _read_run_json(run_dir, CONFIG_FILE)
    if not isinstance(record.get("run"), dict):
        raise RunDirError(
            f'{os.path.join(run_dir, CONFIG_FILE)!r} has no "run" object: it is not the '
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
        path = os.path.join(os.fspath(run_dir), CONFIG_FILE)
        raise ConfigError(f"The configuration stored in {path!r} is unusable: {error}") from None


def _read_run_json(run_dir, name, default=None):
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


def fit_run(
    run_dir,
    build_model: Callable[[], keras.Model],
    train_data,
    *,
    epochs: int,
    validation_data=None,
    test_data=None,
    config: dict | None = None,
    strategy=None,
    resume: bool = False,
    monitor: str | None = None,
    select: str | None = None,
    steps_per_epoch: int | None = None,
    batch_size: int | None = None,
    shuffle_seed: int = 0,
    verbose="auto",
    extra_callbacks=(),
) -> RunResult:
    """Builds, compiles and fits a model in a run directory (see the module docstring).

    Args:
        run_dir: the run directory; created if needed.
        build_model: returns a compiled model (`model.compile(..., metrics=["accuracy"])`).
            Called inside `strategy.scope()`, so every variable is created by the strategy.
        train_data: a `tf.data.Dataset` of (images, labels) batches with the global batch
            size, or an (images, labels) tuple of arrays (then give `batch_size`).
        epochs: total number of epochs of the run (also when resuming).
        validation_data: held-out (images, labels) data, as for `fit`; evaluated after every
            epoch (with `select="best"` it picks the kept model). None: no held-out metrics.
        test_data: data never used for selection, evaluated once at the end with the kept
            model as saved in best.keras (metrics.json "test"). None: none.
        config: the resolved configuration, written to config.json (JSON-serialisable).
        strategy: a `tf.distribute.Strategy`; default: the current one.
        resume: continue the run in `run_dir` from its last finished epoch.
        monitor: log recorded in best.json, and with `select="best"` the one that picks the
            kept model; default "val_accuracy" with validation data, else "accuracy".
        select: which epoch's model is kept as best.keras/best.npz: "last" (the end of the
            schedule) or "best" (the best `monitor` value); see
            `keras_vit.train.callbacks.ModelSnapshots`. None (default): "last" for a new run, and
            for a resumed one the rule its best.json records ("best" for a best.json without
            it, as written before the choice existed).
        steps_per_epoch: batches per epoch of a `tf.data.Dataset`; None: one pass. With a
            finite dataset, the passes become one stream (`epoch_passes`), so an epoch may be
            a share of a pass or span several, and a resumed run sees the uninterrupted batches
            under the default strategy.
        batch_size: global batch size when `train_data` is a tuple of arrays (default 32).
        shuffle_seed: with arrays, epoch `e` visits the examples in the order
            `stateless_shuffle(range(n), seed=(shuffle_seed, e))`, a function of the seed and
            the epoch alone, so that a resumed run trains on the same batches as the
            uninterrupted one. (A `tf.data.Dataset` comes in its own pipeline's order.)
        verbose: `fit` verbosity ("auto"/1: progress bar, 0: silent, 2: one line per epoch).
        extra_callbacks: more Keras callbacks (run before the backup).

    Returns:
        A `RunResult`. If the run is already complete, its stored results (the model loaded
        from last.keras).

    Raises:
        RunDirError: see `check_run_dir`; also a resumed run whose best.json records
            another `select` than the one given (the kept model would switch rule midway).
        ValueError: arrays with `steps_per_epoch` (an epoch of arrays is one pass over them),
            or `select` not one of `keras_vit.spec.kept_model.SELECTIONS`; before any file is
            written, data that cannot train this model (see `_checked_data`: labels that
            are no integer class id in [0, num_classes), non-finite images, no example or
            batch at all, batches that the replicas cannot share evenly). A dataset's labels
            are checked as its batches are read (InvalidArgumentError at the first bad one),
            and a dataset of unknown size that yields no batch stops the run at the end of
            its first epoch (`_RequireSteps`), before metrics.json.
    """
    import tensorflow as tf

    _check_fit_input(train_data, steps_per_epoch)
    if select is not None:
        check_choice("select", select, kept_model.SELECTIONS)
    run_dir = os.path.abspath(os.fspath(run_dir))
    strategy = strategy or tf.distribute.get_strategy()
    chief = distribute.is_chief(strategy)
    if chief:  # other workers may already be writing their backups next to it
        check_run_dir(run_dir, resume)
    select = _resumed_select(run_dir, select) if resume else select
    select = select or kept_model.DEFAULT_SELECTION
    if resume and is_complete(run_dir):
        logger.info("Run %s is already complete; nothing to resume", run_dir)
        return load_result(run_dir)
    model = _build_in_scope(build_model, strategy)  # before any file: the data checks need it
    train_data, validation_data, test_data = _checked_data(
        model, strategy, train_data, validation_data, test_data, batch_size
    )
    lock = _lock(run_dir) if chief else None
    scratch = None
    try:
        if chief and not resume:
            _atomic.write_json(os.path.join(run_dir, CONFIG_FILE), config or {})
        if chief and resume:  # under the run's lock: no other writer
            _remove_leftovers(run_dir)
        monitor = monitor or ("val_accuracy" if validation_data is not None else "accuracy")
        scratch = None if chief else worker_restart.scratch_dir(run_dir, strategy)
        history, callback_list = _run_callbacks(
            run_dir, monitor, select, strategy, chief, scratch, extra_callbacks
        )
        # the backup's epoch is also the data position; every worker must restore the same one
        first_epoch = worker_restart.agreed_epoch(callback_list[-1].backup_dir, strategy)
        callback_list[-1].restore_epoch = first_epoch  # maybe the backup before the newest
        start = time.perf_counter()
        x, steps_per_epoch, batch_size = _fit_input(
            train_data, steps_per_epoch, batch_size, first_epoch, epochs, shuffle_seed, strategy
        )
        model.fit(
            x,
            None,
            batch_size=batch_size,
            shuffle=False,  # arrays: epoch_ordered_batches; datasets: their own pipeline
            epochs=epochs,
            validation_data=validation_data,
            steps_per_epoch=steps_per_epoch,
            callbacks=callback_list,
            verbose=verbose,
        )
        metrics = _fit_metrics(model, history, run_dir, monitor, strategy, start)
        metrics.update(
            _held_out(model, history, run_dir, validation_data, test_data, batch_size, chief)
        )
        if chief:
            _atomic.write_json(os.path.join(run_dir, METRICS_FILE), metrics)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        if lock:
            run_lock.release(lock)
    return RunResult(run_dir, model, history.rows, metrics)


def _resumed_select(run_dir, select: str | None) -> str | None:
    """`fit_run` step 1b: the rule a resumed run keeps its model by: the one its best.json
    records ("best" when it records none), which a given `select` must equal; `select` itself
    when no epoch has finished yet (no best.json)."""
    stored = _read_run_json(run_dir, "best.json")
    if stored is None:
        return select
    rule = stored.get("select", "best")
    if select is not None and select != rule:
        raise RunDirError(
            f"Cannot resume {run_dir!r} with select={select!r}: its best.json keeps the "
            f"{rule!r} epoch's model; pass select={rule!r} (or None) to continue it."
        )
    return rule


def _remove_leftovers(run_dir) -> None:
    """`fit_run` on resume: the temporary files a killed process left mid-write in the run
    directory and its backup folder (`keras_vit._atomic.remove_leftovers`)."""
    for folder in (run_dir, os.path.join(run_dir, BACKUP_DIR)):
        for name in _atomic.remove_leftovers(folder):
            logger.info("Removed %s, left by a process killed while writing it", name)


def _check_fit_input(train_data, steps_per_epoch) -> None:
    """`fit_run` step 1: arrays take no `steps_per_epoch` (an epoch is one pass)."""
    if isinstance(train_data, tuple) and steps_per_epoch is not None:
        raise ValueError(
            "`steps_per_epoch` is for infinite datasets; with (images, labels) arrays an "
            f"epoch is one pass over them. Received: steps_per_epoch={steps_per_epoch!r}"
        )


def _checked_data(model, strategy, train_data, validation_data, test_data, batch_size):
    """`fit_run` step 2b, before any file is written: (train, validation, test data) checked
    against the compiled `model` and `strategy`.

    Arrays are checked whole: labels integer class ids in [0, num_classes) (the model's
    output width), images finite and shaped as the model's input, at least one example, a
    batch size > 0, and under R > 1 replicas every batch (the last, partial one included)
    a multiple of R. Datasets: a training set of 0 batches is refused, a static batch size
    must be a multiple of R (an unknown one is asserted per batch), and every label is
    asserted as it is read (`keras_vit.data.labels`)."""
    num_classes = int(model.output_shape[-1])
    if isinstance(train_data, tuple) and batch_size is not None:
        check_positive_int("batch_size", batch_size)
    checked = []
    for data, what in (
        (train_data, "train_data"),
        (validation_data, "validation_data"),
        (test_data, "test_data"),
    ):
        if data is None:
            checked.append(None)
        elif isinstance(data, tuple):
            checked.append(_checked_arrays(data, model, num_classes, what))
        else:
            checked.append(_checked_dataset(data, num_classes, what))
    if isinstance(train_data, tuple):
        check_replica_batches(len(checked[0][0]), batch_size or 32, strategy)
    else:
        _check_dataset_batches(checked[0], strategy)
        checked[0] = _replica_asserted(checked[0], strategy)
    return tuple(checked)


def _checked_arrays(data, model, num_classes: int, what: str):
    """(images, int32 labels) of an (images, labels) tuple, or ValueError naming the first
    bad value (see `_checked_data`)."""
    import numpy as np

    if len(data) != 2:
        raise ValueError(
            f"{what} must be an (images, labels) pair of arrays. Received: a tuple of {len(data)}"
        )
    images, labels = np.asarray(data[0]), np.asarray(data[1])
    if not len(images) or len(images) != len(labels):
        raise ValueError(
            f"{what} needs at least one image and one label per image. Received: "
            f"{len(images)} images, {len(labels)} labels"
        )
    _check_model_input(images, model, what)
    return images, check_labels(labels, num_classes, what=f"labels of {what}")


def _check_model_input(images, model, what: str) -> None:
    """ValueError for images of another shape than the model's input, or not finite."""
    import numpy as np

    expected = tuple(model.input_shape[1:])
    shape = images.shape[1:]
    if len(shape) != len(expected) or any(
        e not in (None, s) for e, s in zip(expected, shape, strict=True)
    ):
        raise ValueError(
            f"{what}: images of shape {images.shape} do not fit the model's input "
            f"(batch, {', '.join(map(str, expected))})."
        )
    if images.dtype.kind not in "iuf":
        raise ValueError(f"{what}: images must be real numbers. Received: dtype={images.dtype}")
    finite = np.isfinite(images)
    if not finite.all():
        index = np.unravel_index(int(np.argmin(finite)), images.shape)
        raise ValueError(
            f"{what}: images must be finite. Received: "
            f"images[{', '.join(map(str, index))}]={images[index].item()!r}"
        )


def _checked_dataset(dataset, num_classes: int, what: str):
    from keras_vit.data.labels import checked_labels

    return checked_labels(dataset, num_classes, what)


def _check_dataset_batches(dataset, strategy) -> None:
    """ValueError for a training dataset of 0 batches, or whose static batch size the
    strategy's replicas cannot share evenly (`distribute.per_replica_batch_size`)."""
    if int(dataset.cardinality()) == 0:
        raise ValueError(
            "train_data yields no batch (its cardinality is 0): nothing would be trained. A "
            "training pipeline drops the last partial batch, so a split smaller than the "
            "batch size gives none; choose a smaller batch size."
        )
    batch = _static_batch(dataset)
    if strategy.num_replicas_in_sync > 1 and batch is not None:
        distribute.per_replica_batch_size(batch, strategy)


def _static_batch(dataset) -> int | None:
    import tensorflow as tf

    first = tf.nest.flatten(dataset.element_spec)[0]
    return first.shape[0] if first.shape.rank else None


def _replica_asserted(dataset, strategy):
    """Under R > 1 replicas, a dataset whose batch size is not static asserts that each
    batch is a multiple of R (else the replicas' shares differ: a wrong gradient, or a
    crash in the all-reduce)."""
    import tensorflow as tf

    replicas = strategy.num_replicas_in_sync
    if replicas == 1 or _static_batch(dataset) is not None:
        return dataset
    name = type(strategy).__name__

    def check(images, *rest):
        size = tf.shape(tf.nest.flatten(images)[0])[0]
        test = tf.debugging.Assert(
            tf.equal(size % replicas, 0),
            [f"A batch that the {replicas} replicas of {name} cannot share evenly:", size],
        )
        with tf.control_dependencies([test]):
            return (tf.nest.map_structure(tf.identity, images), *rest)

    return dataset.map(check)


def check_replica_batches(num_examples: int, batch_size: int, strategy) -> None:
    """ValueError unless every batch of `num_examples` arrays at global `batch_size` (the
    last, partial one included) splits evenly over the strategy's replicas (the batches that
    occur: 2 examples at batch 3 are one batch of 2).

    Each replica averages the loss over its own share and the shares' gradients are summed
    with weight 1/R (Keras' `scale_loss_for_distribution`), so unequal shares weight some
    examples more than one device would (9 images at batch 4 on 2 replicas: the last batch
    of 1 ended 0.049 away from one device's weights) or crash the all-reduce (batch 5:
    InvalidArgumentError in AddN). Equal shares train as one device does. Dropping the
    remainder instead would train on other examples than one device does, silently.
    """
    replicas = strategy.num_replicas_in_sync
    if replicas == 1:
        return
    if num_examples >= batch_size:  # a full batch occurs
        distribute.per_replica_batch_size(batch_size, strategy)
    last = num_examples % batch_size
    if last % replicas:
        name = type(strategy).__name__
        raise ValueError(
            f"{num_examples} examples at global batch size {batch_size} end every epoch with a "
            f"batch of {last}, which the {replicas} replicas of {name} cannot share evenly "
            f"(each replica must get the same number of examples); use a number of examples "
            f"whose remainder by the batch size is a multiple of {replicas} (e.g. "
            f"{num_examples - last}). Received: num_examples={num_examples}, "
            f"batch_size={batch_size}, replicas={replicas}"
        )


def _build_in_scope(build_model, strategy) -> keras.Model:
    """`fit_run` step 2: the compiled model, every variable created by `strategy`."""
    with strategy.scope():
        model = build_model()
        if model.optimizer is None:
            raise ValueError("`build_model` must return a compiled model (model.compile(...)).")
        _build_optimizer(model)
    distribute.check_variables_in_scope(model, strategy)
    return model


def _build_optimizer(model) -> None:
    """Creates the optimizer's slot variables now, eagerly. Left to `fit`, Keras creates them
    while tracing the first training step, where each costs ~15 ms (~2 s of the default
    `keras-vit train`'s first epoch for its 148 weights) against ~1 ms here."""
    if model.optimizer.built:
        return
    model.optimizer.build(model.trainable_variables)


def _run_callbacks(run_dir, monitor, select, strategy, chief, scratch, extra_callbacks):
    """`fit_run` step 3: (the history callback, every callback of the run in order: history,
    snapshots, learning curves, TensorBoard, `extra_callbacks`, then the backup last)."""
    history = callbacks.HistoryCSV(os.path.join(run_dir, HISTORY_FILE), write=chief)
    callback_list = [
        _RequireSteps(),  # first: raises before any other callback writes the empty epoch
        history,
        callbacks.ModelSnapshots(
            run_dir, monitor=monitor, write=chief, scratch_dir=scratch, select=select
        ),
        callbacks.LearningCurvePlot(
            history,
            os.path.join(run_dir, PLOT_FILE),
            write=chief,
            title=f"{os.path.basename(run_dir)}: learning curves",
            monitor=monitor if select == "best" else None,  # marks the kept epoch
        ),
        keras.callbacks.TensorBoard(os.path.join(scratch or run_dir, LOG_DIR)),
        *extra_callbacks,
        callbacks.AtomicBackupAndRestore(_backup_dir(run_dir, strategy, chief)),
    ]
    return history, callback_list


class _RequireSteps(keras.callbacks.Callback):
    """Stops `fit` with a ValueError at the end of an epoch that took no training step (a
    dataset of unknown size that yields no batch: Keras only warns "Your input ran out of
    data" and still counts optimizer iterations), before the other callbacks record it and
    before metrics.json would mark the run finished."""

    def on_epoch_begin(self, epoch, logs=None):
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1

    def on_epoch_end(self, epoch, logs=None):
        if not self.steps:
            raise ValueError(
                f"Epoch {epoch + 1} took no training step: train_data yielded no batch (empty, "
                "or fewer examples than its batch size with drop_remainder). The run is not "
                "finished; give training data with at least one batch."
            )


def _fit_input(train_data, steps_per_epoch, batch_size, first_epoch, epochs, seed, strategy):
    """`fit_run` step 4: (x, steps_per_epoch, batch_size) for `model.fit`, so that a run
    resumed at `first_epoch` sees the batches of the uninterrupted one."""
    if isinstance(train_data, tuple):  # in-memory arrays: the order is ours to fix
        x, steps_per_epoch = epoch_ordered_batches(
            *train_data, batch_size or 32, first_epoch, epochs, seed
        )
        return x, steps_per_epoch, None
    if _is_default_strategy(strategy):  # a finite dataset: epoch e = its pass e
        x, steps_per_epoch = epoch_passes(train_data, first_epoch, steps_per_epoch)
        return x, steps_per_epoch, batch_size
    if _is_multi_worker(strategy):  # each worker's own copy of the pipeline, at its pass
        x, steps_per_epoch = worker_passes(train_data, first_epoch, steps_per_epoch)
        return x, steps_per_epoch, batch_size
    if steps_per_epoch is not None and hasattr(train_data, "repeat"):  # other strategies
        return train_data.repeat(), steps_per_epoch, batch_size  # one stream
    return train_data, steps_per_epoch, batch_size


def _fit_metrics(model, history, run_dir, monitor, strategy, start) -> dict:
    """`fit_run` step 5: what the fit did (epochs, steps, the kept epoch, wall time)."""
    return {
        "epochs": len(history.rows),
        "steps": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        "monitor": monitor,
        "best": _atomic.read_json(os.path.join(run_dir, "best.json")),
        "fit_wall_time_s": round(time.perf_counter() - start, 3),
        "num_replicas": distribute.num_replicas(strategy),
    }


def _held_out(model, history, run_dir, validation_data, test_data, batch_size, chief) -> dict:
    """`fit_run` step 6: the validation figures after the last epoch and the test figures of
    best.keras, the kept model (chief only); "held_out" is the test's where there is one."""
    metrics = {}
    if validation_data is not None:
        metrics["validation"] = _held_out_metrics(history.rows, model, validation_data, batch_size)
        metrics["held_out"] = metrics["validation"]
    if test_data is not None and chief:
        best = _atomic.read_json(os.path.join(run_dir, "best.json"))
        metrics["test"] = evaluate_saved(
            os.path.join(run_dir, "best.keras"), test_data, batch_size=batch_size
        )
        metrics["test"]["epoch"] = (best or {}).get("epoch")
        metrics["held_out"] = metrics["test"]
    return metrics


def epoch_ordered_batches(x, y, batch_size, first_epoch, epochs, seed):
    """(dataset, steps_per_epoch): batches of the arrays `x`, `y` for epochs `first_epoch`
    to `epochs - 1`, epoch `e` in the order `stateless_shuffle(range(n), seed=(seed, e))`.

    Keras' `fit(..., shuffle=True)` draws each epoch's permutation from the process' random
    state, which a restart resets: a run resumed at epoch `k` would then see epoch 0's order
    again. Here the order depends on (seed, epoch) alone; the last batch of an epoch may be
    partial, as with Keras' own array batching. `fit` must get `steps_per_epoch` (it then
    keeps one iterator across epochs).
    """
    import math

    import tensorflow as tf

    count = len(x)
    if len(y) != count:
        raise ValueError(f"images and labels differ in length: {count} and {len(y)}")
    images, labels = tf.constant(x), tf.constant(y)
    seed = tf.constant(seed, tf.int64)

    def epoch_indices(epoch):
        order = tf.random.experimental.stateless_shuffle(
            tf.range(count, dtype=tf.int64), seed=tf.stack([seed, epoch])
        )
        return tf.data.Dataset.from_tensor_slices(order).batch(batch_size)

    dataset = tf.data.Dataset.range(first_epoch, epochs).flat_map(epoch_indices)
    dataset = dataset.map(lambda index: (tf.gather(images, index), tf.gather(labels, index)))
    return dataset.prefetch(tf.data.AUTOTUNE), math.ceil(count / batch_size)


def epoch_passes(dataset, first_epoch: int, steps_per_epoch: int | None = None):
    """(dataset, steps_per_epoch): a finite dataset as one stream of batches in which a
    resumed run (starting at `first_epoch`) sees the batches the uninterrupted run saw.

    `shuffle(..., reshuffle_each_iteration=True)` and `Dataset.random(...,
    rerandomize_each_iteration=True)` (keras_vit.data.load's shuffle and augmentation seeds)
    draw each pass's seed from a state that advances once per iterator over the dataset, and
    a rebuilt dataset starts that state again at pass 0. `steps_per_epoch` None or equal to
    the dataset's batch count (an epoch is one pass): `first_epoch` iterators are started and
    dropped first, then `repeat()` makes the passes. Any other `steps_per_epoch` (an epoch is
    a share of a step budget, as `finetune` runs it): the stream `repeat()` with its first
    `first_epoch * steps_per_epoch` batches skipped (they are computed, not trained on).
    `fit` keeps one iterator across epochs once `steps_per_epoch` is given. A dataset of
    unknown size is repeated when `steps_per_epoch` is given (the resumed epochs then see
    other batches); an infinite one, or an unknown-sized one without `steps_per_epoch`, is
    returned unchanged.
    """
    import tensorflow as tf

    batches = int(dataset.cardinality())
    if batches == tf.data.INFINITE_CARDINALITY or (batches < 0 and steps_per_epoch is None):
        return dataset, steps_per_epoch
    if batches < 0:  # unknown size: a stream, but where the resumed run starts is unknown
        return dataset.repeat(), steps_per_epoch
    if steps_per_epoch in (None, batches):
        for _ in range(first_epoch):
            iterator = iter(dataset)
            del iterator
        return dataset.repeat().prefetch(tf.data.AUTOTUNE), batches
    stream = dataset.repeat().skip(first_epoch * steps_per_epoch)
    return stream.prefetch(tf.data.AUTOTUNE), steps_per_epoch


def worker_passes(dataset, first_epoch: int, steps_per_epoch: int | None = None):
    """(dataset, steps_per_epoch): a worker's training stream under a multi-worker strategy,
    in which a run resumed at `first_epoch` sees the batches the uninterrupted run saw.

    Every worker runs the whole pipeline and Keras' `experimental_distribute_dataset` gives
    it its share of each global batch (TensorFlow's auto-shard), so a worker's data position
    is its pipeline's: the passes begun so far (each new iterator over the dataset draws the
    next pass's shuffle and augmentation seeds from one state, see `epoch_passes`) and the
    batches taken in the current pass. How many iterators `fit` makes is Keras' business:
    under a strategy it first takes one batch from an iterator of its own to build the model
    (`_maybe_symbolic_build`, Keras 3.15), and with a finite dataset it starts a new
    iterator at every epoch's start and one more at its end. So the stream is made one
    iterator: `repeat()`, with `steps_per_epoch` (the dataset's batch count when None), and
    nothing after it that reads ahead (a `prefetch` there, ours or the one tf.data injects,
    lets the build's iterator begin the next pass in the background: a timing-dependent
    draw, so runs of the same seed differed). In a fresh run the build's iterator draws
    pass 0 and epoch `e` trains on batches `e * steps_per_epoch` onwards of the passes that
    follow.

    A run resumed at `first_epoch` (the epoch of the worker's backup, which
    `keras_vit.train.worker_restart.agreed_epoch` checked to be every worker's) first starts and
    drops one iterator per whole pass trained on before that epoch (the build's iterator
    then draws in place of the fresh run's), and its stream skips the batches of the current
    pass already trained on (computed, not trained on; none when an epoch is a whole pass).

    A dataset of unknown or infinite size (or an empty one) is repeated when
    `steps_per_epoch` is given and returned as it is otherwise (where the resumed run is in
    it cannot be found again).
    """
    batches = int(dataset.cardinality())
    if batches <= 0:  # infinite (-1), unknown (-2) or empty
        stream = dataset.repeat() if steps_per_epoch is not None else dataset
        return stream, steps_per_epoch
    steps_per_epoch = batches if steps_per_epoch is None else steps_per_epoch
    passes, offset = divmod(first_epoch * steps_per_epoch, batches)
    for _ in range(passes):
        iterator = iter(dataset)
        del iterator
    stream = dataset.repeat().skip(offset) if offset else dataset.repeat()
    return stream.with_options(_no_read_ahead_across_passes()), steps_per_epoch


def _no_read_ahead_across_passes():
    """tf.data options without the `prefetch` that tf.data injects at a pipeline's end by
    default (`experimental_optimization.inject_prefetch`): after `repeat()` it lets an
    iterator that was read once (Keras' build batch) begin the next pass in the background,
    drawing that pass's seeds or not depending on timing (seen with a pipeline that ends in
    `batch`: 2 different streams in 15 reads of the same seed). The batches are unchanged."""
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return options


def _is_multi_worker(strategy) -> bool:
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def _is_default_strategy(strategy) -> bool:
    """True for TensorFlow's default strategy (no `tf.distribute` strategy in use)."""
    return type(strategy).__name__ == "_DefaultDistributionStrategy"


def _lock(run_dir) -> str:
    """Creates `run_dir` and takes its lock (see `keras_vit.train.run_lock`)."""
    os.makedirs(run_dir, exist_ok=True)
    try:
        return run_lock.acquire(run_dir)
    except run_lock.RunDirLockedError as error:
        raise RunDirError(str(error)) from None


def _held_out_metrics(rows, model, validation_data, batch_size) -> dict:
    """The last epoch's validation logs (the final model on the held-out data), or a fresh
    evaluation when there are none."""
    last = rows[-1] if rows else {}
    logged = {key[len("val_") :]: value for key, value in last.items() if key.startswith("val_")}
    return logged or evaluate(model, validation_data, batch_size=batch_size)


def _backup_dir(run_dir, strategy, chief) -> str:
    """The chief's backup is run_dir/backup; other workers keep their own next to it."""
    if chief:
        return os.path.join(run_dir, BACKUP_DIR)
    task_id = strategy.cluster_resolver.task_id
    return os.path.join(run_dir, f".{BACKUP_DIR}-worker-{task_id}")


def evaluate(model, data, *, batch_size: int | None = None, verbose=0) -> dict:
    """`model.evaluate` on held-out data, as a dict of floats (loss, accuracy, ...).

    Args:
        model: a compiled model.
        data: a `tf.data.Dataset` of (images, labels) batches, or an (images, labels) tuple.
        batch_size: batch size for a tuple of arrays.
        verbose: `evaluate` verbosity (default 0: silent).
    """
    x, y = data if isinstance(data, tuple) else (data, None)
    results = model.evaluate(x, y, batch_size=batch_size, verbose=verbose, return_dict=True)
    return {key: float(value) for key, value in results.items()}


TEST_LOSS = "cross-entropy without label smoothing"


def evaluate_saved(model_file, data, *, batch_size: int | None = None) -> dict:
    """Loss and accuracy of a saved `.keras` model (safe mode) on `data`, the loss being
    plain cross-entropy from logits (no label smoothing), as `keras-vit evaluate` reports.

    Returns:
        {"model": file name, "loss", "accuracy", "loss_name"}.
    """
    model = load_model(model_file, compile=False)
    model.compile(loss=training.loss(), metrics=["accuracy"])  # raises on bad labels
    results = evaluate(model, data, batch_size=batch_size)
    return {"model": os.path.basename(model_file), **results, "loss_name": TEST_LOSS}


def load_result(run_dir) -> RunResult:
    """The stored results of a completed run (model from last.keras, safe mode on)."""
    model = load_model(os.path.join(run_dir, "last.keras"))
    return RunResult(
        os.fspath(run_dir),
        model,
        callbacks.read_history(os.path.join(run_dir, HISTORY_FILE)),
        _atomic.read_json(os.path.join(run_dir, METRICS_FILE)),
    )


def train(
    config: RunConfig | None = None,
    run_dir="runs/train",
    *,
    strategy=None,
    resume: bool = False,
    verbose="auto",
    extra_callbacks=(),
    on_start: Callable[[dict], None] | None = None,
) -> RunResult:
    """Trains (or fine-tunes) a ViT as `config` says, into the run directory `run_dir`.

    The pieces: `run_plan.plan_run` checks everything first; the datasets come from
    `keras_vit.data.load` (the training split with augmentation, `config.validation_split`
    evaluated after every epoch, `config.test_split` evaluated at the end with the model
    `config.select` keeps),
    the model from `keras_vit.ViT` (task "train") or `keras_vit.finetune` on the pre-trained
    model (task "finetune"), built and compiled with the recipe inside `strategy.scope()`;
    `fit_run` does the rest.

    Args:
        config: a `RunConfig`; default: `RunConfig()` (the default small ViT on the embedded
            MNIST with `training.TrainConfig`). Ignored with `resume=True`: the run's own
            config.json is used.
        run_dir: the run directory.
        strategy: a `tf.distribute.Strategy`; default: `resolve_strategy(config.strategy)`.
        resume: continue the run in `run_dir` from its last finished epoch.
        verbose: `fit` verbosity ("auto"/1: progress bar).
        extra_callbacks: more Keras callbacks for `fit` (see `fit_run`).
        on_start: called once with the run's config record (what config.json holds:
            "run", "resolved", "versions") and the dtype policy in effect added as
            `resolved["dtype_policy"]`, after every check and before training starts. With
            it, the precision line ("Precision: ...") is logged at DEBUG, not INFO (the
            caller announces the run; the command line prints it once).

    Returns:
        A `RunResult`; `result.metrics["test"]["accuracy"]` is the test accuracy of best.keras,
            the kept model (`config.select`)
            (`"held_out"`: the test figures, or the validation ones without a test split).

    Raises:
        RunDirError: `run_dir` exists without `resume`, or is not a run with it.
        ConfigError: a bad configuration (see `run_plan.plan_run`).
        keras_vit.runtime.distribute.StrategyUnavailableError: the strategy cannot run here.
    """
    if resume:
        config = read_run_config(run_dir)
    config = config or RunConfig()
    if config.remat:  # before the strategy or plan loads or probes anything on the backend
        dispatch.prefer_memory_schedule()
    if strategy is None:
        strategy = distribute.resolve_strategy(config.strategy)
    plan = plan_run(config, strategy)
    if distribute.is_chief(strategy):
        check_run_dir(run_dir, resume)
    policy = keras.config.dtype_policy()
    try:
        distribute.set_mixed_precision(plan.precision.policy)
        keras.utils.set_random_seed(config.recipe.seed)
        train_data, validation, test = _datasets(plan)
        record = _config_record(plan, strategy)
        if on_start is not None:
            on_start(
                {
                    **record,
                    "resolved": {
                        **record["resolved"],
                        "dtype_policy": keras.config.dtype_policy().name,
                    },
                }
            )
        # the caller of on_start announces the run (the CLI's first lines name the precision)
        logger.log(
            logging.DEBUG if on_start else logging.INFO,
            "Precision: %s",
            plan.precision.describe(),
        )
        return fit_run(
            run_dir,
            lambda: _build_model(plan),
            train_data,
            epochs=plan.epochs,
            steps_per_epoch=plan.steps_per_epoch,
            validation_data=validation,
            test_data=test,
            config=record,
            strategy=strategy,
            resume=resume,
            select=config.select,
            verbose=verbose,
            extra_callbacks=extra_callbacks,
        )
    finally:
        keras.config.set_dtype_policy(policy)


def _datasets(plan: RunPlan):
    """(training data, validation data, test data or None) of the plan, each one pass.

    Each "epoch" is `plan.steps_per_epoch` steps (whole passes for `train`, a share of the
    step budget for `finetune`); `fit_run` makes the training passes one stream."""
    from keras_vit import data

    config = plan.config
    common = dict(
        image_size=plan.image_size,
        batch_size=plan.global_batch_size,
        channels=plan.channels,
        data_dir=config.data_dir,
        shuffle_seed=config.recipe.seed,
        shots_per_class=config.shots_per_class,
        split_seed=config.split_seed,
        bad_images=config.bad_images,
    )
    train_data = data.load(config.recipe.dataset, plan.train_split, training=True, **common)
    validation = data.load(config.recipe.dataset, config.validation_split, training=False, **common)
    test = None
    if plan.test_split is not None:
        test = data.load(config.recipe.dataset, plan.test_split, training=False, **common)
    return train_data, validation, test


def _build_model(plan: RunPlan) -> keras.Model:
    """Builds and compiles the model (called inside the strategy scope)."""
    from keras_vit.model.finetune import finetune

    if plan.source_model is not None:
        source = distribute.with_dtype_policy(plan.source_model, plan.precision.policy)
        model = finetune(
            source,
            plan.info.num_classes,
            image_size=plan.image_size,
            remat=plan.config.remat,
            lora_rank=plan.config.lora_rank,
        )
    else:
        model = training.build_model(plan.model_kwargs)
    compile_kwargs = plan.config.recipe.compile_kwargs(plan.num_train_examples)
    compile_kwargs["jit_compile"] = plan.jit_compile
    model.compile(**compile_kwargs)
    distribute.clip_after_all_reduce(model.optimizer)
    return model


def _config_record(plan: RunPlan, strategy) -> dict:
    import tensorflow as tf

    from keras_vit._version import __version__

    return {
        "run": plan.config.to_dict(),
        "resolved": {
            **plan.resolved(),
            "strategy": type(strategy).__name__,
            "num_replicas": distribute.num_replicas(strategy),
        },
        "versions": {
            "keras_vit": __version__,
            "keras": keras.__version__,
            "tensorflow": tf.__version__,
        },
    }
