"""The format matrix: architectures drawn over the option space, written in every
format of the table and read back.

For each draw (pooling token/gap/patch_gap/map, final norm on the tokens or timm's `fc_norm` after
pooling, a pre-logits layer or none, a head or none, square and non-square grids, 1/3/4
channels, the tanh or exact GELU; DINOv3's rotary position embedding or a table, with its
storage tokens, LayerScale and q/k/v biases) and each format: if the format can express the
draw, write -> read gives the same logits (1e-5) both through `from_checkpoint` and loaded
into a freshly built model; if not, the writer refuses, naming the option, and leaves no
file. What each format can express is written here from the formats' own definitions
(transformers' `ViTModel` / `ViTForImageClassification`, `SiglipVisionModel`,
`DINOv3ViTModel`, timm's `VisionTransformer` and its DINOv3 `Eva`, the release's `.npz` with
keras_vit's `keras_vit/metadata` member), not taken from keras_vit's table, which is checked
against it.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import keras_vit
from keras_vit.checkpoints import (
    CheckpointError,
    load_weights,
    model_contents,
    write_checkpoint,
)
from keras_vit.checkpoints.format_table import FORMAT_TABLE, options_of, refusal
from tests.checkpoints.random_models import TINY_SIZES, images_for, logits, randomise

PATCH = 4
WRITTEN = ("npz", "hf", "timm")  # plus .keras through model.save


@st.composite
def architectures(draw):
    """ViT keyword arguments over the option space (tiny: patch 4, grid 2-5 per side)."""
    pooling = draw(st.sampled_from(["token", "gap", "patch_gap", "map"]))
    final_norm = "tokens" if pooling == "map" else draw(st.sampled_from(["tokens", "pooled"]))
    grid = draw(st.sampled_from([(2, 2), (3, 3), (2, 3), (3, 5)]))  # 1 + 3x5 = 4x4
    rope = {}
    if draw(st.booleans()):
        rope = dict(
            position_embedding="rope",
            num_register_tokens=0 if pooling == "map" else draw(st.sampled_from([0, 2])),
            layer_scale_init=draw(st.sampled_from([None, 0.5])),
            qkv_bias=draw(st.sampled_from(["qkv", "qv", "none"])),
        )
    return dict(
        TINY_SIZES,
        patch_size=PATCH,
        image_size=(grid[0] * PATCH, grid[1] * PATCH),
        channels=draw(st.sampled_from([1, 3, 4])),
        gelu_approximate=draw(st.booleans()),  # tanh (timm "gelu_tanh") or exact GELU
        pooling=pooling,
        final_norm=final_norm,
        representation_size=draw(st.sampled_from([None, 16])),
        include_top=draw(st.booleans()),
        num_classes=5,
        # the gated MLP of DINOv3 H+ / 7B (no MAP head has one)
        mlp_activation="gelu" if pooling == "map" else draw(st.sampled_from(["gelu", "swiglu"])),
        **rope,
    )


def expected_refusals(kwargs) -> dict:
    """`{format: option it cannot express}` for the draw, from the formats' definitions."""
    if kwargs.get("position_embedding") == "rope":
        return _rope_refusals(kwargs)
    out = _gated_refusals(kwargs)
    pre_logits_under_head = kwargs["representation_size"] is not None and kwargs["include_top"]
    size = kwargs["image_size"]
    if kwargs["pooling"] == "map":  # SiglipVisionModel: MAP pooling, no classifier
        if kwargs["include_top"]:
            out["hf"] = "head"
        elif kwargs["representation_size"] is not None:
            out["hf"] = "pre_logits"
        elif size[0] != size[1]:  # its config has one image_size (num_patches: a square)
            out["hf"] = "grid"
    elif kwargs["pooling"] != "token":  # ViTModel always pools its class token
        out["hf"] = "pooling"
    if kwargs["pooling"] == "patch_gap":  # VisionTransformer's "avg" beside a class token
        out["timm"] = "pooling"
    elif kwargs["final_norm"] == "pooled":  # no LayerNorm after ViT's pooler
        out["hf"] = "final_norm"
    elif pre_logits_under_head:  # ViTForImageClassification has no pooler
        out["hf"] = "pre_logits"
    return out


def _gated_refusals(kwargs) -> dict:
    """A gated (SwiGLU) MLP without RoPE: only the DINOv3 layouts of timm and HF have one,
    so both refuse it (the release's .npz records it in keras_vit/metadata)."""
    if kwargs.get("mlp_activation") != "swiglu":
        return {}
    return {"timm": "mlp_activation", "hf": "mlp_activation"}


def _rope_refusals(kwargs) -> dict:
    """A RoPE model: the release's .npz holds it (keras_vit/metadata); timm's DINOv3 `Eva` and
    HF's `DINOv3ViTModel` hold a class token (timm pools it or the patch tokens' mean, HF
    the class token), its final `norm` (no `fc_norm`) and no pre-logits layer; timm's has no
    key bias, HF's model no head and always LayerScale."""
    out = {}
    dinov3 = (
        kwargs["pooling"] in ("token", "patch_gap")
        and kwargs["final_norm"] == "tokens"
        and kwargs["representation_size"] is None
    )
    if not dinov3 or kwargs["qkv_bias"] == "qkv":
        out["timm"] = "rope"
    if not dinov3 or kwargs["include_top"] or kwargs["layer_scale_init"] is None:
        out["hf"] = "rope" if kwargs["pooling"] == "token" else "pooling"
    if kwargs["pooling"] == "token" and kwargs["final_norm"] == "pooled":
        out["hf"] = "final_norm"
    return out


def _round_trip(model, fresh, kwargs, kind, folder, x, expected):
    """Writes `model` as `kind`, reads it back both ways, compares with `expected`."""
    path = os.path.join(folder, {"npz": "m.npz", "hf": "hf", "timm": "m.safetensors"}[kind])
    write_checkpoint(model_contents(model), path, kind)
    size = kwargs["image_size"]
    # The release's .npz records no grid: a non-square one is told by image_size=.
    extra = {"image_size": size} if kind == "npz" and size[0] != size[1] else {}
    back = keras_vit.from_checkpoint(path, **extra)
    np.testing.assert_allclose(logits(back, x), expected, atol=1e-5, rtol=0, err_msg=kind)
    randomise(fresh, seed=7)
    load_weights(fresh, path)
    np.testing.assert_allclose(logits(fresh, x), expected, atol=1e-5, rtol=0, err_msg=kind)


@given(kwargs=architectures())
def test_every_format_round_trips_or_refuses_by_name(tmp_path_factory, kwargs):
    folder = str(tmp_path_factory.mktemp("matrix"))
    model = randomise(keras_vit.ViT(**kwargs), seed=1)
    fresh = keras_vit.ViT(**kwargs)
    x = images_for(model)
    expected = logits(model, x)
    refused = expected_refusals(kwargs)
    contents = model_contents(model)
    for kind in WRITTEN:
        table_says = refusal(kind, contents)
        assert (table_says is None) == (kind not in refused), (kind, table_says, kwargs)
        if kind in refused:
            target = os.path.join(folder, f"refused_{kind}")
            with pytest.raises(CheckpointError, match=f"{refused[kind]}="):
                write_checkpoint(contents, target, kind)
            assert not os.path.exists(target)
        else:
            _round_trip(model, fresh, kwargs, kind, folder, x, expected)
    model.save(os.path.join(folder, "m.keras"))
    back = keras_vit.from_checkpoint(os.path.join(folder, "m.keras"))
    np.testing.assert_allclose(logits(back, x), expected, atol=1e-5, rtol=0, err_msg="keras")
    keras.backend.clear_session()


def test_options_of_a_model_are_what_it_was_built_with():
    model = keras_vit.ViT(
        **dict(TINY_SIZES, patch_size=4, image_size=(8, 12), channels=4),
        pooling="gap",
        final_norm="pooled",
        representation_size=16,
        include_top=False,
        input_preprocessing="imagenet",
    )
    assert options_of(model_contents(model)) == {
        "pooling": "gap",
        "final_norm": "pooled",
        "pre_logits": "feature",
        "head": False,
        "grid": "non-square",
        "patch": "square",
        "channels": 4,
        "hybrid": False,
        "preprocessing": "imagenet",
        "layer_scale": False,
        "registers": 0,
        "distillation": False,
        "no_embed_class": False,
        "norm_pre": False,
        "mlp_activation": "gelu",
        "resnet_groups": None,
        "rope": False,
        "qkv_bias": "qkv",
    }


@pytest.mark.parametrize("groups", [8, 32])
def test_a_hybrids_groupnorm_groups_are_written_only_where_read_back(tmp_path, groups):
    """No file format but .keras records a hybrid's GroupNorm groups, and its readers build
    the release's 32: a model with 8 (the default `keras-vit train` model) was written and
    read back as another model. Now the writers refuse it, naming the option; 32 round-trips."""
    from keras_vit.train import training

    model = training.TrainConfig(resnet_groups=groups).build(num_classes=5, channels=1)
    model = randomise(model, seed=1)
    contents = model_contents(model)
    assert options_of(contents)["resnet_groups"] == groups
    x = images_for(model)
    expected = logits(model, x)
    for kind, name in (("npz", "m.npz"), ("timm", "m.safetensors")):
        path = tmp_path / name
        if groups != 32:
            with pytest.raises(CheckpointError, match=f"resnet_groups={groups} "):
                write_checkpoint(contents, str(path), kind)
            assert not path.exists()
            continue
        write_checkpoint(contents, str(path), kind)
        back = keras_vit.from_checkpoint(str(path), image_size=model.input_shape[1:3])
        np.testing.assert_allclose(logits(back, x), expected, atol=1e-5, rtol=0, err_msg=kind)
    model.save(tmp_path / "m.keras")  # .keras holds any count
    back = keras_vit.from_checkpoint(str(tmp_path / "m.keras"))
    np.testing.assert_allclose(logits(back, x), expected, atol=1e-5, rtol=0)


def test_every_row_of_the_table_reads_what_detection_names():
    for name, row in FORMAT_TABLE.items():
        assert row.name == name and callable(row.reader) and callable(row.recognise)
        assert row.recognised_by and isinstance(row.expresses, dict)


def test_docs_hold_the_table_as_rendered():
    from pathlib import Path

    from keras_vit.checkpoints.format_table import format_table_markdown

    text = (Path(__file__).parents[2] / "docs" / "checkpoints.md").read_text()
    start = text.index("-->\n", text.index("<!-- format-table: start")) + 4
    end = text.index("<!-- format-table: end -->")
    assert text[start:end] == format_table_markdown()
