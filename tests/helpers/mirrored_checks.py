"""Subprocess worker for tests/runtime/test_distribute.py: MirroredStrategy over two logical CPUs.

The CPU must be split before TensorFlow is used, so this runs in its own process. It prints
one JSON line (prefixed RESULT) with what the tests check:

- `two_replica_loss` / `one_device_loss`: per-epoch losses of the same model (same initial
  weights, same data, same global batch 8, SGD) under MirroredStrategy(2 CPUs) and
  OneDeviceStrategy; `max_weight_diff` between the two trained models.
- `b39_*`: user-report row B39 (variables created in / outside the strategy scope).
- B40: trains one step under MirroredStrategy, saves `<out>/b40.keras`, writes the inputs
  and predictions to `<out>/b40_inputs.npy` / `<out>/b40_predictions.npy`.

Usage: python mirrored_checks.py OUT_DIR
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_vit  # noqa: E402
from keras_vit.runtime import distribute  # noqa: E402

TINY = dict(image_size=16, patch_size=8, hidden_dim=16, num_heads=2, mlp_dim=32, num_layers=1)
DEVICES = ["/cpu:0", "/cpu:1"]


def build(initial_weights=None):
    model = keras_vit.ViT(num_classes=10, **TINY)
    if initial_weights is not None:
        model.set_weights(initial_weights)
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def data():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (32, 16, 16, 3)).astype("float32")
    y = rng.integers(0, 10, 32)
    return x, y


def train(strategy, initial_weights):
    with strategy.scope():
        model = build(initial_weights)
    x, y = data()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    history = model.fit(dataset, epochs=3, verbose=0, shuffle=False)
    return history.history["loss"], model.get_weights()


def loss_comparison(result):
    keras.utils.set_random_seed(1)
    # Give the head non-zero weights so that every layer gets gradients from the start.
    initial = [
        w + 0.05 * np.random.default_rng(i).standard_normal(w.shape).astype(w.dtype)
        for i, w in enumerate(build().get_weights())
    ]
    mirrored = tf.distribute.MirroredStrategy(DEVICES)
    result["num_replicas"] = mirrored.num_replicas_in_sync
    result["per_replica_batch"] = distribute.per_replica_batch_size(8, mirrored)
    try:
        distribute.per_replica_batch_size(7, mirrored)
    except ValueError as error:
        result["odd_batch_error"] = str(error)
    two, two_weights = train(mirrored, initial)
    one, one_weights = train(tf.distribute.OneDeviceStrategy("/cpu:0"), initial)
    result["two_replica_loss"] = [float(v) for v in two]
    result["one_device_loss"] = [float(v) for v in one]
    result["max_weight_diff"] = max(
        float(np.max(np.abs(a - b))) for a, b in zip(two_weights, one_weights, strict=True)
    )


def b39_inside_scope(result):
    """B39, first case: build and compile in the scope, then `fit` outside it."""
    strategy = tf.distribute.MirroredStrategy(DEVICES)
    with strategy.scope():
        model = build()
    x, y = data()
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    mirrored, replicas_equal = {}, True
    for variable in model.weights:
        mirrored[variable.path] = isinstance(variable.value, tf.distribute.DistributedValues)
        copies = strategy.experimental_local_results(variable.value)
        replicas_equal &= len(copies) == 2 and all(
            np.array_equal(np.asarray(copies[0]), np.asarray(c)) for c in copies
        )
    distribute.check_variables_in_scope(model, strategy)  # must not raise
    result["b39_mirrored"] = mirrored
    result["b39_replicas_equal"] = bool(replicas_equal)


def b39_outside_scope(result):
    """B39, second case: build outside the scope, then compile and `fit` inside it.

    Records what plain Keras does (3.15: a bare AssertionError in the distributed optimizer
    update) and the clear error of `keras_vit.runtime.distribute.check_variables_in_scope`, which
    `keras_vit.train.runs.fit_run` calls before `fit`.
    """
    model = keras_vit.ViT(num_classes=10, **TINY)
    strategy = tf.distribute.MirroredStrategy(DEVICES)
    try:
        distribute.check_variables_in_scope(model, strategy)
        result["b39_check_error"] = None
    except ValueError as error:
        result["b39_check_error"] = str(error)
    x, y = data()
    try:
        with strategy.scope():
            model.compile(
                optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
            )
            model.fit(x, y, batch_size=8, epochs=1, verbose=0)
        result["b39_keras_error"] = None
    except Exception as error:  # recorded for the report; the test checks ours
        result["b39_keras_error"] = type(error).__name__


def b40_save(result, out_dir):
    """B40: one training step under MirroredStrategy, then save model, inputs, predictions."""
    strategy = tf.distribute.MirroredStrategy(DEVICES)
    with strategy.scope():
        model = build()
    x, y = data()
    model.fit(x[:8], y[:8], batch_size=8, epochs=1, verbose=0)
    model.save(os.path.join(out_dir, "b40.keras"))
    np.save(os.path.join(out_dir, "b40_inputs.npy"), x)
    np.save(os.path.join(out_dir, "b40_predictions.npy"), model.predict(x, verbose=0))
    result["b40_saved"] = True


def main():
    out_dir = sys.argv[1]
    result = {}
    loss_comparison(result)
    b39_inside_scope(result)
    b39_outside_scope(result)
    b40_save(result, out_dir)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
