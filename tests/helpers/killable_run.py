"""A slow little run for the SIGKILL test in tests/train/test_runs.py.

`fit_run` of a tiny ViT on fixed NumPy data: EPOCHS epochs of STEPS_PER_EPOCH steps, each
batch slowed down by SLEEP_S seconds so that the test can kill the process mid-epoch.
Importable (the test resumes the run in-process with the same `build` and `data`) and runnable:

    python killable_run.py RUN_DIR            # start a fresh run
"""

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_vit  # noqa: E402
from keras_vit.train import runs  # noqa: E402

EPOCHS = 4
BATCH_SIZE = 8
STEPS_PER_EPOCH = 6
SLEEP_S = 0.25


class SlowBatches(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(SLEEP_S)


def build():
    model = keras_vit.ViT(
        num_classes=10,
        image_size=16,
        patch_size=8,
        hidden_dim=16,
        num_heads=2,
        mlp_dim=32,
        num_layers=1,
        dropout_rate=0.1,  # random masks too: a resumed run must draw the same ones
        drop_path_rate=0.1,
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def data():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (BATCH_SIZE * STEPS_PER_EPOCH, 16, 16, 3)).astype("float32")
    y = rng.integers(0, 10, len(x))
    return x, y


class EpochWeights(keras.callbacks.Callback):
    """Records the model's weights at each epoch end (the test's reference for best/last)."""

    def __init__(self):
        super().__init__()
        self.weights = {}

    def on_epoch_end(self, epoch, logs=None):
        self.weights[epoch] = self.model.get_weights()


class StartingPoint(keras.callbacks.Callback):
    """Records the weights and optimizer variables the first training step starts from."""

    def __init__(self):
        super().__init__()
        self.weights = self.optimizer_variables = None

    def on_train_batch_begin(self, batch, logs=None):
        if self.weights is None:
            self.weights = self.model.get_weights()
            self.optimizer_variables = [np.asarray(v) for v in self.model.optimizer.variables]


def run(run_dir, resume=False, slow=True, callbacks=()):
    x, y = data()
    return runs.fit_run(
        run_dir,
        build,
        (x, y),
        epochs=EPOCHS,
        batch_size=BATCH_SIZE,
        validation_data=(x[:16], y[:16]),
        config={"helper": "killable_run"},
        resume=resume,
        verbose=0,
        extra_callbacks=[*callbacks, *([SlowBatches()] if slow else [])],
    )


if __name__ == "__main__":
    keras.utils.set_random_seed(0)
    run(sys.argv[1])
    print("RESULT finished", flush=True)
