"""Subprocess worker for tests/test_careless_data.py: `runs.fit_run` under a 2-replica
MirroredStrategy (two logical CPUs) with batches the replicas can or cannot share.

Prints one JSON line (prefixed RESULT): the refusals' messages (9 images at global batch 4
and 5; a dataset of static batch 5; a dataset of unknown batch size ending in a batch of 1),
whether any of them wrote a file, and for 10 images at batch 4 (4, 4, 2) the largest weight
difference between the 2-replica run and the one-device run from the same initial weights.

Usage: python uneven_replicas.py OUT_DIR
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
from keras_vit.train import runs  # noqa: E402

TINY = dict(image_size=8, patch_size=4, hidden_dim=8, num_heads=2, mlp_dim=16, num_layers=1)


def initial_weights():
    keras.utils.set_random_seed(1)
    model = keras_vit.ViT(num_classes=3, **TINY)
    rng = np.random.default_rng(0)
    return [w + 0.1 * rng.standard_normal(w.shape).astype(w.dtype) for w in model.get_weights()]


def builder(weights):
    def build():
        model = keras_vit.ViT(num_classes=3, **TINY)
        model.set_weights(weights)
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            jit_compile=False,
        )
        return model

    return build


def data(n):
    rng = np.random.default_rng(2)
    return rng.uniform(-1, 1, (n, 8, 8, 3)).astype("float32"), rng.integers(0, 3, n)


def refusal(run_dir, weights, strategy, train, **kwargs):
    try:
        runs.fit_run(run_dir, builder(weights), train, epochs=1, strategy=strategy, verbose=0,
                     **kwargs)  # fmt: skip
    except (ValueError, tf.errors.InvalidArgumentError) as error:
        return str(error).splitlines()[0] if isinstance(error, ValueError) else error.message
    return None


def main():
    out = sys.argv[1]
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    weights = initial_weights()
    result = {}
    for n, batch in ((9, 4), (9, 5)):
        result[f"{n}_at_{batch}"] = refusal(
            os.path.join(out, f"r{n}_{batch}"), weights, mirrored, data(n), batch_size=batch
        )
    static = tf.data.Dataset.from_tensor_slices(data(10)).batch(5, drop_remainder=True)
    result["dataset_batch_5"] = refusal(os.path.join(out, "static"), weights, mirrored, static)
    result["nothing_written"] = not any(
        os.path.exists(os.path.join(out, name)) and os.listdir(os.path.join(out, name))
        for name in ("r9_4", "r9_5", "static")
    )
    unknown = tf.data.Dataset.from_tensor_slices(data(9)).batch(4)  # 4, 4, 1: shape (None, ...)
    result["unknown_batch"] = refusal(os.path.join(out, "unknown"), weights, mirrored, unknown)
    trained = {}
    for name, strategy in (("two", mirrored), ("one", tf.distribute.OneDeviceStrategy("/cpu:0"))):
        run = runs.fit_run(os.path.join(out, name), builder(weights), data(10), epochs=2,
                           batch_size=4, strategy=strategy, verbose=0)  # fmt: skip
        trained[name] = run.model.get_weights()
        result.setdefault("10_at_4_steps", []).append(run.metrics["steps"])
    result["10_at_4_weight_diff"] = max(
        float(np.max(np.abs(a - b))) for a, b in zip(trained["two"], trained["one"], strict=True)
    )
    result["10_at_4_weight_change"] = max(
        float(np.max(np.abs(a - b))) for a, b in zip(trained["one"], weights, strict=True)
    )
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
