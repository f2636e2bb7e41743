"""Saving and loading whole models (user reports B01, B05, B06, B07)."""

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

import keras_vit
from tests.model_helpers import random_images
from tests.output_checks import assert_outputs_close, randomize_weights

LOAD_IN_FRESH_PROCESS = textwrap.dedent(
    """
    import sys
    import numpy as np
    import keras_vit  # registers the layers; nothing else is imported or passed
    import keras
    model = keras.models.load_model(sys.argv[1])  # safe_mode defaults to True
    x = np.load(sys.argv[2], allow_pickle=False)
    np.save(sys.argv[3], model.predict(x, verbose=0))
    np.save(sys.argv[4], np.asarray(model(x)))
    """
)


def _trained_tiny(tiny):
    """A tiny model with non-trivial weights (one fit step moves the zero head)."""
    model = keras_vit.ViT(**tiny, dropout_rate=0.1, drop_path_rate=0.1)
    model.compile(
        optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    x = random_images(np.random.default_rng(0), 4, 32, 32)
    model.fit(x, np.arange(4), epochs=1, verbose=0)
    return model, x


def _predict_in_fresh_process(model_path, x, tmp_path):
    np.save(tmp_path / "x.npy", x)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    outputs = [tmp_path / "predict.npy", tmp_path / "call.npy"]
    result = subprocess.run(
        [sys.executable, "-c", LOAD_IN_FRESH_PROCESS, str(model_path), str(tmp_path / "x.npy")]
        + [str(p) for p in outputs],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "never built" not in result.stderr
    return [np.load(p, allow_pickle=False) for p in outputs]


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_b01_b06_load_in_fresh_process_without_custom_objects(tiny_vit_kwargs, tmp_path, suffix):
    """B01: loads with no custom_objects; B06: model(x) and predict(x) need no `training`."""
    model, x = _trained_tiny(tiny_vit_kwargs)
    path = tmp_path / f"m{suffix}"
    model.save(path)
    predicted, called = _predict_in_fresh_process(path, x, tmp_path)
    expected = model.predict(x, verbose=0)
    np.testing.assert_allclose(predicted, expected, atol=1e-6)
    np.testing.assert_allclose(called, expected, atol=1e-5)


def test_b05_save_weights_round_trip_is_exact(tiny_vit_kwargs, tmp_path):
    model, x = _trained_tiny(tiny_vit_kwargs)
    model.save_weights(tmp_path / "w.weights.h5")
    clone = keras_vit.ViT(**tiny_vit_kwargs, dropout_rate=0.1, drop_path_rate=0.1)
    clone.load_weights(tmp_path / "w.weights.h5")
    for a, b in zip(model.weights, clone.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(clone.predict(x, verbose=0), model.predict(x, verbose=0))


def _all_layers(layer):
    yield layer
    for sub in getattr(layer, "_layers", []) or []:
        yield from _all_layers(sub)


def test_b07_no_lambda_layers_and_safe_mode_load(tiny_vit_kwargs, tmp_path):
    """B07: no keras.layers.Lambda anywhere (recursively); loads with safe_mode=True."""
    model = randomize_weights(
        keras_vit.ViT(**tiny_vit_kwargs, pooling="gap", representation_size=8)
    )
    found = [layer.name for layer in _all_layers(model) if isinstance(layer, keras.layers.Lambda)]
    assert found == []
    model.save(tmp_path / "m.keras")
    reloaded = keras.models.load_model(tmp_path / "m.keras", safe_mode=True)
    x = random_images(np.random.default_rng(1), 2, 32, 32)
    assert_outputs_close(reloaded(x), model(x), atol=1e-6)


def _int8_tiny():
    kwargs = dict(
        image_size=16,
        patch_size=8,
        hidden_dim=16,
        num_heads=2,
        mlp_dim=32,
        num_layers=1,
        num_classes=3,
    )
    return kwargs, randomize_weights(keras_vit.ViT(**kwargs), seed=3)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    "mode",
    # int4 (~22 s here) runs with the large tests; int8 and float8 in the default run
    ["int8", pytest.param("int4", marks=pytest.mark.large), "float8"],
)
def test_a_quantized_model_round_trips_through_keras_files(tmp_path, mode):
    """The Transformer blocks record the quantization in their config and rebuild their
    projections quantized, so a `.keras` file of a quantized model loads back to the same
    outputs; `save_weights` files load into a model quantized the same way."""
    kwargs, model = _int8_tiny()
    x = random_images(np.random.default_rng(1), 2, 16, 16)
    float_outputs = np.asarray(model(x))
    model.quantize(mode)
    expected = np.asarray(model(x))
    assert np.abs(expected).max() > 1e-3 and np.abs(expected - float_outputs).max() > 0
    model.save(tmp_path / "q.keras")
    reloaded = keras.saving.load_model(tmp_path / "q.keras")
    assert reloaded.get_layer("encoderblock_0").attention.query.quantization_mode == mode
    np.testing.assert_array_equal(np.asarray(reloaded(x)), expected)
    model.save_weights(tmp_path / "q.weights.h5")
    again = keras_vit.ViT(**kwargs)
    again.quantize(mode)
    again.load_weights(tmp_path / "q.weights.h5")
    np.testing.assert_array_equal(np.asarray(again(x)), expected)
