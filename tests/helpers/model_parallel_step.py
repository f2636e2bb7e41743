"""Runs in a fresh process with KERAS_BACKEND=jax and host devices (XLA_FLAGS), started by
tests/runtime/test_model_parallel.py: one training step of a B/16-shaped tiny ViT (the same
blocks, small widths, every weight randomised) on one device and under
`keras_vit.runtime.model_parallel.vit_model_parallel` on each batch x model mesh named on the
command line ("1x2": the model axis alone, "2x2": with the FSDP split); prints one
"RESULT {json}" line with the losses, the largest weight difference to one device, and each
variable's sharding and per-device shape."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

TINY_B16 = dict(
    image_size=32, patch_size=16, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=1,
    num_classes=5,
)  # fmt: skip


# variable path suffix -> the mesh axis of each dimension, written out from the Megatron split
# (heads and MLP units over `model`) and the FSDP split (hidden_dim over `batch`)
SHARDED = {
    "embedding/conv/kernel": (None, None, None, "model"),
    "embedding/conv/bias": ("model",),
    "query/kernel": ("batch", "model", None),
    "key/kernel": ("batch", "model", None),
    "value/kernel": ("batch", "model", None),
    "query/bias": ("model", None),
    "key/bias": ("model", None),
    "value/bias": ("model", None),
    "out/kernel": ("model", None, "batch"),
    "Dense_0/kernel": ("batch", "model"),
    "Dense_0/bias": ("model",),
    "Dense_1/kernel": ("model", "batch"),
}


def expected_axes(path):
    """The axes `SHARDED` gives `path` (None: replicated); attention and MLP kernels only
    inside an attention or MLP layer."""
    for suffix, axes in SHARDED.items():
        inside = "embedding/" in suffix or "MultiHead" in path or "MlpBlock" in path
        if path.endswith(suffix) and inside:
            return axes
    return None


def check_layout(path, layout, batch, model):
    """`layout` (the helper's record of a variable) is the one `SHARDED` gives `path`, over
    every device of the mesh, each device holding its share."""
    axes = expected_axes(path) or (None,) * len(layout["shape"])
    assert layout["devices"] == batch * model, path
    assert layout["spec"] == list(axes), path
    sizes = {"batch": batch, "model": model, None: 1}
    share = [size // sizes[axis] for size, axis in zip(layout["shape"], axes, strict=True)]
    assert layout["device_shapes"] == [share], path


def check_step(result, mesh_name, batch, model):
    """The sharded step equals one device within 1e-5, and every variable and its momentum
    slot lives where `SHARDED` says."""
    sharded = result[mesh_name]
    assert sharded["name"] == f"ModelParallel (batch {batch} x model {model})"
    assert sharded["replicas"] == batch
    assert sharded["loss"] == pytest.approx(result["single_loss"], abs=1e-5)
    assert 0 <= sharded["weight_difference"] < 1e-5
    slots = sharded["slots"]
    for path, layout in sharded["layouts"].items():
        check_layout(path, layout, batch, model)
        (slot,) = [s for s in slots if s.endswith("/" + path.replace("/", "_") + "_momentum")]
        check_layout(path, slots[slot], batch, model)
    specs = [layout["spec"] for layout in sharded["layouts"].values()]
    assert sum(spec != [None] * len(spec) for spec in specs) == 2 + 10  # embedding, the block


def one_step(distribution) -> dict:
    """One SGD-with-momentum step of the tiny model under `distribution` (None: one
    device): its loss, the weights after it, and every variable's layout."""
    import keras

    import keras_vit

    keras.distribution.set_distribution(distribution)
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(**TINY_B16)
    rng = np.random.default_rng(1)  # the head starts at zero: randomise every weight
    model.set_weights([rng.normal(0, 0.3, w.shape).astype("float32") for w in model.weights])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(keras.optimizers.SGD(0.5, momentum=0.9), loss)
    data = np.random.default_rng(2)
    x = data.uniform(-1, 1, (4, 32, 32, 3)).astype("float32")
    y = data.integers(0, 5, 4)
    value = float(model.train_on_batch(x, y))
    keras.distribution.set_distribution(None)
    return {
        "loss": value,
        "weights": [np.asarray(w) for w in model.get_weights()],
        "layouts": {v.path: layout(v) for v in model.weights},
        "slots": {v.path: layout(v) for v in model.optimizer.variables},
    }


def layout(variable) -> dict:
    """The variable's partition spec (None: one device) and the shape on each device."""
    value = variable.value
    spec = getattr(value.sharding, "spec", None)
    return {
        "spec": None if spec is None else [axis for axis in spec],
        "shape": list(variable.shape),
        "device_shapes": sorted({tuple(shard.data.shape) for shard in value.addressable_shards}),
        "devices": len(value.sharding.device_set),
    }


def cli_run() -> tuple[int, str, dict]:
    """(exit code, stderr, config.json's "resolved" strategy and replicas) of one epoch of
    `keras-vit train --strategy model_parallel` with the recipe's tiny model."""
    import contextlib
    import io
    import os
    import tempfile

    from keras_vit.cli.main import main as keras_vit_main

    run = os.path.join(tempfile.mkdtemp(), "run")
    argv = ["train", "--model", "tiny", "--stem", "patch", "--dataset", "digits"]
    argv += ["--shots-per-class", "10", "--epochs", "1", "--strategy", "model_parallel"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = keras_vit_main([*argv, "--run-dir", run, "--quiet"])
    resolved = {}
    if code == 0:
        with open(os.path.join(run, "config.json")) as file:
            resolved = json.load(file)["resolved"]
    record = {key: resolved.get(key) for key in ("strategy", "num_replicas")}
    return int(code or 0), err.getvalue(), record


def main(meshes) -> dict:
    """`meshes`: "BxM" strings, a batch x model mesh each, compared with one device; "cli"
    adds `cli_run`."""
    import keras

    from keras_vit.runtime import distribute, model_parallel

    devices = keras.distribution.list_devices()
    single = one_step(None)
    out = {"devices": len(devices), "single_loss": single["loss"]}
    for mesh in meshes:
        if mesh == "cli":
            out["cli"] = cli_run()
            continue
        batch, model = (int(size) for size in mesh.split("x"))
        distribution = model_parallel.vit_model_parallel(
            TINY_B16, devices=devices[: batch * model], model_axis=model
        )
        keras.distribution.set_distribution(distribution)
        sharded = {"replicas": distribute.num_replicas(None)}
        sharded["name"] = distribute.strategy_name(None)
        step = one_step(distribution)
        sharded["loss"] = step["loss"]
        pairs = zip(single["weights"], step["weights"], strict=True)
        sharded["weight_difference"] = max(float(np.max(np.abs(a - b))) for a, b in pairs)
        sharded["layouts"], sharded["slots"] = step["layouts"], step["slots"]
        out[mesh] = sharded
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1:])))
