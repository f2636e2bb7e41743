"""Subprocess worker for tests/train/test_multi_worker_restart.py: one of two
MultiWorkerMirroredStrategy workers on 127.0.0.1 (the test sets TF_CONFIG and TMPDIR).

The run: `keras_vit.train.runs.fit_run` of tests/helpers/killable_run.py's tiny ViT (dropout and
stochastic depth on) on `keras_vit.data.load`'s training pipeline (seeded shuffle, random
crops), EPOCHS epochs of one pass each, the dataset built afresh in every process.

    python multi_worker_restart.py uninterrupted ROOT
        ROOT/uninterrupted: the whole run; its history and final weights saved to
        ROOT/uninterrupted-worker<index>.npz.
    python multi_worker_restart.py killed ROOT
        ROOT/killed: the same run, in which worker 1 copies its backup folder to
        ROOT/old-backup-worker-1 at the end of epoch 1 (before that epoch's backup: the copy
        holds epoch 1's state), and both workers SIGKILL themselves at the end of batch
        KILL_BATCH of epoch KILL_EPOCH.
    python multi_worker_restart.py resume ROOT NAME
        resumes ROOT/NAME as a restarted job; saves its history and final weights to
        ROOT/NAME-worker<index>.npz and prints RESULT done.

Each run is the first of its process (seed 0): under the multi-worker strategy a second
`fit_run` in the same process trains on other batches or masks than the first (seen with
this helper: epoch 0's loss differs in the 3rd digit; cause not found).
Two runs of one mode in fresh processes give the same history and weights to the bit
(tests/train/test_multi_worker_restart.py relies on it).
"""

import json
import os
import shutil
import signal
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_vit  # noqa: E402
from keras_vit.runtime import distribute
from keras_vit.train import runs  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import killable_run  # noqa: E402

EPOCHS = 3
KILL_EPOCH, KILL_BATCH = 2, 1
IMAGES, BATCH_SIZE = 48, 8  # 6 global steps per epoch, 4 images per worker and step


def task_index():
    return json.loads(os.environ["TF_CONFIG"])["task"]["index"]


class KillAt(keras.callbacks.Callback):
    """SIGKILLs this process at the end of batch KILL_BATCH of epoch KILL_EPOCH; on worker 1,
    first copies its backup folder aside at the end of epoch 1 (an older backup)."""

    def __init__(self, root, run_dir):
        super().__init__()
        self.root, self.run_dir, self.epoch = root, run_dir, None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == 1 and task_index() == 1:  # runs before the backup callback
            source = os.path.join(self.run_dir, ".backup-worker-1")
            shutil.copytree(source, os.path.join(self.root, "old-backup-worker-1"))

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == (KILL_EPOCH, KILL_BATCH):
            wait_for_the_other_worker(self.root)
            os.kill(os.getpid(), signal.SIGKILL)


def wait_for_the_other_worker(root, timeout_s=120.0):
    """Returns once both workers have finished the kill batch. The end of a step's all-reduce
    is no barrier: a worker that dies as soon as it has its result can leave the other one
    still reading its half, which then fails with "Socket closed" instead of reaching its own
    kill (seen in CI). Files in ROOT, outside the run and scratch folders the test lists."""
    open(os.path.join(root, f"at-kill-{task_index()}"), "w").close()
    other = os.path.join(root, f"at-kill-{1 - task_index()}")
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(other) and time.monotonic() < deadline:
        time.sleep(0.05)


def datasets():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (IMAGES, 16, 16, 3)).astype("uint8")
    y = rng.integers(0, 10, IMAGES)
    train = keras_vit.data.load(
        (x, y), image_size=16, batch_size=BATCH_SIZE, training=True, shuffle_seed=5
    )
    valid = keras_vit.data.load((x[:16], y[:16]), image_size=16, batch_size=8, training=False)
    return train, valid


def run(strategy, run_dir, resume=False, callbacks=()):
    keras.utils.set_random_seed(0)
    train, valid = datasets()
    return runs.fit_run(
        run_dir,
        killable_run.build,
        train,
        epochs=EPOCHS,
        validation_data=valid,
        config={"helper": "multi_worker_restart"},
        strategy=strategy,
        resume=resume,
        verbose=0,
        extra_callbacks=list(callbacks),
    )


def save_result(path, result):
    history = {key: [row[key] for row in result.history] for key in ("epoch", "loss", "accuracy")}
    weights = {f"w{i}": w for i, w in enumerate(result.model.get_weights())}
    np.savez(path, **{f"history_{k}": v for k, v in history.items()}, **weights)


def main():
    mode, root = sys.argv[1], sys.argv[2]
    strategy = distribute.resolve_strategy("multi_worker")
    index = task_index()
    if mode == "uninterrupted":
        result = run(strategy, os.path.join(root, "uninterrupted"))
        save_result(os.path.join(root, f"uninterrupted-worker{index}.npz"), result)
        print("RESULT done", flush=True)
        return
    if mode == "killed":
        killed = os.path.join(root, "killed")
        run(strategy, killed, callbacks=[KillAt(root, killed)])
        raise AssertionError("the run was not killed")
    name = sys.argv[3]
    result = run(strategy, os.path.join(root, name), resume=True)
    save_result(os.path.join(root, f"{name}-worker{index}.npz"), result)
    print("RESULT done", flush=True)


if __name__ == "__main__":
    main()
