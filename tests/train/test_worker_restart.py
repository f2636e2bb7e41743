"""Tests of keras_vit.worker_restart (the comparison of the workers' backups) and of the
digest keras_vit.train.callbacks.AtomicBackupAndRestore records and checks, in one process; the
two-worker restarts are in tests/train/test_multi_worker_restart.py."""

import functools
import json
import shutil

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from keras_vit.train import callbacks, worker_restart
from tests.helpers import killable_run as killable

NAMES = ["chief", "worker 0", "worker 1", "worker 2"]
DIGESTS = {epoch: f"{epoch:02d}" * 16 for epoch in range(5)}  # one state per epoch
# What a worker can keep: nothing, or its newest backup and maybe the one before it.
KEPT = st.one_of(
    st.just({}),
    st.integers(1, 4).flatmap(
        lambda newest: st.sampled_from(
            [{newest: DIGESTS[newest]}, {newest: DIGESTS[newest], newest - 1: DIGESTS[newest - 1]}]
        )
    ),
)
RECORDS = st.dictionaries(st.sampled_from(NAMES), KEPT, min_size=2)


def kept(record):
    return {epoch: digest for epoch, digest in record.items() if epoch > 0}


@given(RECORDS)
@example({"worker 0": {2: DIGESTS[2], 1: DIGESTS[1]}, "worker 1": {1: DIGESTS[1]}})
@example({"worker 0": {3: DIGESTS[3], 2: DIGESTS[2]}, "worker 1": {1: DIGESTS[1]}})
def test_workers_resume_from_the_newest_epoch_all_of_them_have(records):
    """It used to stop every worker ("backups are of different epochs") whenever their
    newest backups differed, the exact fault the backups exist for."""
    records = {name: kept(record) for name, record in records.items()}
    chosen = worker_restart.choose_epoch(records)
    every = [set(record) for record in records.values()]
    assert chosen == max(set.intersection(*every), default=0)
    assert all(chosen == 0 or chosen in record for record in every)


@given(RECORDS, st.sampled_from(NAMES))
def test_backups_of_the_chosen_epoch_with_other_states_are_refused_in_one_line(records, odd):
    records = {name: dict(record) for name, record in records.items()}
    chosen = worker_restart.choose_epoch(records)
    if chosen == 0 or odd not in records:
        return
    records[odd][chosen] = "ff" * 16
    with pytest.raises(worker_restart.BackupMismatchError) as info:
        worker_restart.choose_epoch(records)
    message = str(info.value)
    assert "\n" not in message
    assert f"backups of epoch {chosen} hold different states" in message
    assert f"{odd}: {'ff' * 16}" in message


def test_digest_words_round_trip_the_compared_prefix():
    digest = "0123456789abcdef" * 4
    assert worker_restart._digest_hex(worker_restart._digest_words(digest)) == digest[:32]
    assert worker_restart._digest_hex(worker_restart._digest_words(None)) is None


def test_one_process_restore_checks_the_digest_of_what_it_loaded(tmp_path):
    """The backup records the digest of what it saved; weights of another epoch put under
    this epoch's state are refused at restore instead of resumed from."""
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError, match="stop"):
        killable.run(run_dir, slow=False, callbacks=[CopyBackupThenStop(run_dir, tmp_path)])
    backup = run_dir / "backup"
    state = json.loads((backup / "state.json").read_text())
    assert state["epoch"] == 2 and state["steps"] == 2 * killable.STEPS_PER_EPOCH
    assert len(state["digest"]) == 64
    shutil.copy(tmp_path / "epoch1.state.npz", backup / state["state"])
    with pytest.raises(callbacks.BackupError, match="digest differs"):
        killable.run(run_dir, resume=True, slow=False)


class CopyBackupThenStop(killable.keras.callbacks.Callback):
    """Copies the backup's state of epoch 1 to `folder`/epoch1.state.npz when epoch 1
    starts, then stops the run (an exception) when epoch 2 starts, after its backup."""

    def __init__(self, run_dir, folder):
        super().__init__()
        self.run_dir, self.folder = run_dir, folder

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == 1:
            state = json.loads((self.run_dir / "backup" / "state.json").read_text())
            shutil.copy(self.run_dir / "backup" / state["state"], self.folder / "epoch1.state.npz")
        if epoch == 2:
            raise RuntimeError("stop")


def test_the_cli_reports_a_backup_mismatch_as_a_usage_error_in_one_line():
    """`keras-vit train --resume` on backups of one epoch with different states: exit 2
    with one line (main prints a UsageError as `keras-vit train: error: ...`)."""
    from keras_vit.cli import flags

    records = {"worker 0": {2: "ab" * 16}, "worker 1": {2: "cd" * 16, 1: "ef" * 16}}
    with pytest.raises(flags.UsageError) as info, flags.usage_errors():
        worker_restart.choose_epoch(records)
    assert str(info.value).startswith("Cannot resume: the workers' backups of epoch 2 hold")


class TimedOutStrategy:
    """Stands in for a multi-worker strategy whose all-reduce times out (a worker that never
    comes to the check); records the options the all-reduce was given."""

    num_replicas_in_sync = 2

    def __init__(self):
        self.options = None
        self.extended = self

    def experimental_distribute_values_from_function(self, fn):
        return fn

    def reduce_to(self, reduce_op, value, destinations, options=None):
        import tensorflow as tf

        self.options = options
        raise tf.errors.DeadlineExceededError(None, None, "Collective ops timed out")


def test_a_worker_missing_at_the_check_ends_it_within_the_timeout_in_one_line():
    strategy = TimedOutStrategy()
    with pytest.raises(worker_restart.BackupMismatchError) as info:
        worker_restart._all_gather(strategy, [1, 2, 0, 0, 0, 0], timeout_s=7)
    assert strategy.options.timeout_seconds == 7
    message = str(info.value)
    assert "\n" not in message
    assert "did not come to the backup check within 7 s (Collective ops timed out)" in message


def tiny_model(seed):
    """A compiled two-layer model whose weights and optimizer step are fixed by `seed`."""
    keras = killable.keras
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)
    model.optimizer.iterations.assign(seed)
    return model


@functools.cache
def epoch_weights(epoch):
    """The weights every worker holds after `epoch` epochs (0: the initial ones)."""
    return tiny_model(100 + epoch).get_weights()


def write_backup(folder, epoch):
    """Worker's `AtomicBackupAndRestore` at the end of epoch `epoch` (1-based count)."""
    backup = callbacks.AtomicBackupAndRestore(str(folder))
    model = tiny_model(0)
    model.set_weights(epoch_weights(epoch))
    model.optimizer.iterations.assign(epoch)
    backup.set_model(model)
    backup.on_epoch_end(epoch - 1)


def kill_points(workers=2, epochs=3):
    """Each prefix of the backups of `workers` workers over `epochs` epochs, in every order
    the workers may write within an epoch: (order, writes done before the kill)."""
    import itertools

    for order in itertools.permutations(range(workers)):
        for done in range(workers * epochs + 1):
            yield order, done


@pytest.mark.parametrize("order, done", list(kill_points()))
def test_a_kill_at_each_point_between_the_workers_backups_resumes_every_worker_alike(
    tmp_path, order, done
):
    """The job killed after `done` backups of two workers: every worker
    resumes from the newest epoch all of them have (the previous backup was kept until the
    other worker wrote the next), with that epoch's weights; it used to stop both workers."""
    folders = [tmp_path / f"worker{index}" for index in range(2)]
    newest = [0, 0]
    for step in range(done):
        epoch, worker = step // 2 + 1, order[step % 2]
        write_backup(folders[worker], epoch)
        newest[worker] = epoch
    records = {f"worker {i}": worker_restart.backup_records(f) for i, f in enumerate(folders)}
    chosen = worker_restart.choose_epoch(records)
    assert chosen == min(newest)  # the newest epoch both have
    for folder in folders:
        model = tiny_model(0)
        backup = callbacks.AtomicBackupAndRestore(str(folder))
        backup.set_model(model)
        backup.restore_epoch = chosen
        backup.on_train_begin()
        expected = epoch_weights(chosen) if chosen else tiny_model(0).get_weights()
        for got, want in zip(model.get_weights(), expected, strict=True):
            np.testing.assert_array_equal(got, want)
        if chosen:
            assert int(model.optimizer.iterations) == chosen
        files = sorted(p.name for p in folder.glob("epoch-*")) if folder.exists() else []
        assert len(files) <= 2  # the newest backup and the one before it, no more
