"""Tests of keras_vit.runtime.precision: `model_width`, `with_dtype_policy`, what a run records in
its config.json, and `brief_reason`. The rules of "auto" are tested in
tests/runtime/test_precision_auto.py."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit.runtime import precision, precision_auto
from keras_vit.train import run_config, run_plan, training

AMX = frozenset({"fpu", "avx512f", "amx_bf16", "amx_tile", "avx512_bf16"})
NO_BF16 = frozenset({"fpu", "avx2", "fma"})


def test_model_width(tiny_vit_kwargs):
    assert precision.model_width(keras_vit.ViT(**tiny_vit_kwargs)) == 32
    inputs = keras.Input((4,))
    assert precision.model_width(keras.Model(inputs, keras.layers.Dense(2)(inputs))) is None


def randomised(model, seed=0):
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0.0, 0.3, w.shape).astype(w.dtype) for w in model.get_weights()])
    return model


def test_with_dtype_policy_computes_in_bfloat16_with_the_same_weights(tiny_vit_kwargs):
    model = randomised(keras_vit.ViT(**tiny_vit_kwargs))
    images = np.random.default_rng(1).uniform(-1, 1, (8, 32, 32, 3)).astype("float32")
    reference = model.predict(images, verbose=0)
    assert np.abs(reference).max() > 0.5  # randomised, not the zero head

    clone = precision.with_dtype_policy(model, "mixed_bfloat16")
    block = clone.get_layer("encoderblock_0")
    assert block.compute_dtype == "bfloat16" and block.variable_dtype == "float32"
    assert clone.get_layer("head").compute_dtype == "float32"
    logits = clone.predict(images, verbose=0)
    assert logits.dtype == np.float32
    difference = np.abs(logits - reference).max()
    assert 0 < difference < 0.05 * np.abs(reference).max()  # bfloat16 ran, and stayed close
    assert (logits.argmax(-1) == reference.argmax(-1)).mean() >= 0.75
    for a, b in zip(model.get_weights(), clone.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)

    back = precision.with_dtype_policy(clone, "float32")
    np.testing.assert_allclose(back.predict(images, verbose=0), reference, rtol=1e-5, atol=1e-5)
    assert precision.with_dtype_policy(model, "float32") is model
    with pytest.raises(ValueError, match="'half'"):
        precision.with_dtype_policy(model, "half")


def plan(monkeypatch, flags, **recipe):
    monkeypatch.setattr(precision_auto, "cpu_flags", lambda path="/proc/cpuinfo": flags)
    config = run_config.RunConfig(recipe=training.TrainConfig(**recipe))
    return run_plan.plan_run(config, tf.distribute.get_strategy())


def test_default_run_keeps_float32_with_xla(monkeypatch):
    """The default `keras-vit train` model (D 64) runs as before, on any CPU."""
    for flags in (AMX, NO_BF16):
        resolved = plan(monkeypatch, flags).resolved()
        assert (resolved["mixed_precision"], resolved["jit_compile"]) == ("float32", True)
        assert resolved["precision_reason"]


def test_a_wide_run_records_bfloat16_without_xla(monkeypatch):
    resolved = plan(monkeypatch, AMX, hidden_dim=384, mlp_dim=768, num_heads=6).resolved()
    assert (resolved["mixed_precision"], resolved["jit_compile"]) == ("mixed_bfloat16", False)
    assert "amx_bf16" in resolved["precision_reason"]


def test_compile_kwargs_resolve_auto_for_the_recipe(monkeypatch):
    monkeypatch.setattr(precision_auto, "cpu_flags", lambda path="/proc/cpuinfo": AMX)
    assert training.TrainConfig().compile_kwargs(1000)["jit_compile"] is True
    assert training.TrainConfig(jit_compile=False).compile_kwargs(1000)["jit_compile"] is False


@pytest.mark.parametrize(
    "setting, record, expected",
    [
        ("mixed_bfloat16",
         {"figures": {"float32": 13.2, "mixed_bfloat16": 10.4}, "source": "cache"},
         "measured on this CPU: 1.27x float32's speed, cached probe"),
        ("float32+xla", {"figures": {"float32+xla": 4.3, "float32": 4.9, "mixed_bfloat16": 4.7},
                         "source": "probe"}, "measured on this CPU: 1.14x float32's speed"),
        ("float32", {"figures": {"float32+xla": 5.0, "float32": 4.0, "mixed_bfloat16": 4.4}},
         "measured on this CPU: 1.10x mixed_bfloat16's speed"),
        ("float32", {"reason": "CPU without bfloat16 units; XLA on", "figures": None},
         "CPU without bfloat16 units"),
        ("float32", {"reason": "x" * 200}, "x" * 69 + "..."),
    ],
)  # fmt: skip
def test_brief_reason_gives_the_measured_speed_or_the_first_clause(setting, record, expected):
    """Speeds worked by hand from the figures (ms per step: 13.2 / 10.4 = 1.27)."""
    assert precision.brief_reason(setting, record) == expected
