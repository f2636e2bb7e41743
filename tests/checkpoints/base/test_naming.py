"""Keras variable <-> official key mapping (vit_facts.md section 3), hybrids included."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints import CheckpointError, official_variables, save_npz
from keras_vit.checkpoints.base.naming import official_key

ARCH = dict(patch_size=8, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2)


@pytest.mark.parametrize(
    "layer, inner, expected",
    [
        ("embedding", ["conv", "kernel"], "embedding/kernel"),
        ("cls", ["cls"], "cls"),
        ("posembed_input", ["pos_embedding"], "Transformer/posembed_input/pos_embedding"),
        (
            "encoderblock_11",
            ["LayerNorm_0", "gamma"],
            "Transformer/encoderblock_11/LayerNorm_0/scale",
        ),
        (
            "encoderblock_0",
            ["MultiHeadDotProductAttention_1", "out", "bias"],
            "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/out/bias",
        ),
        ("encoder_norm", ["beta"], "Transformer/encoder_norm/bias"),
        ("pre_logits", ["kernel"], "pre_logits/kernel"),
        ("head", ["bias"], "head/bias"),
        ("conv_root", ["kernel"], "conv_root/kernel"),
        ("gn_root", ["gamma"], "gn_root/scale"),
        ("block3_unit9", ["conv2", "kernel"], "block3/unit9/conv2/kernel"),
        ("block1_unit1", ["gn_proj", "beta"], "block1/unit1/gn_proj/bias"),
        ("dropout", ["seed"], None),
    ],
)
def test_rules(layer, inner, expected):
    assert official_key(layer, inner) == expected


def _expected_hybrid_keys(stages, num_layers, with_cls=True):
    """Hybrid key set written from vit_facts.md section 3 (1-based stages and units)."""
    keys = {"conv_root/kernel", "gn_root/scale", "gn_root/bias"}
    for s, units in enumerate(stages, start=1):
        for u in range(1, units + 1):
            unit = f"block{s}/unit{u}/"
            names = ["conv1", "conv2", "conv3"] + (["conv_proj"] if u == 1 else [])
            for conv in names:
                keys.add(unit + conv + "/kernel")
                norm = conv.replace("conv", "gn")
                keys.update({unit + norm + "/scale", unit + norm + "/bias"})
    keys.update({"embedding/kernel", "embedding/bias", "Transformer/posembed_input/pos_embedding"})
    keys.update({"Transformer/encoder_norm/scale", "Transformer/encoder_norm/bias"})
    keys.update({"head/kernel", "head/bias"} | ({"cls"} if with_cls else set()))
    for i in range(num_layers):
        block = f"Transformer/encoderblock_{i}/"
        for norm in ("LayerNorm_0", "LayerNorm_2"):
            keys.update({f"{block}{norm}/scale", f"{block}{norm}/bias"})
        for proj in ("query", "key", "value", "out"):
            prefix = f"{block}MultiHeadDotProductAttention_1/{proj}/"
            keys.update({prefix + "kernel", prefix + "bias"})
        for dense in ("Dense_0", "Dense_1"):
            keys.update({f"{block}MlpBlock_3/{dense}/kernel", f"{block}MlpBlock_3/{dense}/bias"})
    return keys


def test_hybrid_keys_follow_the_release():
    model = keras_vit.HybridViT(
        image_size=32, resnet_stages=(2, 1), num_classes=10, **{**ARCH, "patch_size": 1}
    )
    variables, unnamed = official_variables(model)
    assert unnamed == []
    assert set(variables) == _expected_hybrid_keys((2, 1), 2)
    assert tuple(variables["block2/unit1/conv_proj/kernel"].shape) == (1, 1, 256, 512)
    assert tuple(variables["gn_root/scale"].shape) == (64,)
    # the release's key-count formula for R50+B/16 (vit_facts: 356 keys) from the same rules
    assert len(_expected_hybrid_keys((3, 4, 9), 12)) == 356


def test_weights_without_an_official_name(tmp_path):
    vit = keras_vit.ViT(image_size=32, num_classes=10, **ARCH)
    extra = keras.layers.Dense(3, name="extra")(vit.output)
    model = keras.Model(vit.inputs, extra)
    variables, unnamed = official_variables(model)
    assert unnamed == ["extra/kernel", "extra/bias"]
    assert "head/kernel" in variables
    with pytest.raises(CheckpointError, match="extra/kernel"):
        save_npz(model, tmp_path / "x.npz")


def test_two_vits_in_one_model_is_ambiguous():
    a = keras_vit.ViT(image_size=32, num_classes=10, name="a", **ARCH)
    b = keras_vit.ViT(image_size=32, num_classes=10, name="b", **ARCH)
    images = keras.Input((32, 32, 3))
    both = keras.Model(images, keras.layers.Add()([a(images), b(images)]))
    with pytest.raises(CheckpointError, match="2"):
        official_variables(both)


def test_mapping_ignores_prefixes_keras_adds():
    """Variables keep their official keys when the ViT sits inside another model."""
    vit = keras_vit.ViT(image_size=32, num_classes=10, **ARCH)
    wrapper = keras.Sequential([keras.Input((32, 32, 3)), vit], name="wrapper")
    direct, _ = official_variables(vit)
    nested, _ = official_variables(wrapper)
    assert list(direct) == list(nested)
    assert all(direct[k] is nested[k] for k in direct)
    assert np.shape(direct["cls"]) == (1, 1, 32)
