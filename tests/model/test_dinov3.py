"""DINOv3's named sizes: exactly timm's parameter counts, the shared options, the SwiGLU
sizes refused by name, and fine-tuning at a new image size (RoPE has nothing to resize).

The counts are timm 1.0.31's, `sum(p.numel() for p in timm.create_model(name,
pretrained=False, num_classes=N).parameters())` (eva.py's `vit_*_patch16_dinov3` and
`*_dinov3_qkvb` definitions; N=0: no head, timm's DINOv3 default; N=1000: a head). The
models are built at a small image size (RoPE's count does not depend on it) and never run.
"""

from __future__ import annotations

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints.base.architecture import Architecture
from keras_vit.model.dinov3 import DINOv3, dinov3_kwargs
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


@pytest.mark.parametrize("variant", ["H+/16", "7B/16"])
def test_swiglu_sizes_are_refused_by_name(variant):
    with pytest.raises(ValueError, match=rf"DINOv3 {variant.replace('+', '[+]')} .*SwiGLU"):
        DINOv3(variant)


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
