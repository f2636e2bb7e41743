"""`keras-vit train` with a probe, for the multi-worker kill test in
tests/runtime/test_distribute.py.

Runs `keras_vit.cli.main.main` on the given arguments, unchanged except that
`keras_vit.train.runs.fit_run` gets one more callback, `Probe`, which writes what the test needs
into PROBE_DIR/worker<index>/ (index: this process's TF_CONFIG task index):

- start.npz: the weights and `optimizer.iterations` the first training step starts from
  (after `BackupAndRestore` restored them, on a resumed run);
- epoch<E>.npz: the weights at the end of epoch E (counted from 0 over the whole run);
- batch-<E>-<B>: an empty marker file written at the end of batch B of epoch E, after which
  the process sleeps PROBE_SLEEP_S seconds (default 0), so that a test which waits for a
  marker and then kills the process kills it in the middle of that epoch.

Usage: python probed_cli.py PROBE_DIR train [keras-vit train flags]
"""

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_vit.cli.main import main  # noqa: E402
from keras_vit.train import runs  # noqa: E402


def weights_record(model):
    return {f"w{i}": w for i, w in enumerate(model.get_weights())}


class Probe(keras.callbacks.Callback):
    def __init__(self, folder, sleep_s):
        super().__init__()
        self.folder, self.sleep_s = folder, sleep_s
        self.started = False
        self.epoch = 0
        os.makedirs(folder, exist_ok=True)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if not self.started:
            self.started = True
            iterations = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
            np.savez(
                os.path.join(self.folder, "start.npz"),
                iterations=iterations,
                epoch=self.epoch,
                **weights_record(self.model),
            )

    def on_train_batch_end(self, batch, logs=None):
        open(os.path.join(self.folder, f"batch-{self.epoch}-{batch}"), "w").close()
        time.sleep(self.sleep_s)

    def on_epoch_end(self, epoch, logs=None):
        np.savez(os.path.join(self.folder, f"epoch{epoch}.npz"), **weights_record(self.model))


def install_probe(probe_dir):
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    probe = Probe(
        os.path.join(probe_dir, f"worker{index}"), float(os.environ.get("PROBE_SLEEP_S", 0))
    )
    fit_run = runs.fit_run

    def fit_run_with_probe(*args, extra_callbacks=(), **kwargs):
        return fit_run(*args, extra_callbacks=[*extra_callbacks, probe], **kwargs)

    runs.fit_run = fit_run_with_probe


if __name__ == "__main__":
    install_probe(sys.argv[1])
    sys.exit(main(sys.argv[2:]))
