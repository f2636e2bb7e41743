"""Tests of keras_vit.worker_restart (the comparison of the workers' backups) and of the
digest keras_vit.train.callbacks.AtomicBackupAndRestore records and checks, in one process; the
two-worker restarts are in tests/train/test_multi_worker_restart.py."""

import json
import shutil

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from keras_vit.train import callbacks, worker_restart
from tests.helpers import killable_run as killable

RECORDS = st.dictionaries(
    st.sampled_from(["chief", "worker 0", "worker 1", "worker 2"]),
    st.tuples(st.integers(0, 2), st.sampled_from([None, "ab" * 16, "cd" * 16])),
    min_size=2,
)


@given(RECORDS)
@example({"worker 0": (2, "ab" * 16), "worker 1": (2, "cd" * 16)})  # same epoch, other state
@example({"worker 0": (2, "ab" * 16), "worker 1": (1, "ab" * 16)})
@example({"chief": (3, "ab" * 16), "worker 0": (3, "ab" * 16), "worker 1": (3, "ab" * 16)})
def test_backups_agree_only_when_every_epoch_and_digest_is_the_same(records):
    epochs = {epoch for epoch, _ in records.values()}
    digests = {digest for _, digest in records.values()}
    if len(epochs) == 1 and len(digests) == 1:
        worker_restart.check_agreement(records)
        return
    with pytest.raises(worker_restart.BackupMismatchError) as info:
        worker_restart.check_agreement(records)
    message = str(info.value)
    assert "\n" not in message
    for name, (epoch, digest) in records.items():
        if len(epochs) > 1:
            assert f"{name}: {'no backup' if epoch == 0 else f'epoch {epoch}'}" in message
        else:
            assert f"{name}: {digest or 'none'}" in message


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
    """`keras-vit train --resume` on mismatched backups: exit 2 with one line (main prints a
    UsageError as `keras-vit train: error: ...`), not a traceback."""
    from keras_vit.cli import common

    records = {"worker 0": (2, None), "worker 1": (1, None)}
    with pytest.raises(common.UsageError) as info, common.usage_errors():
        worker_restart.check_agreement(records)
    assert str(info.value).startswith("Cannot resume: the workers' backups are of different")
    assert "worker 0: epoch 2, worker 1: epoch 1" in str(info.value)


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
