"""A training run: `fit_run` (`model.fit` under a strategy, in a run directory whose files
survive being killed) and `train` (a `RunConfig` planned, its data loaded, its model built,
then `fit_run`); `evaluate` and `evaluate_saved` for held-out data. The run directory's files
and their readers are in `keras_vit.train.run_directory`, the data checks in
`keras_vit.train.fit_data`, the epoch-ordered streams in `keras_vit.train.epoch_streams`.

The kept model is, by default (`select="last"`), the one at the end of the schedule, as the
paper reports its runs (appendix B.1); `select="best"` keeps instead the best epoch on the
validation data (by default carved from the training images, see `RunConfig.validation_split`).
The test split, never used for selection, is evaluated once at the end with the model saved as
best.keras (the one `evaluate` and `export` use), with plain cross-entropy (no label smoothing)
as its loss, as `keras-vit evaluate` computes it. The per-epoch `loss`/`val_loss` of
history.csv are the training loss (with the recipe's label smoothing).

The `epoch` fields of history.csv and best.json count from 0, as Keras' `CSVLogger` and
`History` do; the console and the learning-curve plot count from 1, as Keras' progress bar
("Epoch 1/15") does.

Every file is replaced atomically, so a run killed at any moment (SIGKILL included) leaves
valid files, and `resume=True` continues from the last finished epoch: the run ends with the
same number of epochs and optimizer steps as an uninterrupted one. With in-memory arrays it is
the same run: each epoch's order depends on (`shuffle_seed`, epoch) alone
(`epoch_streams.epoch_ordered_batches`) and the backup holds the dropout / stochastic-depth
random state, so history and weights equal the uninterrupted run's (bitwise on one CPU host). A
finite `tf.data.Dataset` (the CLI's `keras_vit.data.load`) draws each epoch's shuffle and
augmentation seeds from a state advanced once per pass; a resumed run first advances it past
the finished epochs (`epoch_streams.epoch_passes`), so under the default strategy it also
trains on the same batches (tested with a small pipeline; a resumed `keras-vit train` run still
ends with other losses than the uninterrupted one, cause not found); with an epoch that is not
one pass of the dataset (an infinite one), a dataset of unknown size, or under other strategies
than the default and the multi-worker one the resumed epochs see other batches.

Under a multi-worker strategy every worker trains and saves, but only the chief writes the
run's files; the other workers write their throw-away saves to `.scratch-worker-<index>`
(emptied at each start, so a SIGKILLed worker's leftovers go at the restart) and keep their
resume state in `.backup-worker-<index>` (both removed at the end). Each worker resumes its
data stream at its backup's epoch (`epoch_streams.worker_passes`: one `repeat()` of its
pipeline, the finished passes and batches skipped), so a restarted job ends with the
uninterrupted run's losses and weights, and before training continues the workers compare their
backups' epochs and digests through the strategy's all-reduce
(`keras_vit.train.worker_restart.agreed_epoch`) and resume from the newest epoch all of them
have (each keeps its previous backup until it writes the next); backups of that epoch holding
different states stop every worker with one `BackupMismatchError` line naming them. Resuming a
multi-worker run expects the run directory on a file system every worker sees, and every worker
restarted with `resume=True`.

Several JAX processes (`--strategy multi_worker` on JAX, `keras_vit.runtime.jax_cluster`) follow
the same rules, process 0 being the chief: each process reads the whole stream and trains on its
share of every global batch (`jax_cluster.process_share`), the backups' epochs are compared with
one JAX all-gather, and the chief evaluates the test split alone, without the distribution.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable

import keras

from keras_vit import _atomic
from keras_vit._validation import check_choice
from keras_vit.kernels import dispatch
from keras_vit.runtime import distribute, jax_cluster, precision
from keras_vit.spec import kept_model, run_files
from keras_vit.train import (
    callbacks,
    epoch_streams,
    fit_data,
    losses,
    run_directory,
    run_lock,
    training,
    worker_restart,
)
from keras_vit.train.run_config import RunConfig
from keras_vit.train.run_directory import RunResult
from keras_vit.train.run_plan import RunPlan, load_model, plan_run

__all__ = ["evaluate", "evaluate_saved", "fit_run", "train"]

logger = logging.getLogger(__name__)


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
            written, data that cannot train this model (see `fit_data.checked_data`: labels that
            are no integer class id in [0, num_classes), non-finite images, no example or
            batch at all, batches that the replicas cannot share evenly). A dataset's labels
            are checked as its batches are read (InvalidArgumentError at the first bad one),
            and a dataset of unknown size that yields no batch stops the run at the end of
            its first epoch (`_RequireSteps`), before metrics.json.
    """
    import tensorflow as tf

    fit_data.check_fit_input(train_data, steps_per_epoch)
    if select is not None:
        check_choice("select", select, kept_model.SELECTIONS)
    run_dir = os.path.abspath(os.fspath(run_dir))
    strategy = strategy or tf.distribute.get_strategy()
    chief = distribute.is_chief(strategy)
    if chief:  # other workers may already be writing their backups next to it
        run_directory.check_run_dir(run_dir, resume)
    select = run_directory.resumed_select(run_dir, select) if resume else select
    select = select or kept_model.DEFAULT_SELECTION
    if resume and run_directory.is_complete(run_dir):
        logger.info("Run %s is already complete; nothing to resume", run_dir)
        return run_directory.load_result(run_dir)
    model = _build_in_scope(build_model, strategy)  # before any file: the data checks need it
    train_data, validation_data, test_data = fit_data.checked_data(
        model, strategy, train_data, validation_data, test_data, batch_size
    )
    lock = run_directory.take_lock(run_dir) if chief else None
    scratch = None
    try:
        if chief and not resume:
            _atomic.write_json(os.path.join(run_dir, run_files.CONFIG_FILE), config or {})
        if chief and resume:  # under the run's lock: no other writer
            run_directory.remove_leftovers(run_dir)
        monitor = monitor or ("val_accuracy" if validation_data is not None else "accuracy")
        scratch = None if chief else worker_restart.scratch_dir(run_dir, strategy)
        history, callback_list = _run_callbacks(
            run_dir, monitor, select, strategy, chief, scratch, extra_callbacks
        )
        # the backup's epoch is also the data position; every worker must restore the same one
        first_epoch = worker_restart.agreed_epoch(callback_list[-1].backup_dir, strategy)
        callback_list[-1].restore_epoch = first_epoch  # maybe the backup before the newest
        start = time.perf_counter()
        x, steps_per_epoch, batch_size = epoch_streams.fit_input(
            train_data, steps_per_epoch, batch_size, first_epoch, epochs, shuffle_seed, strategy
        )
        x, validation_shares = _process_shares(x, validation_data, batch_size)
        epoch_streams.build_from_spec(model, x)
        with losses.labels_checked_upstream():  # checked_data checked every label
            with jax_cluster.process_local_input():
                model.fit(
                    x,
                    None,
                    batch_size=batch_size,
                    shuffle=False,  # arrays: epoch_ordered_batches; datasets: their pipeline
                    epochs=epochs,
                    validation_data=validation_shares,
                    steps_per_epoch=steps_per_epoch,
                    callbacks=callback_list,
                    verbose=verbose,
                )
            metrics = _fit_metrics(model, history, run_dir, monitor, strategy, start)
            metrics.update(
                _held_out(model, history, run_dir, validation_data, test_data, batch_size, chief)
            )
        _forget_compiled_steps(model)
        if chief:
            _atomic.write_json(os.path.join(run_dir, run_files.METRICS_FILE), metrics)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        if lock:
            run_lock.release(lock)
    return RunResult(run_dir, model, history.rows, metrics)


def _forget_compiled_steps(model) -> None:
    """`fit_run` step 7: the returned model's train and test steps, traced without the loss's
    in-step label check (`losses.labels_checked_upstream`), are dropped, so that a later `fit`
    or `evaluate` on data `fit_run` did not check traces them again with it."""
    model.train_function = None
    model.test_function = None


def _process_shares(x, validation_data, batch_size):
    """`fit_run` step 4b: with several JAX processes, each process's share of every batch of
    the training stream `x` (a dataset) and of `validation_data` (arrays batched at
    `batch_size` first), as `jax_cluster.process_share` cuts them; else both unchanged."""
    if jax_cluster.process_count() == 1:
        return x, validation_data
    if isinstance(validation_data, tuple):
        import tensorflow as tf

        slices = tf.data.Dataset.from_tensor_slices(validation_data)
        validation_data = slices.batch(batch_size or 32)
    if validation_data is not None:
        validation_data = jax_cluster.process_share(validation_data, "validation_data")
    return jax_cluster.process_share(x, "train_data"), validation_data


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
    history = callbacks.HistoryCSV(os.path.join(run_dir, run_files.HISTORY_FILE), write=chief)
    callback_list = [
        _RequireSteps(),  # first: raises before any other callback writes the empty epoch
        history,
        callbacks.ModelSnapshots(
            run_dir, monitor=monitor, write=chief, scratch_dir=scratch, select=select
        ),
        callbacks.LearningCurvePlot(
            history,
            os.path.join(run_dir, run_files.PLOT_FILE),
            write=chief,
            title=f"{os.path.basename(run_dir)}: learning curves",
            monitor=monitor if select == "best" else None,  # marks the kept epoch
        ),
        keras.callbacks.TensorBoard(os.path.join(scratch or run_dir, run_files.LOG_DIR)),
        *extra_callbacks,
        callbacks.AtomicBackupAndRestore(run_directory.backup_dir(run_dir, strategy, chief)),
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


def _fit_metrics(model, history, run_dir, monitor, strategy, start) -> dict:
    """`fit_run` step 5: what the fit did (epochs, steps, the kept epoch, wall time)."""
    return {
        "epochs": len(history.rows),
        "steps": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        "monitor": monitor,
        "best": _atomic.read_json(os.path.join(run_dir, run_files.BEST_RECORD)),
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
        best = _atomic.read_json(os.path.join(run_dir, run_files.BEST_RECORD))
        with jax_cluster.without_distribution():  # the chief alone, on its own devices
            metrics["test"] = evaluate_saved(
                os.path.join(run_dir, run_files.BEST_MODEL), test_data, batch_size=batch_size
            )
        metrics["test"]["epoch"] = (best or {}).get("epoch")
        metrics["held_out"] = metrics["test"]
    return metrics


def _held_out_metrics(rows, model, validation_data, batch_size) -> dict:
    """The last epoch's validation logs (the final model on the held-out data), or a fresh
    evaluation when there are none."""
    last = rows[-1] if rows else {}
    logged = {key[len("val_") :]: value for key, value in last.items() if key.startswith("val_")}
    return logged or evaluate(model, validation_data, batch_size=batch_size)


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
    model.compile(loss=losses.loss(), metrics=["accuracy"])  # raises on bad labels
    results = evaluate(model, data, batch_size=batch_size)
    return {"model": os.path.basename(model_file), **results, "loss_name": TEST_LOSS}


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
        config = run_directory.read_run_config(run_dir)
    config = config or RunConfig()
    if config.remat:  # before the strategy or plan loads or probes anything on the backend
        dispatch.prefer_memory_schedule()
    if strategy is None:
        strategy = distribute.resolve_strategy(config.strategy)
    plan = plan_run(config, strategy)
    if distribute.is_chief(strategy):
        run_directory.check_run_dir(run_dir, resume)
    policy = keras.config.dtype_policy()
    try:
        precision.set_mixed_precision(plan.precision.policy)
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
        source = precision.with_dtype_policy(plan.source_model, plan.precision.policy)
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
            "strategy": distribute.strategy_name(strategy),
            "num_replicas": distribute.num_replicas(strategy),
        },
        "versions": {
            "keras_vit": __version__,
            "keras": keras.__version__,
            "tensorflow": tf.__version__,
        },
    }
