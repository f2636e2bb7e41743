"""DINOv3's named sizes: exactly timm's parameter counts, the shared options, the gated
(SwiGLU) sizes H+/16 and 7B/16, and fine-tuning at a new image size (RoPE has nothing to
resize).

The counts are timm 1.0.31's, `sum(p.numel() for p in timm.create_model(name,
pretrained=False, num_classes=N).parameters())` (eva.py's `vit_*_patch16_dinov3` and
`*_dinov3_qkvb` definitions; N=0: no head, timm's DINOv3 default; N=1000: a head); those of
H+/16 and 7B/16 were taken with the model built on PyTorch's `meta` device (no memory), and
transformers 5.25's `DINOv3ViTModel` (`use_gated_mlp=True`, `hidden_act="silu"`, no q/k/v
bias, its `mask_token` left out) has the same headless counts. S/B/L are built at a small
image size (RoPE's count does not depend on it) and never run; H+/16 (840M weights) and 7B/16
(6.7G) are counted from their shapes (`keras_vit.model.dinov3.count_params`), a count checked
here against built models' `count_params()`.
"""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints.base.architecture import Architecture
from keras_vit.model.dinov3 import DINOv3, count_params, dinov3_kwargs
from tests.checkpoints.random_models import randomise
from tests.numpy_family_reference import family_forward

TIMM_COUNTS = {
    ("S/16", "none"): (21_586_944, 21_971_944),
    ("S/16", "qv"): (21_596_160, 21_981_160),
    ("B/16", "none"): (85_641_216, 86_410_216),
    ("B/16", "qv"): (85_659_648, 86_428_648),
    ("L/16", "none"): (303_079_424, 304_104_424),
    ("L/16", "qv"): (303_128_576, 304_153_576),
}


@pytest.mark.parametrize(
    "variant,qkv_bias",
    [
        pytest.param(*key, marks=[pytest.mark.slow] if key[0] == "L/16" else [])
        for key in TIMM_COUNTS
    ],
)
def test_sizes_have_timms_parameter_counts(variant, qkv_bias):
    headless, with_head = TIMM_COUNTS[variant, qkv_bias]
    assert count_params(variant, include_top=False, qkv_bias=qkv_bias) == headless
    assert count_params(variant, num_classes=1000, qkv_bias=qkv_bias) == with_head
    model = DINOv3(variant, include_top=False, qkv_bias=qkv_bias, image_size=32)
    assert model.count_params() == headless
    model = DINOv3(variant, num_classes=1000, qkv_bias=qkv_bias, image_size=32)
    assert model.count_params() == with_head


def test_named_builders_use_the_dinov3_options():
    model = keras_vit.DINOv3_S16(include_top=False, image_size=32)
    arch = Architecture.from_model(model)
    assert (arch.hidden_dim, arch.num_heads, arch.num_layers, arch.mlp_dim) == (384, 6, 12, 1536)
    assert arch.position_embedding == "rope" and arch.num_register_tokens == 4
    assert arch.layer_scale and arch.qkv_bias == "none" and arch.pooling == "token"
    block = model.get_layer("encoderblock_0")
    assert block.layer_norm_epsilon == 1e-5 and block.gelu_approximate is False
    assert block.layer_scale_init == 1e-5 and block.rope["temperature"] == 100.0
    assert model.name == "dinov3_s16"


GATED_TIMM_COUNTS = {
    ("H+/16", "none"): (840_509_440, 841_790_440),
    ("H+/16", "qv"): (840_591_360, 841_872_360),
    ("7B/16", "none"): (6_716_030_976, 6_720_127_976),
}


@pytest.mark.parametrize("variant,qkv_bias", list(GATED_TIMM_COUNTS))
def test_gated_sizes_count_timms_parameters(variant, qkv_bias):
    headless, with_head = GATED_TIMM_COUNTS[variant, qkv_bias]
    assert count_params(variant, include_top=False, qkv_bias=qkv_bias) == headless
    assert count_params(variant, num_classes=1000, qkv_bias=qkv_bias) == with_head
    kwargs = dinov3_kwargs(variant)
    assert kwargs["mlp_activation"] == "swiglu" and kwargs["num_heads"] in (20, 32)
    builder = {"H+/16": keras_vit.DINOv3_Hplus16, "7B/16": keras_vit.DINOv3_7B16}[variant]
    assert variant in builder.__doc__


@pytest.mark.large
def test_h_plus_builds_with_timms_count():
    """H+/16 built in Keras (840M weights, 3.4 GB in float32; 7B/16 is never built)."""
    model = DINOv3("H+/16", include_top=False, image_size=32)
    assert model.count_params() == GATED_TIMM_COUNTS["H+/16", "none"][0]


@pytest.mark.parametrize(
    "options",
    [
        dict(mlp_activation="swiglu", qkv_bias="qv", patch_size=(4, 8), channels=1),
        dict(mlp_activation="swiglu", qkv_bias="none", include_top=False, pooling="patch_gap"),
        dict(qkv_bias="qkv", num_register_tokens=0, layer_scale_init=None, num_classes=3),
    ],
)
def test_the_shape_count_is_a_built_models_count(options):
    tiny = dict(hidden_dim=16, num_heads=2, mlp_dim=24, num_layers=2, **options)
    built = DINOv3("S/16", image_size=16, **tiny)
    assert count_params("S/16", **tiny) == built.count_params()


def test_the_shape_count_refuses_what_it_does_not_count():
    with pytest.raises(ValueError, match=r"does not count \['representation_size'\]"):
        count_params("S/16", representation_size=8)
    with pytest.raises(ValueError, match="pooling='map'"):
        count_params("S/16", pooling="map")


def test_unknown_size_is_refused():
    with pytest.raises(ValueError, match="Unknown DINOv3 size 'g/14'"):
        dinov3_kwargs("g/14")


def test_finetune_at_a_new_size_keeps_the_body_and_rotates_the_new_grid():
    tiny = dict(hidden_dim=16, num_heads=2, mlp_dim=32, num_layers=2, patch_size=4)
    model = randomise(DINOv3("S/16", num_classes=3, image_size=(8, 12), **tiny), seed=2)
    tuned = keras_vit.finetune(model, num_classes=4, image_size=(16, 16))
    assert tuned.output_shape == (None, 4)
    assert np.all(tuned.get_layer("head").get_weights()[0] == 0)
    assert tuned.get_layer("encoderblock_0").rope["grid_size"] == [4, 4]
    randomise(tuned.get_layer("head"), seed=3)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    from keras_vit.checkpoints.base.naming import official_arrays

    want = family_forward(
        official_arrays(tuned),
        x,
        num_heads=2,
        gelu_approximate=False,
        layer_norm_epsilon=1e-5,
        rope=True,
    )
    got = np.asarray(tuned(x, training=False), np.float64)
    assert np.abs(got).max() > 1e-3
    np.testing.assert_allclose(got, want, atol=2e-5)


GATED_TINY = dict(hidden_dim=16, num_heads=2, mlp_dim=24, num_layers=2, patch_size=4)


def _gated_model(**kwargs):
    """A tiny DINOv3 with the H+ / 7B gated MLP, every weight random (the head too)."""
    model = DINOv3("H+/16", num_classes=3, image_size=(8, 12), qkv_bias="qv", **GATED_TINY)
    return randomise(model, seed=4)


def _reference(model, x):
    from keras_vit.checkpoints.base.naming import official_arrays

    return family_forward(
        official_arrays(model),
        x,
        num_heads=2,
        gelu_approximate=False,
        layer_norm_epsilon=1e-5,
        rope=True,
        mlp_activation="swiglu",
    )


def test_the_gated_mlp_is_the_numpy_swiglu_and_round_trips_through_keras_and_npz(tmp_path):
    model = _gated_model()
    block = model.get_layer("encoderblock_0")
    assert block.get_config()["mlp_activation"] == "swiglu"
    assert [p.name for p in block.projections()][-3:] == ["Dense_0", "Dense_gate", "Dense_1"]
    x = np.random.default_rng(0).uniform(-1, 1, (2, 8, 12, 3)).astype("float32")
    want = _reference(model, x)
    got = np.asarray(model(x, training=False), np.float64)
    assert np.abs(got).max() > 1e-2
    np.testing.assert_allclose(got, want, atol=2e-5)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    np.testing.assert_allclose(np.asarray(loaded(x), np.float64), want, atol=2e-5)
    keras_vit.save_npz(model, tmp_path / "m.npz")
    # the gated MLP has no GELU: a model whose unused `gelu_approximate` differs loads silently
    other = randomise(
        DINOv3(
            "H+/16",
            image_size=(8, 12),
            qkv_bias="qv",
            num_classes=3,
            gelu_approximate=True,
            **GATED_TINY,
        ),
        seed=9,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        keras_vit.load_weights(other, tmp_path / "m.npz")
    np.testing.assert_allclose(np.asarray(other(x), np.float64), want, atol=2e-5)
    back = keras_vit.from_checkpoint(tmp_path / "m.npz")
    assert back.get_layer("encoderblock_1").mlp_activation == "swiglu"
    np.testing.assert_allclose(np.asarray(back(x), np.float64), want, atol=2e-5)
    maps = keras_vit.attention_maps(model, x)
    assert [m.shape for m in maps] == [(2, 2, 11, 11)] * 2  # cls, 4 storage, 2 x 3 patches
    gate = model.get_layer("encoderblock_0").mlp.dense_gate.kernel
    gate.assign(np.zeros(gate.shape, "float32"))  # silu(0 + bias): block 1's input changes
    assert np.abs(keras_vit.attention_maps(model, x)[1] - maps[1]).max() > 1e-3


def test_lora_adapts_the_gate_and_bfloat16_follows_the_float32_model():
    from keras_vit.model.lora import lora_projections

    model = _gated_model()
    gates = [p for p in lora_projections(model) if p.name == "Dense_gate"]
    assert len(gates) == 2
    x = np.random.default_rng(1).uniform(-1, 1, (2, 8, 12, 3)).astype("float32")
    want = np.asarray(model(x, training=False))
    keras.config.set_dtype_policy("mixed_bfloat16")
    half = _gated_model()
    half.set_weights(model.get_weights())
    got = np.asarray(keras.ops.cast(half(x, training=False), "float32"))
    assert half.get_layer("encoderblock_0").mlp.dense_gate.compute_dtype == "bfloat16"
    np.testing.assert_allclose(got, want, atol=0.05 * np.abs(want).max())


def test_dynamic_size_predict_retraces_for_a_second_grid():
    # predict's traced step generalises the image shape after a second size; the last block's
    # class-token queries then have a token count known only at run time.
    tiny = dict(hidden_dim=16, num_heads=2, mlp_dim=32, num_layers=2, patch_size=4)
    model = DINOv3("S/16", num_classes=3, image_size=(8, 12), dynamic_image_size=True, **tiny)
    randomise(model, seed=4)
    rng = np.random.default_rng(1)
    for size in [(8, 12), (16, 8), (12, 12)]:
        x = rng.uniform(0, 255, (2, *size, 3)).astype("float32")
        got = model.predict(x, verbose=0)
        np.testing.assert_allclose(got, np.asarray(model(x, training=False)), atol=1e-5)
