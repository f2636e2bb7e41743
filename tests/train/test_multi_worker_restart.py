"""Restarting a two-worker run (keras_vit.train.worker_restart, runs.fit_run): backups of different
epochs (a worker killed between the workers' backups) resume from the epoch both have, a
restart repeats the uninterrupted run's losses and weights, and a SIGKILLed worker's scratch
folder does not outlive the restart.

Two worker processes on 127.0.0.1 run tests/helpers/multi_worker_restart.py: a run SIGKILLed
mid-epoch 2 (both workers, after their backups of epoch 2); a copy of it in which worker 1's
backup is its older one of epoch 1, resumed (from epoch 1); the killed run resumed; and the same
run uninterrupted (the same-losses test's reference, beside the killed run on a cluster of
its own). About 130 s of CPU in the default run (five two-worker jobs; most of it is starting
TensorFlow in ten processes), so the tests are `slow`.
"""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from keras_vit.train import callbacks, epoch_streams
from tests.process_helpers import finish, free_ports

HELPER = os.path.join(
    os.path.dirname(os.path.dirname(__file__)), "helpers", "multi_worker_restart.py"
)
EPOCHS, KILL_EPOCH = 3, 2
RESUME_RTOL, RESUME_ATOL = 1e-5, 1e-6  # as tests/train/test_runs.py's one-process resume


def start_workers(root, cluster, *args):
    """Starts both workers of `cluster` on the helper: their processes."""
    processes = []
    for index in range(2):
        tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        env = {
            **os.environ,
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "TF_CONFIG": json.dumps(tf_config),
            "TMPDIR": str(root / f"tmp{index}"),  # where the old scratch folders went
        }
        (root / f"tmp{index}").mkdir(exist_ok=True)
        processes.append(
            subprocess.Popen(
                [sys.executable, HELPER, *map(str, args)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return processes


def workers(root, cluster, *args, timeout=300):
    """Runs both workers of `cluster` on the helper to the end: [(code, stdout, stderr)]."""
    return finish(start_workers(root, cluster, *args), timeout=timeout)


def outputs(results):
    return "\n".join(out[-2000:] + err[-3000:] for _, out, err in results)


@pytest.fixture(scope="module")
def restarts(tmp_path_factory):
    root = tmp_path_factory.mktemp("restarts")
    ports = free_ports(4)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports[:2]]}
    # The reference run, on its own cluster at the same time (the run does not depend on
    # timing: the two jobs are each other's load).
    reference = start_workers(
        root, {"worker": [f"127.0.0.1:{p}" for p in ports[2:]]}, "uninterrupted", root
    )
    killed = workers(root, cluster, "killed", root)
    uninterrupted = finish(reference, timeout=300)
    assert [code for code, _, _ in killed] == [-signal.SIGKILL] * 2, outputs(killed)
    after_kill = {
        "run_dir": sorted(os.listdir(root / "killed")),
        "tmp": [sorted(os.listdir(root / f"tmp{index}")) for index in range(2)],
        "state": [
            json.loads((root / "killed" / name / "state.json").read_text())
            for name in ("backup", ".backup-worker-1")
        ],
    }
    # Worker 1 killed before its backup of epoch 2 (the chief has written its own): worker
    # 1's backup is of epoch 1, the chief keeps epoch 2 and the one before it, epoch 1.
    shutil.copytree(root / "killed", root / "mixed")
    shutil.rmtree(root / "mixed" / ".backup-worker-1")
    shutil.copytree(root / "old-backup-worker-1", root / "mixed" / ".backup-worker-1")
    mixed = workers(root, cluster, "resume", root, "mixed")
    resumed = workers(root, cluster, "resume", root, "killed")
    return root, after_kill, mixed, resumed, uninterrupted


@pytest.mark.large  # two TensorFlow workers trained, killed and restarted: ~70 s (.ci/run_large)
@pytest.mark.slow
def test_workers_killed_between_their_backups_resume_from_the_epoch_both_have(restarts):
    """A worker killed between the workers' backups of epoch 2 left
    the chief at epoch 2 and worker 1 at epoch 1; both used to exit 2 ("backups are of
    different epochs"). Now both resume from epoch 1 (the chief kept its backup of it),
    say so, and end with the uninterrupted run's losses and weights."""
    root, after_kill, mixed, _, uninterrupted = restarts
    assert [state["epoch"] for state in after_kill["state"]] == [KILL_EPOCH, KILL_EPOCH]
    assert after_kill["state"][0]["previous"]["epoch"] == KILL_EPOCH - 1  # the kept backup
    assert [code for code, _, _ in mixed] == [0, 0], outputs(mixed)
    for _, _, err in mixed:
        assert "every worker resumes from epoch 1, the newest epoch all of them have" in err
    assert all(code == 0 for code, _, _ in uninterrupted), outputs(uninterrupted)
    for index in range(2):
        got = np.load(root / f"mixed-worker{index}.npz", allow_pickle=False)
        reference = np.load(root / f"uninterrupted-worker{index}.npz", allow_pickle=False)
        np.testing.assert_array_equal(got["history_epoch"], list(range(EPOCHS)))
        for key in ("history_loss", "history_accuracy"):
            np.testing.assert_allclose(got[key], reference[key], rtol=RESUME_RTOL, err_msg=key)
        for key in sorted(k for k in reference.files if k.startswith("w")):
            np.testing.assert_allclose(
                got[key], reference[key], rtol=RESUME_RTOL, atol=RESUME_ATOL, err_msg=key
            )
    rows = callbacks.read_history(root / "mixed" / "history.csv")
    assert [row["epoch"] for row in rows] == list(range(EPOCHS))
    assert [row["steps"] for row in rows] == [6, 12, 18]


@pytest.mark.large  # two TensorFlow workers trained, killed and restarted: ~70 s (.ci/run_large)
@pytest.mark.slow
def test_restarted_workers_repeat_the_uninterrupted_losses_and_weights(restarts):
    """Each worker resumes its data stream where its backup's epoch left it
    (epoch_streams.worker_passes): it used to start the pipeline's shuffle and crops again, so the
    resumed epoch 2 trained on other batches (loss 2.27499 against 2.27488). Equal to the
    bit on this CPU host; held to the one-process resume's tolerances."""
    root, _, _, resumed, uninterrupted = restarts
    assert all(code == 0 for code, _, _ in uninterrupted), outputs(uninterrupted)
    for code, _, _ in resumed:
        assert code == 0, outputs(resumed)
    for index in range(2):
        got = np.load(root / f"killed-worker{index}.npz", allow_pickle=False)
        reference = np.load(root / f"uninterrupted-worker{index}.npz", allow_pickle=False)
        np.testing.assert_array_equal(got["history_epoch"], list(range(EPOCHS)))
        np.testing.assert_array_equal(reference["history_epoch"], list(range(EPOCHS)))
        for key in ("history_loss", "history_accuracy"):
            np.testing.assert_allclose(got[key], reference[key], rtol=RESUME_RTOL, err_msg=key)
        weights = sorted(key for key in reference.files if key.startswith("w"))
        assert len(weights) > 20
        for key in weights:
            np.testing.assert_allclose(
                got[key], reference[key], rtol=RESUME_RTOL, atol=RESUME_ATOL, err_msg=key
            )
    # The chief's history.csv holds the rows of both sessions, equal to the uninterrupted.
    rows = callbacks.read_history(root / "killed" / "history.csv")
    expected = callbacks.read_history(root / "uninterrupted" / "history.csv")
    assert [row["steps"] for row in rows] == [row["steps"] for row in expected] == [6, 12, 18]
    np.testing.assert_allclose(
        [row["val_loss"] for row in rows], [row["val_loss"] for row in expected], rtol=RESUME_RTOL
    )


@pytest.mark.large  # two TensorFlow workers trained, killed and restarted: ~70 s (.ci/run_large)
@pytest.mark.slow
def test_a_sigkilled_workers_scratch_folder_is_gone_after_the_restart(restarts):
    """A worker's TensorBoard logs and throw-away saves went to `$TMPDIR/keras_vit_worker_*`,
    which a SIGKILL left there for good; now they go to RUN/.scratch-worker-<index>, which
    the restarted worker empties and the finished run removes."""
    root, after_kill, _, resumed, _ = restarts
    assert all(code == 0 for code, _, _ in resumed), outputs(resumed)
    leftovers = [
        *glob.glob(str(root / "tmp*" / "keras_vit_worker_*")),
        *glob.glob(str(root / "killed" / ".scratch-worker-*")),
        *glob.glob(str(root / "mixed" / ".scratch-worker-*")),
    ]
    assert not leftovers, leftovers
    assert ".scratch-worker-1" in after_kill["run_dir"], after_kill  # what the kill left
    names = set(os.listdir(root / "killed"))
    assert not names & {".lock", "backup", ".backup-worker-1"}, names


def reshuffled_pipeline(batches):
    """`batches` batches of 2 examples in the way keras_vit.data.load draws its randomness: a
    seeded shuffle and a seeded random stream (the crop seeds), both new at every pass."""
    import tensorflow as tf

    examples = tf.data.Dataset.range(2 * batches).shuffle(8, seed=3, reshuffle_each_iteration=True)
    noise = tf.data.Dataset.random(seed=4, rerandomize_each_iteration=True)
    return tf.data.Dataset.zip((examples, noise)).batch(2, drop_remainder=True)


def stream_as_fit_reads_it(first_epoch, epochs, batches, steps_per_epoch):
    """The batches a worker's `fit` trains on in epochs `first_epoch`..`epochs - 1` of
    `epoch_streams.worker_passes`' stream, read as Keras 3.15's `fit` reads it under a strategy: one
    batch from an iterator of its own to build the model (`_maybe_symbolic_build`), then one
    iterator for the run."""
    stream, steps = epoch_streams.worker_passes(
        reshuffled_pipeline(batches), first_epoch, steps_per_epoch
    )
    next(iter(stream))
    iterator = iter(stream)
    return [
        tuple(np.asarray(t).tolist() for t in next(iterator))
        for _ in range((epochs - first_epoch) * steps)
    ]


@given(
    batches=st.integers(1, 4),
    steps_per_epoch=st.one_of(st.none(), st.integers(1, 6)),
    first_epoch=st.integers(1, 3),
)
def test_a_resumed_worker_stream_continues_the_uninterrupted_one(
    batches, steps_per_epoch, first_epoch
):
    """The resumed stream (built afresh, as in a restarted worker) is the uninterrupted
    stream from its epoch on, for epochs of one pass (None), of part of one and of several;
    the two-worker tests above only reach the first."""
    epochs = first_epoch + 2
    uninterrupted = stream_as_fit_reads_it(0, epochs, batches, steps_per_epoch)
    resumed = stream_as_fit_reads_it(first_epoch, epochs, batches, steps_per_epoch)
    steps = steps_per_epoch or batches
    assert resumed == uninterrupted[first_epoch * steps :]
