"""`position_embedding="sincos2d"` / `"none"` (paper appendix D.4; big_vision's
`posemb_sincos_2d`): the table against a formula written here from its definition, the
choice kept in the model's config, and checkpoints without a position table."""

import json
import math

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints import CheckpointError
from keras_vit.checkpoints.base.architecture import Architecture
from keras_vit.layers import AddSinCosPositionEmbs
from keras_vit.layers.position_embedding import sincos_2d_table
from keras_vit.train import run_plan

TINY = dict(image_size=32, patch_size=8, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2)


def reference_sincos(rows, cols, width, temperature=10000.0):
    """Position (r, c) in row-major order; with K = width / 4 frequencies
    w_k = temperature ** (-k / (K - 1)), the row is
    [sin(c w_0..w_K-1), cos(c w), sin(r w), cos(r w)]."""
    quarter = width // 4
    table = np.zeros((rows * cols, width))
    for r in range(rows):
        for c in range(cols):
            for k in range(quarter):
                w = temperature ** (-k / (quarter - 1))
                table[r * cols + c, k] = math.sin(c * w)
                table[r * cols + c, quarter + k] = math.cos(c * w)
                table[r * cols + c, 2 * quarter + k] = math.sin(r * w)
                table[r * cols + c, 3 * quarter + k] = math.cos(r * w)
    return table


def randomised(model, seed=0):
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.2, weight.shape).astype("float32"))
    return model


def test_table_matches_the_definition():
    np.testing.assert_allclose(sincos_2d_table((3, 5), 16), reference_sincos(3, 5, 16), atol=1e-6)


def test_layer_adds_the_table_after_a_zero_class_token_row():
    layer = AddSinCosPositionEmbs((2, 3), num_prefix_tokens=1)
    out = keras.ops.convert_to_numpy(layer(np.zeros((2, 7, 8), np.float32)))
    np.testing.assert_array_equal(out[:, 0], 0.0)
    np.testing.assert_allclose(out[1, 1:], reference_sincos(2, 3, 8), atol=1e-6)
    assert layer.weights == []


def test_bad_sizes_are_clear_errors():
    with pytest.raises(ValueError, match="divisible by 4"):
        keras_vit.ViT(**{**TINY, "hidden_dim": 30, "num_heads": 3}, position_embedding="sincos2d")
    with pytest.raises(ValueError, match="position_embedding"):
        keras_vit.ViT(**TINY, position_embedding="rotary")


def test_sincos_model_adds_the_table_and_keeps_it_in_its_config(tmp_path):
    model = randomised(keras_vit.ViT(**TINY, num_classes=3, position_embedding="sincos2d"))
    layer = model.get_layer("posembed_input")
    assert isinstance(layer, AddSinCosPositionEmbs) and layer.get_config()["grid_size"] == [4, 4]
    tokens = np.zeros((1, 17, 32), np.float32)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(layer(tokens))[0, 1:], reference_sincos(4, 4, 32), atol=1e-6
    )
    images = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    logits = model.predict(images, verbose=0)
    assert np.abs(logits).max() > 0
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    np.testing.assert_allclose(loaded.predict(images, verbose=0), logits, atol=1e-5)
    assert Architecture.from_model(loaded).position_embedding == "sincos2d"


def test_checkpoint_without_a_table_loads_into_a_sincos_model(tmp_path):
    source = randomised(keras_vit.ViT(**TINY, num_classes=3, position_embedding="sincos2d"))
    keras_vit.save_npz(source, tmp_path / "best.npz")
    with np.load(tmp_path / "best.npz", allow_pickle=False) as data:
        arrays = dict(data)
    assert "Transformer/posembed_input/pos_embedding" not in arrays
    assert Architecture.from_arrays(arrays).position_embedding is None
    with pytest.raises(CheckpointError, match="pos_embedding"):
        keras_vit.load_weights(keras_vit.ViT(**TINY, num_classes=3), tmp_path / "best.npz")
    # A run's config.json next to the file says "sincos2d": the run's model is rebuilt.
    kwargs = {**TINY, "num_classes": 3, "position_embedding": "sincos2d"}
    (tmp_path / "config.json").write_text(json.dumps({"resolved": {"model_kwargs": kwargs}}))
    rebuilt = run_plan.load_source_model(str(tmp_path / "best.npz"))
    images = np.random.default_rng(2).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(
        rebuilt.predict(images, verbose=0), source.predict(images, verbose=0), atol=1e-5
    )
    assert run_plan.source_model_kwargs(rebuilt)["position_embedding"] == "sincos2d"


def test_finetune_at_another_size_recomputes_the_table():
    source = keras_vit.ViT(**TINY, num_classes=3, position_embedding="sincos2d")
    tuned = keras_vit.finetune(source, 5, image_size=(48, 32))
    layer = tuned.get_layer("posembed_input")
    assert layer.grid_size == (6, 4)
    out = keras.ops.convert_to_numpy(layer(np.zeros((1, 25, 32), np.float32)))
    np.testing.assert_allclose(out[0, 1:], reference_sincos(6, 4, 32), atol=1e-6)


def test_none_has_no_position_information():
    """Without position embeddings a gap model cannot tell where a patch was: permuting the
    patches leaves the output unchanged (and "learned" does not)."""
    images = np.random.default_rng(3).uniform(-1, 1, (1, 32, 32, 3)).astype("float32")
    patches = images.reshape(1, 4, 8, 4, 8, 3).transpose(0, 1, 3, 2, 4, 5).reshape(1, 16, -1)
    shuffled = patches[:, np.random.default_rng(4).permutation(16)]
    shuffled = shuffled.reshape(1, 4, 4, 8, 8, 3).transpose(0, 1, 3, 2, 4, 5)
    shuffled = shuffled.reshape(1, 32, 32, 3)
    outputs = {}
    for kind in ("none", "learned"):
        model = randomised(
            keras_vit.ViT(**TINY, num_classes=3, pooling="gap", position_embedding=kind)
        )
        assert Architecture.from_model(model).position_embedding == kind
        outputs[kind] = [model.predict(x, verbose=0) for x in (images, shuffled)]
    assert np.abs(outputs["none"][0]).max() > 0
    np.testing.assert_allclose(outputs["none"][0], outputs["none"][1], atol=1e-4)
    assert np.abs(outputs["learned"][0] - outputs["learned"][1]).max() > 1e-3
