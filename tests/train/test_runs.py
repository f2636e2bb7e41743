"""Tests of keras_vit.train.runs (run directories, resume after SIGKILL) and of
keras_vit.train.run_plan."""

import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import types

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import keras_vit
from keras_vit import _atomic
from keras_vit.checkpoints import load_weights, save_npz
from keras_vit.spec import run_files
from keras_vit.train import (
    epoch_streams,
    losses,
    run_config,
    run_directory,
    run_plan,
    runs,
    training,
)
from tests.output_checks import assert_outputs_close, randomize_weights
from tests.process_helpers import kill_all, sigkill, wait_until

HELPERS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "helpers")


def load_helper(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HELPERS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


killable = load_helper("killable_run")
small_disk = load_helper("small_disk").small_disk


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# --- a complete run ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "complete"
    recorder = killable.EpochWeights()
    result = killable.run(run_dir, slow=False, callbacks=[recorder])
    result.epoch_weights = recorder.weights
    return run_dir, result


def predictions_of(weights, x):
    """Logits on `x` of a fresh killable model given `weights` (the test's own reference)."""
    model = killable.build()
    model.set_weights(weights)
    return model.predict(x, verbose=0)


def test_run_directory_layout(finished_run):
    run_dir, result = finished_run
    names = set(os.listdir(run_dir))
    expected = {"config.json", "history.csv", "learning_curves.png", "logs", "metrics.json"}
    expected |= {"best.keras", "best.npz", "best.json", "last.keras", "last.npz"}
    assert expected <= names
    assert "backup" not in names  # removed when the run completes
    assert not [name for name in names if name.startswith(".")], names  # no temp files
    assert json.loads((run_dir / "config.json").read_text()) == {"helper": "killable_run"}
    with open(run_dir / "learning_curves.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    events = [name for _, _, files in os.walk(run_dir / "logs") for name in files]
    assert any(name.startswith("events.out.tfevents") for name in events)
    assert result.model is not None


def test_history_and_metrics_match_the_schedule(finished_run):
    run_dir, result = finished_run
    rows = read_csv(run_dir / "history.csv")
    assert [int(row["epoch"]) for row in rows] == list(range(killable.EPOCHS))
    steps = [int(row["steps"]) for row in rows]
    assert steps == [killable.STEPS_PER_EPOCH * (e + 1) for e in range(killable.EPOCHS)]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["epochs"] == killable.EPOCHS
    assert metrics["steps"] == killable.EPOCHS * killable.STEPS_PER_EPOCH
    # The held-out metrics are those of the last epoch's model on the validation data.
    assert metrics["held_out"]["accuracy"] == pytest.approx(float(rows[-1]["val_accuracy"]))
    assert metrics["held_out"]["loss"] == pytest.approx(float(rows[-1]["val_loss"]), rel=1e-5)
    # The kept model (default select="last") is the last epoch's, with its val_accuracy.
    assert metrics["best"] == {
        "epoch": killable.EPOCHS - 1,
        "monitor": "val_accuracy",
        "value": pytest.approx(float(rows[-1]["val_accuracy"])),
        "select": "last",
    }


@pytest.mark.parametrize("select", ["last", "best"])
def test_test_metrics_are_those_of_best_keras_without_label_smoothing(tmp_path, select):
    """metrics.json "test": accuracy and plain cross-entropy of the kept model, computed
    here in NumPy from its logits (the run itself trains with label smoothing 0.3); the kept
    epoch is the last one, or the first with the highest val_accuracy in history.csv. The
    validation labels are shifted by one class, so that the validation accuracy falls as the
    model learns and the two rules keep different epochs."""
    keras.utils.set_random_seed(0)
    x, y = killable.data()

    def build():
        model = killable.build()
        model.compile(optimizer="adam", loss=losses.loss(0.3), metrics=["accuracy"])
        return model

    result = runs.fit_run(
        tmp_path / "run", build, (x, y), epochs=3, batch_size=8,
        validation_data=(x[:16], (y[:16] + 1) % 10), test_data=(x[16:], y[16:]), verbose=0,
        select=select,
    )  # fmt: skip
    accuracies = [float(row["val_accuracy"]) for row in read_csv(tmp_path / "run/history.csv")]
    assert int(np.argmax(accuracies)) != len(accuracies) - 1, accuracies  # the rules differ
    kept = len(accuracies) - 1 if select == "last" else int(np.argmax(accuracies))
    assert result.metrics["best"]["epoch"] == kept
    logits = runs.load_model(tmp_path / "run" / "best.keras").predict(x[16:], verbose=0)
    assert np.abs(logits).max() > 0  # trained, not the zero head
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    test = result.metrics["test"]
    assert test["accuracy"] == pytest.approx(np.mean(logits.argmax(-1) == y[16:]))
    assert test["loss"] == pytest.approx(-np.mean(log_p[np.arange(len(log_p)), y[16:]]), rel=1e-5)
    assert test["epoch"] == kept and test["model"] == "best.keras"
    assert result.metrics["held_out"] == test


def test_last_model_files_hold_the_trained_weights(finished_run):
    run_dir, result = finished_run
    x, _ = killable.data()
    expected = predictions_of(result.epoch_weights[killable.EPOCHS - 1], x[:8])
    np.testing.assert_allclose(result.model.predict(x[:8], verbose=0), expected, atol=1e-6)
    from_keras = runs.load_model(run_dir / "last.keras")
    assert_outputs_close(from_keras.predict(x[:8], verbose=0), expected, atol=1e-6)
    fresh = killable.build()
    load_weights(fresh, run_dir / "last.npz")
    assert_outputs_close(fresh.predict(x[:8], verbose=0), expected, atol=1e-6)


def test_best_model_files_hold_the_best_epochs_weights(finished_run):
    """best.keras / best.npz against the weights recorded at the end of best.json's epoch."""
    run_dir, result = finished_run
    x, _ = killable.data()
    best_epoch = json.loads((run_dir / "best.json").read_text())["epoch"]
    expected = predictions_of(result.epoch_weights[best_epoch], x[:8])
    best = runs.load_model(run_dir / "best.keras")
    assert_outputs_close(best.predict(x[:8], verbose=0), expected, atol=1e-6)
    fresh = killable.build()
    load_weights(fresh, run_dir / "best.npz")
    assert_outputs_close(fresh.predict(x[:8], verbose=0), expected, atol=1e-6)


def test_resume_of_a_complete_run_returns_stored_results(finished_run):
    run_dir, result = finished_run
    before = (run_dir / "history.csv").read_text()
    again = killable.run(run_dir, resume=True, slow=False)
    assert (run_dir / "history.csv").read_text() == before
    assert again.metrics == json.loads((run_dir / "metrics.json").read_text())
    assert len(again.history) == killable.EPOCHS


def test_existing_run_directory_needs_resume(finished_run, tmp_path):
    run_dir, _ = finished_run
    with pytest.raises(run_directory.RunDirError, match="pass --resume"):
        run_directory.check_run_dir(run_dir, resume=False)
    with pytest.raises(run_directory.RunDirError, match="not a run directory"):
        run_directory.check_run_dir(tmp_path / "missing", resume=True)
    run_directory.check_run_dir(tmp_path / "new", resume=False)  # a new folder is fine


# --- SIGKILL mid-epoch, then resume --------------------------------------------------------


# Resumed vs uninterrupted: the same float32 ops on the same data in another process; what
# separates them is round-off only (multi-threaded reductions), not a different batch or mask.
RESUME_RTOL, RESUME_ATOL = 1e-5, 1e-6


def test_run_killed_mid_epoch_resumes_to_the_same_steps(tmp_path):
    run_dir = tmp_path / "killed"
    process = subprocess.Popen(
        [sys.executable, os.path.join(HELPERS, "killable_run.py"), str(run_dir)],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(  # epoch 0 done, 1 started
            (run_dir / "backup" / "state.json").exists,
            [process],
            "the run never finished its first epoch",
        )
        # A second writer on the live run is refused at once (the run's lock file).
        with pytest.raises(run_directory.RunDirError, match=f"in use by process {process.pid}"):
            killable.run(run_dir, resume=True, slow=False)
        time.sleep(2 * killable.SLEEP_S)  # a couple of batches into the next epoch
        sigkill(process)
    finally:
        kill_all([process])
    state = json.loads((run_dir / "backup" / "state.json").read_text())
    assert 1 <= state["epoch"] < killable.EPOCHS, "killed too late to test resuming"
    assert not (run_dir / "metrics.json").exists()
    killed_rows = read_csv(run_dir / "history.csv")
    runs.load_model(run_dir / "last.keras")  # the files left behind are valid
    # The backup, read independently of the resume (NumPy's reader, the names the backup
    # documents): model weights and optimizer state.
    with np.load(run_dir / "backup" / state["state"], allow_pickle=False) as saved:
        groups = {
            group: [saved[name] for name in sorted(saved.files) if name.startswith(group + "/")]
            for group in ("weights", "optimizer", "random")
        }
    backup = killable.build()
    backup.set_weights(groups["weights"])
    backup.optimizer.build(backup.trainable_variables)
    steps = [int(v) for v in groups["optimizer"] if v.dtype == np.int64 and v.shape == ()]
    assert state["steps"] == state["epoch"] * killable.STEPS_PER_EPOCH
    assert state["steps"] in steps  # the optimizer's step counter

    assert json.loads((run_dir / ".lock").read_text())["pid"] == process.pid  # now stale
    # what a kill mid-write leaves (atomic_path's temporary names), removed by the resume
    leftovers = [
        run_dir / ".last.keras.k1ll3d_x.tmp.keras",
        run_dir / "backup/.state.json.ab_12cde.tmp.json",
    ]
    for path in leftovers:
        path.write_text("partial")
    start = killable.StartingPoint()
    # takes the stale lock over
    result = killable.run(run_dir, resume=True, slow=False, callbacks=[start])
    assert not any(path.exists() for path in leftovers)

    # The first resumed step starts from the backup's weights and optimizer state (Adam's
    # moments and step count), not from a fresh model.
    x, _ = killable.data()
    assert_outputs_close(
        predictions_of(start.weights, x[:8]),
        backup.predict(x[:8], verbose=0),
        atol=0,
        what="logits of the resumed starting point",
    )
    for got, expected in zip(start.weights, backup.get_weights(), strict=True):
        np.testing.assert_array_equal(got, expected)
    expected_optimizer = groups["optimizer"]
    assert len(start.optimizer_variables) == len(expected_optimizer)
    for got, expected in zip(start.optimizer_variables, expected_optimizer, strict=True):
        np.testing.assert_array_equal(got, expected)

    assert not (run_dir / ".lock").exists()
    rows = read_csv(run_dir / "history.csv")
    assert [int(row["epoch"]) for row in rows] == list(range(killable.EPOCHS))
    assert rows[: state["epoch"]] == killed_rows[: state["epoch"]]  # kept as they were
    assert [int(row["steps"]) for row in rows] == [
        killable.STEPS_PER_EPOCH * (e + 1) for e in range(killable.EPOCHS)
    ]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == killable.EPOCHS * killable.STEPS_PER_EPOCH
    assert not (run_dir / "backup").exists()
    reloaded = runs.load_model(run_dir / "last.keras")
    np.testing.assert_allclose(
        reloaded.predict(x[:8], verbose=0), result.model.predict(x[:8], verbose=0), atol=1e-6
    )

    # The same run uninterrupted (same seed, same process start): the resumed epochs train
    # on the same batches (epoch_streams.epoch_ordered_batches) with the same dropout and
    # stochastic-depth masks (the backup's random state), so history and weights agree.
    keras.utils.set_random_seed(0)  # as killable_run.py's __main__ does
    reference = killable.run(tmp_path / "uninterrupted", slow=False)
    reference_rows = read_csv(tmp_path / "uninterrupted" / "history.csv")
    for row, expected in zip(rows, reference_rows, strict=True):
        for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
            np.testing.assert_allclose(
                float(row[key]), float(expected[key]), rtol=RESUME_RTOL, err_msg=(row, key)
            )
    for got, expected in zip(
        result.model.get_weights(), reference.model.get_weights(), strict=True
    ):
        np.testing.assert_allclose(got, expected, rtol=RESUME_RTOL, atol=RESUME_ATOL)


# --- atomic writes -------------------------------------------------------------------------


def test_failed_write_keeps_the_previous_file(tmp_path):
    path = tmp_path / "metrics.json"
    _atomic.write_json(path, {"accuracy": 0.5})
    with pytest.raises(RuntimeError):
        with _atomic.atomic_path(path) as tmp:
            with open(tmp, "w") as f:
                f.write('{"accura')  # a half-written file...
            raise RuntimeError("killed")  # ...then the writer dies
    assert json.loads(path.read_text()) == {"accuracy": 0.5}
    assert os.listdir(tmp_path) == ["metrics.json"]


def test_temp_path_keeps_the_suffix_keras_needs(tmp_path):
    with _atomic.atomic_path(tmp_path / "best.keras") as tmp:
        assert tmp.endswith(".keras") and os.path.dirname(tmp) == str(tmp_path)
        open(tmp, "w").close()
    with _atomic.atomic_path(tmp_path / "epoch-00001.weights.h5") as tmp:
        assert tmp.endswith(".weights.h5")
        open(tmp, "w").close()
    assert sorted(os.listdir(tmp_path)) == ["best.keras", "epoch-00001.weights.h5"]


# --- run plans: everything checked before work ---------------------------------------------


def tiny_recipe(**overrides):
    values = dict(hidden_dim=16, num_heads=2, mlp_dim=32, num_layers=1, image_size=16)
    return training.TrainConfig(**{**values, **overrides})


ONE_REPLICA = types.SimpleNamespace(num_replicas_in_sync=1)


def test_plan_resolves_the_default_run():
    plan = run_plan.plan_run(run_config.RunConfig(), ONE_REPLICA)
    recipe = training.TrainConfig()
    assert plan.info.name == "mnist" and plan.info.num_classes == 10
    assert plan.channels == 1
    assert plan.image_size == (recipe.image_size, recipe.image_size)
    assert plan.steps_per_epoch == plan.num_train_examples // recipe.batch_size
    # The hybrid: BiT ResNet root (stride 4) and 1x1 patches of its 7x7 map = 49 tokens.
    assert plan.model_kwargs["patch_size"] == 1 and plan.model_kwargs["resnet_stages"] == []
    # Selection on a tenth of train (never trained on); the 1,000 test images stay unseen.
    assert (plan.train_split, plan.config.validation_split) == ("train[:90%]", "train[90%:]")
    assert (plan.num_train_examples, plan.num_validation_examples) == (3600, 400)
    assert plan.test_split == "test"


def test_run_trains_on_the_complement_of_a_carved_validation_split(monkeypatch):
    """`--validation-split train[90%:]` must not train on the held-out tenth."""
    from keras_vit import data

    calls = []
    monkeypatch.setattr(
        data, "load", lambda source, split, **kw: calls.append((split, kw)) or _Repeatable()
    )
    config = run_config.RunConfig(
        recipe=tiny_recipe(), validation_split="train[-50:]", split_seed=4
    )
    runs._datasets(run_plan.plan_run(config, ONE_REPLICA))
    splits = {split: (kw["training"], kw["split_seed"]) for split, kw in calls}
    assert splits == {"train[:-50]": (True, 4), "train[-50:]": (False, 4), "test": (False, 4)}


class _Repeatable:
    def repeat(self):
        return self


def test_plan_named_variant():
    config = run_config.RunConfig(model="Ti/16", recipe=tiny_recipe(image_size=32))
    kwargs = run_plan.plan_run(config, ONE_REPLICA).model_kwargs
    assert (kwargs["hidden_dim"], kwargs["num_heads"], kwargs["num_layers"]) == (192, 3, 12)
    assert run_plan.named_variant("vit_ti16") == run_plan.named_variant("Ti/16")
    tiny = run_plan.plan_run(run_config.RunConfig(model="tiny"), ONE_REPLICA).model_kwargs
    assert tiny == run_plan.plan_run(run_config.RunConfig(), ONE_REPLICA).model_kwargs


@pytest.mark.parametrize(
    "config, strategy, message",
    [
        (run_config.RunConfig(recipe=tiny_recipe(dataset="mnits")), ONE_REPLICA, "mnits"),
        (run_config.RunConfig(model="Q/7"), ONE_REPLICA, "Unknown model 'Q/7'"),
        (
            run_config.RunConfig(recipe=tiny_recipe(image_size=30), patch_size=4),
            ONE_REPLICA,
            "not divisible by the patch size",
        ),
        (
            run_config.RunConfig(recipe=tiny_recipe(batch_size=30)),
            types.SimpleNamespace(num_replicas_in_sync=4),
            "multiple of the number of replicas (4",
        ),
        (
            run_config.RunConfig(task="finetune", weights="/nonexistent/best.npz"),
            ONE_REPLICA,
            "Weights file not found: /nonexistent/best.npz",
        ),
        (
            run_config.RunConfig(recipe=tiny_recipe(), validation_split="validation"),
            ONE_REPLICA,
            "no split 'validation'",
        ),
        (
            run_config.RunConfig(recipe=tiny_recipe(), validation_split="train"),
            ONE_REPLICA,
            "would select on images the model trains on",
        ),
        (
            run_config.RunConfig(recipe=tiny_recipe(), validation_split="train[10%:20%]"),
            ONE_REPLICA,
            "would select on images the model trains on",
        ),
    ],
)
def test_plan_rejects_bad_configs(config, strategy, message):
    with pytest.raises(run_config.ConfigError) as info:
        run_plan.plan_run(config, strategy)
    assert message in str(info.value)


def test_run_config_round_trips_through_json():
    config = run_config.RunConfig(
        task="finetune",
        recipe=training.FinetuneConfig(steps=7),
        weights="run/best.npz",
        shots_per_class=10,
    )
    again = run_config.RunConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config


def test_run_config_keeps_the_last_epoch_and_stored_runs_their_best():
    assert run_config.RunConfig().select == "last"
    assert run_config.RunConfig(select="best").select == "best"
    stored = run_config.RunConfig().to_dict()
    del stored["select"]  # config.json of a run from before the field
    assert run_config.RunConfig.from_dict(stored).select == "best"
    with pytest.raises(run_config.ConfigError, match=r"select 'first'.*\['last', 'best'\]"):
        run_config.RunConfig(select="first")


def test_architecture_read_from_an_official_npz(tmp_path, tiny_vit_kwargs):
    model = randomize_weights(keras_vit.ViT(**tiny_vit_kwargs))
    save_npz(model, tmp_path / "model.npz")
    from keras_vit.checkpoints import read_npz

    kwargs = run_plan.vit_kwargs_from_npz(read_npz(tmp_path / "model.npz"))
    expected = {**tiny_vit_kwargs, "channels": 3, "pooling": "token", "representation_size": None}
    assert kwargs == expected
    loaded = run_plan.load_source_model(tmp_path / "model.npz")
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    assert_outputs_close(loaded.predict(images, verbose=0), model.predict(images, verbose=0))


# --- disk full -----------------------------------------------------------------------------


def test_disk_full_mid_run_keeps_the_last_finished_epoch(tmp_path):
    """600 KiB hold epoch 1's files but not all of epoch 2's (last.keras and its temporary
    copy, the backup with its RNG state, history.csv): the run stops with WriteError naming
    the run file that did not fit (which one depends on the files' sizes); epoch 1's files
    are intact and agree."""
    with small_disk(tmp_path / "disk", 600) as disk:
        run_dir = disk / "run"
        with pytest.raises(_atomic.WriteError) as info:
            killable.run(run_dir, slow=False)
        assert os.path.commonpath([info.value.filename, str(run_dir)]) == str(run_dir)
        assert "No space left on device" in str(info.value)
        names = [name for _, _, files in os.walk(run_dir) for name in files]
        assert not [name for name in names if ".tmp" in name], names  # no temporary file left
        assert not (run_dir / "metrics.json").exists()
        rows = read_csv(run_dir / "history.csv")
        assert len(rows) >= 1
        x, _ = killable.data()
        from_keras = runs.load_model(run_dir / "last.keras").predict(x[:8], verbose=0)
        fresh = killable.build()
        load_weights(fresh, run_dir / "last.npz")
        np.testing.assert_allclose(fresh.predict(x[:8], verbose=0), from_keras, atol=1e-6)
        runs.load_model(run_dir / "best.keras")
        state = json.loads((run_dir / "backup" / "state.json").read_text())
        # history.csv may hold the failed epoch's row; resuming drops it.
        assert state["epoch"] in (len(rows), len(rows) - 1)
        shutil.copytree(run_dir, tmp_path / "moved")  # more space: the run continues
    result = killable.run(tmp_path / "moved", resume=True, slow=False)
    assert result.metrics["steps"] == killable.EPOCHS * killable.STEPS_PER_EPOCH
    rows = read_csv(tmp_path / "moved" / "history.csv")
    assert [int(row["epoch"]) for row in rows] == list(range(killable.EPOCHS))


def test_epoch_order_is_a_function_of_seed_and_epoch():
    """Epoch e's batches are the same whether the stream starts at epoch 0 or at e; every
    epoch is a permutation (the last batch partial), and epochs differ."""
    x = np.arange(10, dtype="float32")[:, None] * 10
    y = np.arange(10)

    def epochs_of(first, seed=3):
        dataset, steps = epoch_streams.epoch_ordered_batches(x, y, 4, first, 3, seed)
        batches = [labels.numpy() for _, labels in dataset]
        assert steps == 3 and len(batches) == steps * (3 - first)
        assert [len(b) for b in batches[:steps]] == [4, 4, 2]
        return [np.concatenate(batches[i : i + steps]) for i in range(0, len(batches), steps)]

    from_start, resumed = epochs_of(0), epochs_of(2)
    for order in from_start:
        assert sorted(order) == list(range(10))
    np.testing.assert_array_equal(resumed[0], from_start[2])
    assert len({tuple(order) for order in from_start}) == 3
    assert [tuple(o) for o in epochs_of(0, seed=4)] != [tuple(o) for o in from_start]
    dataset, _ = epoch_streams.epoch_ordered_batches(x, y, 4, 0, 1, 3)
    images, labels = next(iter(dataset))
    np.testing.assert_array_equal(images.numpy()[:, 0], labels.numpy() * 10)  # pairs kept


def test_arrays_with_steps_per_epoch_are_refused_before_work_starts(tmp_path):
    x, y = killable.data()
    with pytest.raises(ValueError, match="steps_per_epoch=3"):
        runs.fit_run(tmp_path / "run", killable.build, (x, y), epochs=1, steps_per_epoch=3)
    assert not (tmp_path / "run").exists()


def assert_same_run(resumed, reference):
    """The resumed run's epochs (loss, accuracy, val_loss) and final weights equal the
    uninterrupted run's within RESUME_RTOL / RESUME_ATOL."""
    for row, expected in zip(resumed.history, reference.history, strict=True):
        assert row["epoch"] == expected["epoch"]
        for key in ("loss", "accuracy", "val_loss"):
            np.testing.assert_allclose(
                row[key], expected[key], rtol=RESUME_RTOL, err_msg=(row["epoch"], key)
            )
    for got, expected in zip(
        resumed.model.get_weights(), reference.model.get_weights(), strict=True
    ):
        np.testing.assert_allclose(got, expected, rtol=RESUME_RTOL, atol=RESUME_ATOL)


class CrashAt(keras.callbacks.Callback):
    """Raises in the middle of `epoch` (a crash that leaves the backup of epoch - 1)."""

    def __init__(self, epoch, batch):
        super().__init__()
        self.at, self.epoch = (epoch, batch), None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            raise RuntimeError("crash")


def _pipeline_run(run_dir, resume=False, callbacks=(), steps_per_epoch=None):
    """A run on keras_vit.data.load's training pipeline (seeded shuffle and random crops),
    the dataset built afresh as a restarted process would."""
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 256, (48, 16, 16, 3)).astype("uint8"), rng.integers(0, 10, 48)
    train = keras_vit.data.load((x, y), image_size=16, batch_size=8, training=True, shuffle_seed=5)
    valid = keras_vit.data.load((x[:16], y[:16]), image_size=16, batch_size=8, training=False)
    return runs.fit_run(
        run_dir, killable.build, train, epochs=killable.EPOCHS, validation_data=valid,
        resume=resume, verbose=0, extra_callbacks=list(callbacks), steps_per_epoch=steps_per_epoch,
    )  # fmt: skip


@pytest.mark.parametrize("steps", [None, 6, 4])  # 6: one pass, as `keras-vit train` gives
# it; 4: an epoch is two thirds of a pass, as `keras-vit finetune` may give it
def test_a_resumed_pipeline_run_sees_the_uninterrupted_batches(tmp_path, steps):
    """keras_vit.data.load's shuffle and crop seeds advance once per pass; the resumed run
    skips the finished passes (epoch_streams.epoch_passes), so it equals the run that was
    never interrupted."""
    keras.utils.set_random_seed(0)
    with pytest.raises(RuntimeError, match="crash"):
        _pipeline_run(tmp_path / "crashed", callbacks=[CrashAt(2, 3)], steps_per_epoch=steps)
    state = json.loads((tmp_path / "crashed" / "backup" / "state.json").read_text())
    assert state["epoch"] == 2
    resumed = _pipeline_run(tmp_path / "crashed", resume=True, steps_per_epoch=steps)
    keras.utils.set_random_seed(0)
    reference = _pipeline_run(tmp_path / "uninterrupted", steps_per_epoch=steps)
    assert_same_run(resumed, reference)


def test_train_resumed_after_a_crash_repeats_the_uninterrupted_epochs(tmp_path):
    """`runs.train` (what `keras-vit train` runs: keras_vit.data.load's shuffled, augmented
    pipeline) crashed mid-epoch 2 and resumed ends with the losses and weights of the run that
    was never interrupted. It used to hand `fit_run` an endless `repeat()` of the data, whose
    passes a resumed run cannot skip: epoch 2 then saw pass 0's batches again."""
    recipe = training.TrainConfig(
        image_size=8, batch_size=10, epochs=3, jit_compile=False, seed=4, resnet_width=8,
        resnet_groups=4, hidden_dim=16, num_heads=2, mlp_dim=32, num_layers=1,
    )  # fmt: skip
    config = runs.RunConfig(recipe=recipe, shots_per_class=5, mixed_precision="float32")
    with pytest.raises(RuntimeError, match="crash"):
        runs.train(config, tmp_path / "crashed", extra_callbacks=[CrashAt(2, 1)], verbose=0)
    resumed = runs.train(run_dir=tmp_path / "crashed", resume=True, verbose=0)
    reference = runs.train(config, tmp_path / "uninterrupted", verbose=0)
    assert [row["epoch"] for row in resumed.history] == [0, 1, 2]
    assert_same_run(resumed, reference)


@pytest.mark.parametrize(
    ("stored", "given", "expected"),
    [
        (None, None, None),  # no epoch finished yet: fit_run then takes the default
        (None, "best", "best"),
        ({"epoch": 0, "select": "last"}, None, "last"),
        ({"epoch": 0, "select": "best"}, None, "best"),
        ({"epoch": 0}, None, "best"),  # written before the choice existed
        ({"epoch": 0, "select": "last"}, "last", "last"),
        ({"epoch": 0}, "best", "best"),
    ],
)
def test_a_resumed_run_keeps_the_rule_its_best_json_records(tmp_path, stored, given, expected):
    if stored is not None:
        (tmp_path / "best.json").write_text(json.dumps(stored))
    assert run_directory.resumed_select(str(tmp_path), given) == expected


@pytest.mark.parametrize(("stored", "given"), [({"select": "best"}, "last"), ({}, "last")])
def test_resuming_with_another_select_is_refused_before_work(tmp_path, stored, given):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text("{}")
    (run_dir / "best.json").write_text(json.dumps({"epoch": 1, **stored}))
    before = sorted(os.listdir(run_dir))
    x, y = killable.data()
    with pytest.raises(
        run_directory.RunDirError, match=r"select='last'.*keeps the 'best' epoch's model"
    ):
        runs.fit_run(run_dir, killable.build, (x, y), epochs=2, batch_size=8, resume=True,
                     select=given)  # fmt: skip
    assert sorted(os.listdir(run_dir)) == before  # nothing written


# --- a stored configuration that cannot be used ----------------------------------------------


def _stored_record(**run_changes):
    record = json.loads(json.dumps({"run": run_config.RunConfig().to_dict(), "resolved": {}}))
    record["run"].update(run_changes)
    return record


def _recipe_changed(**changes):
    record = _stored_record()
    record["run"]["recipe"].update(changes)
    return record


UNUSABLE_CONFIGS = [
    (b'{"run": {', run_directory.RunDirError, "is not valid JSON"),
    (b"\xff\xfe\x00{}", run_directory.RunDirError, "is not valid JSON"),
    ([1, 2], run_directory.RunDirError, "holds a JSON list, not an object"),
    ({"resolved": {}}, run_directory.RunDirError, 'has no "run" object'),
    ({"run": "train"}, run_directory.RunDirError, 'has no "run" object'),
    (_stored_record(colour="red"), run_config.ConfigError, "field(s) ['colour']"),
    (_stored_record(recipe=[64]), run_config.ConfigError, "must be a JSON object, not list"),
    (_recipe_changed(bogus=1), run_config.ConfigError, "Unknown recipe field(s) ['bogus']"),
    (_stored_record(select="Best"), run_config.ConfigError, "Unknown select 'Best'"),
    (_stored_record(task="pretrain"), run_config.ConfigError, "Unknown task 'pretrain'"),
    (_recipe_changed(learning_rate=-1.0), run_config.ConfigError, "learning_rate=-1.0"),
    (_recipe_changed(epochs=0), run_config.ConfigError, "epochs=0"),
]


@pytest.mark.parametrize("content, error, message", UNUSABLE_CONFIGS)
def test_an_unusable_stored_config_is_refused_naming_the_file_before_work(
    tmp_path, content, error, message
):
    """A hand-edited or damaged config.json: one error naming the file and what is wrong
    (it was a KeyError, TypeError or JSONDecodeError traceback), and nothing written."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = run_dir / run_files.CONFIG_FILE
    path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    for attempt in (run_directory.read_run_config, lambda d: runs.train(run_dir=d, resume=True)):
        with pytest.raises(error) as info:
            attempt(run_dir)
        assert message in str(info.value) and repr(str(path)) in str(info.value)
    assert os.listdir(run_dir) == [run_files.CONFIG_FILE]


def test_a_stored_config_reads_back_as_the_config_it_was():
    """The neighbour that must keep working: the record `to_dict` writes, and one stored
    before `select` existed (read as "best", the rule such runs kept)."""
    config = run_config.RunConfig(select="last", recipe=training.TrainConfig(epochs=3))
    record = json.loads(json.dumps(config.to_dict()))
    assert run_config.RunConfig.from_dict(record) == config
    del record["select"]
    assert run_config.RunConfig.from_dict(record).select == "best"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    field=st.sampled_from(sorted(run_config.RunConfig().to_dict()["recipe"])),
    value=JSON_VALUES,
)
def test_any_json_value_in_a_stored_recipe_reads_back_or_is_a_config_error(tmp_path, field, value):
    """Fuzz: whatever JSON value a recipe field holds, the reader returns a config or raises
    ConfigError naming config.json; no TypeError, KeyError or AttributeError escapes."""
    run_dir = tmp_path / "fuzzed"
    run_dir.mkdir(exist_ok=True)
    (run_dir / run_files.CONFIG_FILE).write_text(json.dumps(_recipe_changed(**{field: value})))
    try:
        config = run_directory.read_run_config(run_dir)
    except run_config.ConfigError as error:
        assert run_files.CONFIG_FILE in str(error)
    else:
        assert getattr(config.recipe, field) == value or field == "image_size"
