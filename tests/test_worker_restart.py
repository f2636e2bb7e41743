"""Tests of keras_vit.worker_restart (the comparison of the workers' backups) and of the
digest keras_vit.callbacks.AtomicBackupAndRestore records and checks, in one process; the
two-worker restarts are in tests/test_multi_worker_restart.py."""

import json
import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keras_vit import callbacks, worker_restart
from tests.helpers import killable_run as killable

RECORDS = st.dictionaries(
    st.sampled_from(["chief", "worker 0", "worker 1", "worker 2"]),
    st.tuples(st.integers(0, 5), st.sampled_from([None, "ab" * 16, "cd" * 16])),
    min_size=2,
)


@given(RECORDS)
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
    shutil.copy(tmp_path / "epoch1.weights.h5", backup / state["weights"])
    with pytest.raises(callbacks.BackupError, match="digest differs"):
        killable.run(run_dir, resume=True, slow=False)


class CopyBackupThenStop(killable.keras.callbacks.Callback):
    """Copies the backup's weights of epoch 1 to `folder`/epoch1.weights.h5 when epoch 1
    starts, then stops the run (an exception) when epoch 2 starts, after its backup."""

    def __init__(self, run_dir, folder):
        super().__init__()
        self.run_dir, self.folder = run_dir, folder

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == 1:
            state = json.loads((self.run_dir / "backup" / "state.json").read_text())
            shutil.copy(
                self.run_dir / "backup" / state["weights"], self.folder / "epoch1.weights.h5"
            )
        if epoch == 2:
            raise RuntimeError("stop")
