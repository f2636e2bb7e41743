"""Runs in a fresh KERAS_BACKEND=jax process, started by tests/kernels/test_dispatch.py's
remat tests; REMAT_CASE picks what it does, and it prints one RESULT JSON line:

- "model": a ViT built with remat=True: the XLA temporaries of its compiled training step
  (forward, cross-entropy, gradients), and of a pure-JAX chain of checkpointed blocks
  (`jax.checkpoint`, independent of keras_vit: it shows which scheduler XLA used);
- "plain": the same with remat=False, then a second ViT with remat=True (the test sets
  XLA_FLAGS itself here, so that one must leave it as it is);
- "cli": `keras-vit train --remat` on the tiny model, then the same chain.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np


def chain_temp_bytes() -> int:
    """XLA temporaries of the gradient of six `jax.checkpoint`ed attention-like blocks."""
    import jax
    import jax.numpy as jnp

    def block(x, w):
        h = jnp.tanh(x @ w)
        return x + jax.nn.softmax(jnp.einsum("bij,bkj->bik", h, h), -1) @ h

    def loss(ws, x):
        for w in ws:
            x = jax.checkpoint(block)(x, w)
        return jnp.mean(x**2)

    ws = [jnp.full((64, 64), 0.01) for _ in range(6)]
    compiled = jax.jit(jax.grad(loss)).lower(ws, jnp.ones((4, 257, 64))).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def model_temp_bytes(remat: bool) -> int:
    """XLA temporaries of a compiled training step of a 4-block ViT (65 tokens, batch 16)."""
    import jax
    import keras

    import keras_vit

    model = keras_vit.ViT(
        image_size=64, patch_size=8, hidden_dim=64, num_heads=4, mlp_dim=256, num_layers=4,
        num_classes=10, remat=remat,
    )  # fmt: skip
    trainable = [v.value for v in model.trainable_variables]
    frozen = [v.value for v in model.non_trainable_variables]
    images = np.random.default_rng(0).uniform(-1, 1, (16, 64, 64, 3)).astype("float32")
    labels = np.arange(16) % 10

    def loss(trainable):
        logits, _ = model.stateless_call(trainable, frozen, images, training=True)
        return keras.ops.mean(
            keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        )

    compiled = jax.jit(jax.grad(loss)).lower(trainable).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def main(folder: str) -> dict:
    case = os.environ["REMAT_CASE"]
    result = {"case": case}
    if case in ("model", "plain"):
        result["model_temp"] = model_temp_bytes(case == "model")
        if case == "plain":
            result["remat_model_temp"] = model_temp_bytes(True)
    else:
        from keras_vit.cli.main import main as cli

        tiny = ["--model", "tiny", "--stem", "patch", "--dataset", "digits"]
        run = ["--shots-per-class", "10", "--epochs", "1", "--run-dir", f"{folder}/run"]
        result["code"] = cli(["train", *tiny, *run, "--batch-size", "16", "--remat", "--quiet"])
    result["chain_temp"] = chain_temp_bytes()
    result["xla_flags"] = os.environ.get("XLA_FLAGS", "")
    return result


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1])), flush=True)
