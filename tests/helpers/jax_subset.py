"""Runs in a fresh process with KERAS_BACKEND=jax (started by tests/backends/test_jax.py).

Build, predict (against the NumPy reference), fit, load each checkpoint format, dynamic image
size and fine-tuning, on the tiny config, and DINOv3's rotary position embedding at two image
sizes (`rope_check`); prints one JSON line of results.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np


def main(workdir: str) -> dict:
    import keras
    from safetensors.numpy import save_file

    import keras_vit
    from keras_vit.checkpoints import model_contents, write_checkpoint
    from keras_vit.checkpoints.base.npz_io import write_npz
    from tests.checkpoints.torch_state import TINY, timm_forward, timm_state
    from tests.numpy_reference import random_official_params, vit_forward

    arch = dict(patch_size=8, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2)
    params = random_official_params(
        np.random.default_rng(0), image_size=32, channels=3, num_classes=10, **arch
    )
    npz = os.path.join(workdir, "tiny.npz")
    write_npz(npz, params)
    x = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    out = {"backend": keras.backend.backend()}

    model = keras_vit.ViT(image_size=32, num_classes=10, weights=npz, **arch)
    logits = model.predict(x, verbose=0)
    out["npz_vs_numpy"] = float(np.abs(logits - vit_forward(params, x, num_heads=4)).max())
    out["logits_std"] = float(np.std(logits))

    write_checkpoint(model_contents(model), os.path.join(workdir, "hf"), "hf")
    hf = keras_vit.from_checkpoint(os.path.join(workdir, "hf"))
    out["hf_vs_npz"] = float(np.abs(hf.predict(x, verbose=0) - logits).max())
    state = timm_state(np.random.default_rng(2))
    timm_path = os.path.join(workdir, "timm.safetensors")
    save_file(state, timm_path)
    timm = keras_vit.from_checkpoint(timm_path, num_heads=TINY["heads"])
    expected = timm_forward(state, x, num_heads=TINY["heads"])
    out["timm_vs_numpy"] = float(np.abs(timm.predict(x, verbose=0) - expected).max())

    keras_path = os.path.join(workdir, "m.keras")
    model.save(keras_path)
    loaded = keras_vit.from_checkpoint(keras_path)
    out["keras_vs_model"] = float(np.abs(loaded.predict(x, verbose=0) - logits).max())

    dynamic = keras_vit.ViT(
        image_size=32, num_classes=10, dynamic_image_size=True, weights=npz, **arch
    )
    big = np.random.default_rng(3).uniform(-1, 1, (2, 48, 40, 3)).astype("float32")
    rebuilt = keras_vit.ViT(image_size=(48, 40), num_classes=10, weights=npz, **arch)
    diff = dynamic.predict(big, verbose=0) - rebuilt.predict(big, verbose=0)
    out["dynamic_vs_rebuilt"] = float(np.abs(diff).max())

    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    history = model.fit(x, np.array([1, 2]), epochs=2, batch_size=2, verbose=0)
    out["fit_losses"] = [float(v) for v in history.history["loss"]]

    tuned = keras_vit.finetune(model, num_classes=3, image_size=40)
    out["finetune_output"] = list(tuned.output_shape)
    tuned_logits = tuned.predict(np.zeros((1, 40, 40, 3), "float32"), verbose=0)
    out["finetune_logits_zero"] = bool(np.all(tuned_logits == 0))
    out.update(rope_check())
    out.update(swiglu_check())
    out.update(stream_build_check())
    return out


def stream_build_check() -> dict:
    """Whether Keras' JAX trainer would still read a batch of its own from the training stream
    at the start of `fit` (`Trainer._symbolic_build`, which reads only while something is
    unbuilt), before and after `epoch_streams.build_from_spec` on a compiled ViT."""
    import keras
    import tensorflow as tf

    import keras_vit
    from keras_vit.train.epoch_streams import build_from_spec

    class Unreadable:
        def __iter__(self):
            raise LookupError("the build read a batch")

    def reads_a_batch(model) -> bool:
        try:
            model._symbolic_build(iterator=Unreadable())
        except LookupError:
            return True
        return False

    images = tf.zeros((4, 32, 32, 3))
    stream = tf.data.Dataset.from_tensor_slices((images, tf.zeros((4,), tf.int32))).batch(2)
    found = {}
    for prebuilt in (False, True):
        model = keras_vit.ViT(
            image_size=32,
            num_classes=3,
            patch_size=8,
            hidden_dim=16,
            num_heads=2,
            mlp_dim=16,
            num_layers=1,
        )
        model.compile(
            optimizer="sgd",
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
        if prebuilt:
            build_from_spec(model, stream)
        found[prebuilt] = reads_a_batch(model)
    return {"fit_reads_stream": found[False], "fit_reads_stream_after_build": found[True]}


def rope_check() -> dict:
    """A dynamic-size DINOv3 model (RoPE, storage tokens, LayerScale, no q/k/v bias) against
    the NumPy forward at its size and at another, pooling its class token ("token") and the
    mean of its patch tokens ("patch_gap"): the largest difference of the four."""
    import keras_vit

    arch = dict(patch_size=4, hidden_dim=16, num_heads=2, mlp_dim=32, num_layers=2)
    diffs = []
    for pooling in ("token", "patch_gap"):  # one model per pooling, run at both sizes
        model = keras_vit.DINOv3(
            "S/16", image_size=(8, 12), dynamic_image_size=True, pooling=pooling, **arch
        )
        diffs.append(
            _dinov3_vs_numpy(
                model,
                seed=5,
                pooling="gap" if pooling == "patch_gap" else "token",
                pool_patches=pooling == "patch_gap",
            )
        )
    return {"rope_vs_numpy": max(diffs)}


def swiglu_check() -> dict:
    """A dynamic-size DINOv3 with the gated (SwiGLU) MLP of H+/16 and 7B/16, tiny, against the
    NumPy forward at its size and at another: the larger difference."""
    import keras_vit

    arch = dict(patch_size=4, hidden_dim=16, num_heads=2, mlp_dim=24, num_layers=2)
    model = keras_vit.DINOv3("H+/16", image_size=(8, 12), dynamic_image_size=True, **arch)
    return {"swiglu_vs_numpy": _dinov3_vs_numpy(model, seed=7, mlp_activation="swiglu")}


def _dinov3_vs_numpy(model, seed, **forward_options) -> float:
    """Largest |difference| between a tiny dynamic-size DINOv3 (2 heads, randomised with
    `seed`) and the NumPy forward (`forward_options` added), at 8x12 and at 16x8."""
    import keras

    from keras_vit.checkpoints.base.naming import official_arrays
    from tests.checkpoints.random_models import randomise
    from tests.numpy_family_reference import family_forward

    model = randomise(model, seed=seed)
    diffs = []
    for size in ((8, 12), (16, 8)):
        x = np.random.default_rng(seed + 1).uniform(-1, 1, (2, *size, 3)).astype("float32")
        want = family_forward(
            official_arrays(model),
            x,
            num_heads=2,
            gelu_approximate=False,
            layer_norm_epsilon=1e-5,
            rope=True,
            **forward_options,
        )
        # predict: one compiled forward per size (a direct call on JAX compiles every op)
        got = keras.ops.convert_to_numpy(model.predict(x, verbose=0))
        diffs.append(float(np.abs(got - want).max()))
    return max(diffs)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        print("RESULT " + json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else folder)))
