"""Subprocess worker for tests/runtime/test_distribute.py: one of two MultiWorkerMirroredStrategy
workers on 127.0.0.1 (the test sets TF_CONFIG and starts both).

1. Shim check: trains with TensorFlow's plain `tf.distribute.MultiWorkerMirroredStrategy`
   and records whether Keras' `fit` still fails (the reason for
   `keras_vit.runtime.distribute.MultiWorkerMirroredStrategy`). The failure happens before any
   collective op, on both workers alike, so it cannot leave one worker waiting.
2. A real run: `keras_vit.train.runs.fit_run` under `resolve_strategy("multi_worker")` for two
   epochs into RUN_DIR (only the chief writes there); the chief also saves its predictions
   on the validation images to RUN_DIR/../chief_predictions.npy.

Prints one JSON line prefixed RESULT.

Usage: python multi_worker_run.py RUN_DIR
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_vit  # noqa: E402
from keras_vit.runtime import distribute
from keras_vit.train import runs  # noqa: E402


def build():
    model = keras_vit.ViT(
        num_classes=10,
        image_size=16,
        patch_size=8,
        hidden_dim=16,
        num_heads=2,
        mlp_dim=32,
        num_layers=1,
    )
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def data():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (32, 16, 16, 3)).astype("float32")
    y = rng.integers(0, 10, 32)
    return x, y


def plain_strategy_error():
    """None if plain Keras `fit` works under the multi-worker strategy, else the error."""
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = build()
    x, y = data()
    try:
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    except Exception as error:  # the test compares the message with the known failures
        return f"{type(error).__name__}: {str(error)[:300]}"
    return None


def main():
    run_dir = sys.argv[1]
    keras.utils.set_random_seed(0)
    result = {"plain_error": plain_strategy_error()}
    strategy = distribute.resolve_strategy("multi_worker")
    result["strategy"] = type(strategy).__name__
    result["num_replicas"] = strategy.num_replicas_in_sync
    result["chief"] = distribute.is_chief(strategy)
    x, y = data()
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    validation = tf.data.Dataset.from_tensor_slices((x[:16], y[:16])).batch(8)
    outcome = runs.fit_run(
        run_dir,
        build,
        train,
        epochs=2,
        validation_data=validation,
        config={"test": 1},
        strategy=strategy,
        verbose=0,
    )
    result["loss"] = [row["loss"] for row in outcome.history]
    result["steps"] = outcome.metrics["steps"]
    predictions = outcome.model.predict(x[:16], verbose=0)  # collective: every worker
    if result["chief"]:
        np.save(os.path.join(os.path.dirname(run_dir), "chief_predictions.npy"), predictions)
        np.save(os.path.join(os.path.dirname(run_dir), "inputs.npy"), x[:16])
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
