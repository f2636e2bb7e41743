"""keras_vit.train.callbacks: LearningCurvePlot's figure options and redraw schedule;
ModelSnapshots' best/last files; fit_run's optimizer built before the first step.

ModelSnapshots is driven directly with scripted logs, so the best epoch (1) is neither the
first nor the last; the reference is the logits of the weights set before each epoch end.
"""

from __future__ import annotations

import itertools
import json
import types

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import keras_vit
from keras_vit.checkpoints import load_weights
from keras_vit.train import callbacks, learning_curves, losses, runs
from keras_vit.train.callbacks import ModelSnapshots
from tests.conftest import TINY_VIT
from tests.model_helpers import random_images
from tests.output_checks import assert_outputs_close, randomize_weights


def test_learning_curve_plot_reads_smoothing_and_classes_from_the_model(
    tmp_path, monkeypatch, tiny_vit_kwargs
):
    drawn = []
    monkeypatch.setattr(
        learning_curves, "plot_learning_curves", lambda rows, path, **o: drawn.append(o)
    )
    model = keras_vit.ViT(**tiny_vit_kwargs)
    model.compile(optimizer="sgd", loss=losses.loss(label_smoothing=0.1))
    history = callbacks.HistoryCSV(tmp_path / "history.csv")
    plot = callbacks.LearningCurvePlot(
        history, tmp_path / "curves.png", title="run-7: learning curves", monitor="loss"
    )
    x = np.zeros((4, 32, 32, 3), "float32")
    model.fit(x, np.arange(4), epochs=1, batch_size=4, callbacks=[history, plot], verbose=0)
    assert drawn == [
        {
            "title": "run-7: learning curves",
            "monitor": "loss",
            "label_smoothing": 0.1,
            "num_classes": 10,
        }
    ]


SCRIPTED_ACCURACY = [0.5, 0.9, 0.3]  # best: epoch 1; last: epoch 2


@pytest.mark.parametrize(("select", "kept_epoch"), [("best", 1), ("last", 2)])
def test_best_and_last_files_hold_their_epochs_weights(tmp_path, select, kept_epoch):
    model = keras_vit.ViT(**TINY_VIT)
    snapshots = ModelSnapshots(tmp_path, monitor="val_accuracy", select=select)
    snapshots.set_model(model)
    snapshots.on_train_begin()
    x = random_images(np.random.default_rng(0), 4, 32, 32)
    logits = []
    for epoch, accuracy in enumerate(SCRIPTED_ACCURACY):
        randomize_weights(model, seed=epoch)  # "training" between epoch ends
        logits.append(model.predict(x, verbose=0))
        snapshots.on_epoch_end(epoch, {"val_accuracy": accuracy})
    assert json.loads((tmp_path / "best.json").read_text()) == {
        "epoch": kept_epoch,
        "monitor": "val_accuracy",
        "value": SCRIPTED_ACCURACY[kept_epoch],
        "select": select,
    }
    for stem, epoch in (("best", kept_epoch), ("last", 2)):
        loaded = runs.load_model(tmp_path / f"{stem}.keras")
        assert_outputs_close(loaded.predict(x, verbose=0), logits[epoch], atol=1e-6, what=stem)
        fresh = keras_vit.ViT(**TINY_VIT)
        load_weights(fresh, tmp_path / f"{stem}.npz")
        assert_outputs_close(fresh.predict(x, verbose=0), logits[epoch], atol=1e-6, what=stem)


def test_select_last_keeps_an_epoch_whose_monitored_value_is_nan(tmp_path):
    snapshots = ModelSnapshots(tmp_path, monitor="val_loss", select="last")
    snapshots.set_model(keras_vit.ViT(**TINY_VIT))
    snapshots.on_train_begin()
    snapshots.on_epoch_end(0, {"val_loss": 0.5})
    snapshots.on_epoch_end(1, {"val_loss": float("nan")})
    assert json.loads((tmp_path / "best.json").read_text())["epoch"] == 1


def test_an_unknown_select_is_refused_naming_the_value(tmp_path):
    with pytest.raises(ValueError, match=r"select.*'first'"):
        ModelSnapshots(tmp_path, select="first")
    with pytest.raises(ValueError, match=r"select.*'first'"):
        runs.fit_run(
            tmp_path / "run",
            lambda: None,
            (np.zeros((2, 32, 32, 3)), [0, 1]),
            epochs=1,
            select="first",
        )
    assert not (tmp_path / "run").exists()  # refused before any file is written


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@given(
    durations=st.lists(st.floats(0.0, 40.0), min_size=1, max_size=25),
    interval=st.sampled_from([0.0, 5.0, 20.0, 30.0]),
)
def test_learning_curves_are_redrawn_by_the_interval_and_complete_at_the_end(durations, interval):
    clock = FakeClock()
    drawn = []  # (clock time, rows drawn)
    history = types.SimpleNamespace(rows=[])
    plot = callbacks.LearningCurvePlot(history, "unused.png", min_interval_s=interval)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(callbacks.time, "monotonic", clock)
        patch.setattr(
            learning_curves,
            "plot_learning_curves",
            lambda rows, path, **o: drawn.append((clock.now, len(rows))),
        )
        patch.setattr(callbacks, "_label_smoothing", lambda model: 0.0)
        plot.set_model(types.SimpleNamespace(output_shape=(None, 10)))
        ends = []
        for epoch, seconds in enumerate(durations):
            clock.now += seconds
            history.rows.append({"epoch": epoch})
            plot.on_epoch_end(epoch)
            ends.append(clock.now)
        during_training = list(drawn)
        plot.on_train_end()
    assert during_training[0] == (ends[0], 1)  # the first epoch end draws
    times = [when for when, _ in during_training]
    assert all(later - earlier >= interval for earlier, later in itertools.pairwise(times))
    # no epoch end with the interval elapsed since the previous drawing went undrawn
    last = ends[0]
    for epoch, end in enumerate(ends[1:], start=2):
        if end - last >= interval:
            assert (end, epoch) in during_training
            last = end
    assert drawn[-1][1] == len(durations)  # after training: every epoch is on the figure
    assert len(drawn) <= len(durations)  # never two drawings of one state


def test_fit_run_builds_the_optimizer_before_the_first_step(tmp_path):
    seen = []

    class OptimizerAtStart(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen.append((self.model.optimizer.built, len(self.model.optimizer.variables)))

    def build():
        model = keras_vit.ViT(**TINY_VIT)
        model.compile(optimizer="adam", loss=losses.loss(), metrics=["accuracy"])
        return model

    x = random_images(np.random.default_rng(0), 8, 32, 32)
    runs.fit_run(
        tmp_path / "run",
        build,
        (x, np.arange(8) % 10),
        epochs=1,
        batch_size=4,
        verbose=0,
        extra_callbacks=[OptimizerAtStart()],
    )
    weights = len(keras_vit.ViT(**TINY_VIT).trainable_variables)
    # Adam: its iteration counter and learning rate, then two slots per trainable weight
    assert seen == [(True, 2 + 2 * weights)]


def _compiled_tiny(optimizer, *, run_eagerly=False, **overrides):
    model = keras_vit.ViT(**{**TINY_VIT, **overrides})
    model.compile(optimizer=optimizer, loss=losses.loss(), run_eagerly=run_eagerly)
    return model


@given(
    optimizer=st.sampled_from(["adam", "sgd", "adamw"]),
    dropout_rate=st.sampled_from([0.0, 0.1]),
    drop_path_rate=st.sampled_from([0.0, 0.2]),
    steps=st.integers(1, 3),
)
def test_a_backup_restores_weights_optimizer_and_random_state(
    tmp_path_factory, optimizer, dropout_rate, drop_path_rate, steps
):
    backup_dir = tmp_path_factory.mktemp("backup")
    options = {"dropout_rate": dropout_rate, "drop_path_rate": drop_path_rate}
    # eager steps: the same variables move as in a traced step, without tracing one per example
    model = _compiled_tiny(optimizer, run_eagerly=True, **options)
    x = random_images(np.random.default_rng(steps), 4, 32, 32)
    for _ in range(steps):  # moves the weights, the optimizer's slots and the random state
        model.train_on_batch(x, np.arange(4))
    saved = {
        group: [np.asarray(v).copy() for v in variables]
        for group, variables in callbacks.backup_variables(model).items()
    }
    assert saved["random"] or not (dropout_rate or drop_path_rate)
    backup = callbacks.AtomicBackupAndRestore(backup_dir)
    backup.set_model(model)
    backup.on_epoch_end(0)

    fresh = _compiled_tiny(optimizer, **options)
    restore = callbacks.AtomicBackupAndRestore(backup_dir)
    restore.set_model(fresh)
    restore.on_train_begin()
    assert fresh._initial_epoch == 1
    restored = callbacks.backup_variables(fresh)
    for group, values in saved.items():
        assert len(restored[group]) == len(values), group
        for variable, value in zip(restored[group], values, strict=True):
            np.testing.assert_array_equal(np.asarray(variable), value, err_msg=variable.path)
    assert int(np.asarray(fresh.optimizer.iterations)) == steps


@pytest.mark.parametrize("other", [{"hidden_dim": 16, "num_heads": 2}, {"num_layers": 1}])
def test_a_backup_of_another_model_is_refused_by_name(tmp_path, other):
    model = _compiled_tiny("adam")
    model.optimizer.build(model.trainable_variables)
    backup = callbacks.AtomicBackupAndRestore(tmp_path)
    backup.set_model(model)
    backup.on_epoch_end(0)
    restore = callbacks.AtomicBackupAndRestore(tmp_path)
    restore.set_model(_compiled_tiny("adam", **other))
    with pytest.raises(callbacks.BackupError, match=r"epoch-00001\.state\.npz"):
        restore.on_train_begin()
