"""Runs in a fresh process under KERAS_BACKEND=<backend> (started by
tests/train/test_backend_parity.py): the default `keras-vit train` model
(`keras_vit.train.training.TrainConfig`) from the weights in FOLDER/initial.npz, its loss
gradient on the first batch written to FOLDER/<backend>_gradient.npz, then compiled with the
recipe's optimizer and loss (XLA on) and stepped STEPS times with `train_on_batch` over the
first STEPS batches of the embedded MNIST's training split, in order, without augmentation;
the weights after the last step to FOLDER/<backend>_weights.npz; prints one JSON line with
the backend and the losses.

Usage: python -m tests.helpers.recipe_steps FOLDER [STEPS] (default 20)
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np


def recipe_batches(steps: int):
    """The first `steps` batches (images in [-1, 1] `(64, 28, 28, 1)`, labels) of MNIST."""
    from keras_vit.data.embedded import embedded_arrays
    from keras_vit.train.training import TrainConfig

    size = TrainConfig().batch_size
    images, labels = embedded_arrays("mnist", "train")
    images = (images[: steps * size].astype("float32") - 127.5) / 127.5
    return [(images[i : i + size], labels[i : i + size]) for i in range(0, steps * size, size)]


def first_gradient(model, loss_fn, images, labels) -> list[np.ndarray]:
    """d loss / d trainable weights on one batch (training mode), as NumPy arrays."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        trainable = [v.value for v in model.trainable_variables]
        others = [v.value for v in model.non_trainable_variables]

        def loss(trainable):
            logits, _ = model.stateless_call(trainable, others, images, training=True)
            return loss_fn(labels, logits)

        return [np.asarray(g) for g in jax.grad(loss)(trainable)]
    import tensorflow as tf

    with tf.GradientTape() as tape:
        value = loss_fn(labels, model(images, training=True))
    return [g.numpy() for g in tape.gradient(value, model.trainable_variables)]


def main(folder: str, steps: int) -> dict:
    import keras

    from keras_vit.data.embedded import embedded_arrays
    from keras_vit.train.training import TrainConfig

    config = TrainConfig()
    model = config.build(10, 1)
    initial = np.load(os.path.join(folder, "initial.npz"))
    model.set_weights([initial[f"w{i}"] for i in range(len(initial.files))])
    kwargs = config.compile_kwargs(len(embedded_arrays("mnist", "train")[1]))
    batches = recipe_batches(steps)
    gradient = first_gradient(model, kwargs["loss"], *batches[0])
    backend = keras.backend.backend()
    np.savez(os.path.join(folder, f"{backend}_gradient.npz"), *gradient)
    model.compile(**{**kwargs, "jit_compile": True})
    losses = [float(model.train_on_batch(x, y, return_dict=True)["loss"]) for x, y in batches]
    np.savez(os.path.join(folder, f"{backend}_weights.npz"), *model.get_weights())
    return {"backend": backend, "losses": losses}


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20)))
