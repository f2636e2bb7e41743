"""One process of a data-parallel JAX fit (`keras_vit.runtime.jax_cluster`): with TF_CONFIG it
joins the cluster, without it `DataParallel` over its own devices. Run as `python -m
tests.helpers.jax_processes` under KERAS_BACKEND=jax; prints one "RESULT {json}" line with
the per-epoch losses. The same tiny model, data and global batch in every mode; with
VIA_STRATEGY=1 the cluster is joined as `--strategy multi_worker` does
(`keras_vit.runtime.distribute.resolve_strategy`)."""

from __future__ import annotations

import json
import os

import numpy as np

GLOBAL_BATCH = 8
EPOCHS = 2


def main() -> dict:
    import keras

    from keras_vit.runtime import jax_cluster

    if os.environ.get("TF_CONFIG") and os.environ.get("VIA_STRATEGY"):  # the CLI's route
        from keras_vit.runtime import distribute

        distribute.resolve_strategy("multi_worker")
        distribution = keras.distribution.distribution()
    elif os.environ.get("TF_CONFIG"):
        distribution = jax_cluster.start()
    else:
        distribution = keras.distribution.DataParallel(devices=keras.distribution.list_devices())
        keras.distribution.set_distribution(distribution)
    import tensorflow as tf

    import keras_vit

    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(
        image_size=16, patch_size=8, hidden_dim=16, num_heads=2, mlp_dim=32, num_layers=1,
        num_classes=3,
    )  # fmt: skip
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (32, 16, 16, 3)).astype("float32")
    y = rng.integers(0, 3, 32).astype("int32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    history = model.fit(data, epochs=EPOCHS, verbose=0, shuffle=False)
    return {
        "losses": [float(loss) for loss in history.history["loss"]],
        "devices": int(distribution.device_mesh.shape[0]),
        "chief": jax_cluster.is_chief(),
        "run_dir_writer": distribute_is_chief(),
    }


def distribute_is_chief() -> bool:
    from keras_vit.runtime import distribute

    return distribute.is_chief()


if __name__ == "__main__":
    print("RESULT " + json.dumps(main()))
