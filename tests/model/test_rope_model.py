"""`position_embedding="rope"` (DINOv3's rotary embedding) in whole models, with storage
(register) tokens, LayerScale and the attention biases DINOv3 uses (`qkv_bias`), compared
with the NumPy forward pass from the equations (tests/numpy_family_reference.py,
`rope=True`) on randomised weights; at other image sizes (dynamic), through `.keras`, under
the mixed policies, and in `Architecture`."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints.base.architecture import Architecture
from keras_vit.checkpoints.base.naming import official_arrays
from tests.checkpoints.random_models import images_for, logits, randomise
from tests.numpy_family_reference import family_forward
from tests.output_checks import MIXED_TOLERANCE, assert_close_to_float32, mixed_and_float32_models

TINY = dict(hidden_dim=16, num_heads=2, mlp_dim=32, num_layers=2, num_classes=5)
DINOV3 = dict(
    position_embedding="rope",
    num_register_tokens=2,
    layer_scale_init=0.5,
    gelu_approximate=False,
    layer_norm_epsilon=1e-5,
)


def _model(patch=4, grid=(2, 3), seed=0, **options):
    model = keras_vit.ViT(
        **TINY, patch_size=patch, image_size=(grid[0] * patch, grid[1] * patch), **options
    )
    return randomise(model, seed=seed)


def _reference(model, images, **options):
    return family_forward(
        official_arrays(model),
        images,
        num_heads=TINY["num_heads"],
        pooling=options.get("pooling", "token"),
        gelu_approximate=options.get("gelu_approximate", True),
        layer_norm_epsilon=options.get("layer_norm_epsilon", 1e-6),
        rope=True,
    )


@pytest.mark.parametrize(
    "options",
    [
        dict(position_embedding="rope"),
        dict(DINOV3, qkv_bias="none"),
        dict(DINOV3, qkv_bias="qv"),
        dict(DINOV3, pooling="gap"),
        dict(position_embedding="rope", distilled=True, num_register_tokens=1),
    ],
    ids=["plain", "dinov3", "dinov3_qv", "gap_registers", "distilled"],
)
@pytest.mark.parametrize("grid", [(2, 3), (3, 3)])
def test_rope_models_match_the_numpy_forward_pass(options, grid):
    model = _model(grid=grid, **options)
    x = images_for(model)
    np.testing.assert_allclose(logits(model, x), _reference(model, x, **options), atol=2e-5)
    arch = Architecture.from_model(model)
    assert arch.position_embedding == "rope"
    assert arch.qkv_bias == options.get("qkv_bias", "qkv")
    assert not any("posembed" in layer.name for layer in model.layers)


def test_dynamic_rope_model_rotates_by_each_inputs_grid():
    model = _model(grid=(2, 3), dynamic_image_size=True, **DINOV3)
    for size in ((8, 12), (16, 8), (20, 20)):
        x = np.random.default_rng(sum(size)).uniform(-1, 1, (2, *size, 3)).astype("float32")
        np.testing.assert_allclose(logits(model, x), _reference(model, x, **DINOV3), atol=2e-5)


def test_a_model_built_at_another_size_gives_the_same_outputs_with_the_same_weights():
    """RoPE has no table: the weights of a 2x3 model run unchanged in a 4x4 model."""
    small = _model(grid=(2, 3), **DINOV3)
    large = keras_vit.ViT(**TINY, patch_size=4, image_size=16, **DINOV3)
    large.set_weights(small.get_weights())
    x = images_for(large)
    np.testing.assert_allclose(logits(large, x), _reference(small, x, **DINOV3), atol=2e-5)


def test_keras_file_round_trip_keeps_rope(tmp_path):
    model = _model(**DINOV3, qkv_bias="none", dynamic_image_size=True)
    model.save(tmp_path / "m.keras")
    back = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True, compile=False)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 12, 16, 3)).astype("float32")
    np.testing.assert_allclose(logits(back, x), logits(model, x), atol=1e-6)
    block = back.get_layer("encoderblock_0")
    assert block.rope["num_prefix_tokens"] == 3 and block.rope["patch_size"] == [4, 4]
    assert block.qkv_bias == "none"


@pytest.mark.parametrize("policy", list(MIXED_TOLERANCE))
def test_rope_logits_under_mixed_precision_match_float32(policy):
    def build():
        return keras_vit.ViT(**TINY, patch_size=4, image_size=(8, 12), **DINOV3)

    mixed, reference = mixed_and_float32_models(build, policy, seed=1)
    x = images_for(reference)
    assert_close_to_float32(
        mixed.predict(x, verbose=0), reference.predict(x, verbose=0), policy, "logits"
    )


def test_rope_refusals_name_the_rule():
    with pytest.raises(ValueError, match="head_dim=6"):
        keras_vit.ViT(
            **{**TINY, "hidden_dim": 12}, patch_size=4, image_size=8, position_embedding="rope"
        )
    with pytest.raises(ValueError, match="no_embed_class=True needs"):
        keras_vit.ViT(
            **TINY, patch_size=4, image_size=8, position_embedding="rope", no_embed_class=True
        )
