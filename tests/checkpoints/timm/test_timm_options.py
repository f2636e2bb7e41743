"""checkpoints/timm_options: what a timm file and its `config.json` (timm's `save_for_hf`:
`architecture`, `global_pool`, `model_args`, `pretrained_cfg.input_size` [C, H, W]) say about
`global_pool`, the image size and `no_embed_class` (DeiT-3), in the documented order."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.checkpoints.timm.timm_options import (
    check_global_pool,
    image_size_of,
    model_args,
    no_embed_class_of,
)


def test_model_args_only_when_a_dict():
    assert model_args({"model_args": {"img_size": 224}}) == {"img_size": 224}
    assert model_args({"model_args": [1]}) == {} and model_args({}) == {}


@pytest.mark.parametrize(
    "metadata, config, class_token",
    [
        ({}, {}, True),
        ({}, {"global_pool": "token"}, True),
        ({}, {"model_args": {"global_pool": "avg"}}, False),
        ({"keras_vit.global_pool": "token"}, {"global_pool": "avg"}, True),  # metadata first
    ],
)
def test_global_pools_keras_vit_holds(metadata, config, class_token):
    check_global_pool(metadata, config, class_token, "f.safetensors")


@pytest.mark.parametrize(
    "config, class_token, rule",
    [
        ({"global_pool": "avg"}, True, "global_pool='avg' with a class token"),
        (
            {"model_args": {"global_pool": "map"}},
            True,
            "global_pool='map' but the file has no attention-pooling tensors",
        ),
        ({"global_pool": "token"}, False, "global_pool='token' but the file has no cls_token"),
    ],
)
def test_other_global_pools_are_refused_naming_the_file(config, class_token, rule):
    with pytest.raises(CheckpointError, match=rf"^f\.safetensors: {rule}"):
        check_global_pool({}, config, class_token, "f.safetensors")


@pytest.mark.parametrize(
    "metadata, config, size",
    [
        ({"keras_vit.image_size": "32,48"}, {"model_args": {"img_size": 224}}, (32, 48)),
        ({}, {"pretrained_cfg": {"input_size": [3, 384, 320]}, "model_args": {"img_size": 8}},
         (384, 320)),
        ({}, {"model_args": {"img_size": 224}}, (224, 224)),
        ({}, {"model_args": {"img_size": [240, 256]}}, (240, 256)),
        ({}, {"pretrained_cfg": {"input_size": [224, 224]}}, None),  # not [C, H, W]
        ({}, {}, None),
    ],
)  # fmt: skip
def test_image_size_sources_in_order(metadata, config, size):
    assert image_size_of(metadata, config) == size


def test_no_embed_class_first_source_wins():
    config = {"model_args": {"no_embed_class": True}}
    assert no_embed_class_of(197, (16, 16), {}, config, given=False) is False
    assert no_embed_class_of(197, (16, 16), {"keras_vit.no_embed_class": "false"}, config) is False
    assert no_embed_class_of(197, (16, 16), {}, config) is True
    assert no_embed_class_of(196, (16, 16), {}, {}, registers=True) is True


@settings(max_examples=20, deadline=None)
@given(
    grid=st.tuples(st.integers(1, 12), st.integers(1, 12)),
    patch=st.sampled_from([(14, 14), (16, 16), (8, 4)]),
    class_row=st.booleans(),
    prefix=st.sampled_from([1, 2]),
    from_config=st.booleans(),
)
def test_the_image_size_decides_by_the_row_count(grid, patch, class_row, prefix, from_config):
    tokens = grid[0] * grid[1]
    rows = tokens + (prefix if class_row else 0)
    size = [grid[0] * patch[0], grid[1] * patch[1]]
    config = {"model_args": {"img_size": size}} if from_config else {}
    got = no_embed_class_of(
        rows, patch, {}, config, image_size=None if from_config else size, prefix=prefix
    )
    assert got is (not class_row)


def test_an_image_size_from_the_file_that_fits_neither_reading_is_named():
    config = {"pretrained_cfg": {"input_size": [3, 64, 64]}}
    with pytest.raises(CheckpointError, match=r"pos_embed has 20 rows.*16 patch tokens.*16.*17"):
        no_embed_class_of(20, (16, 16), {}, config, path="m.safetensors")


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(2, 600))
def test_without_any_source_a_square_row_count_is_ambiguous(rows):
    if math.isqrt(rows) ** 2 == rows:
        with pytest.raises(CheckpointError, match=rf"pos_embed of {rows} rows.*no_embed_class="):
            no_embed_class_of(rows, (16, 16), {}, {}, path="f")
    else:
        assert no_embed_class_of(rows, (16, 16), {}, {}) is False  # timm's default
    assert no_embed_class_of(rows, (16, 16), {}, {}, prefix=2) is False


@pytest.mark.parametrize("rows", [4, 196, 256, 577])
def test_square_row_counts(rows):
    """196 = 14x14 (ViT-B/16 at 224 without a class row) is ambiguous for a class-token file;
    with a distillation token too (prefix 2), timm's default holds."""
    if math.isqrt(rows) ** 2 == rows:
        with pytest.raises(CheckpointError, match="no_embed_class=True or no_embed_class=False"):
            no_embed_class_of(rows, (16, 16), {}, {})
    assert no_embed_class_of(rows, (16, 16), {}, {}, prefix=2) is False
