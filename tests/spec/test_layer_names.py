"""spec/layer_names: the release's checkpoint keys (vit_jax/models_vit.py: `Transformer/
encoderblock_{i}/...`, `Transformer/posembed_input/pos_embedding`) and the name helpers."""

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from keras_vit.spec import layer_names as names


def test_release_keys_are_literal():
    assert names.POSITION_KEY == "Transformer/posembed_input/pos_embedding"
    assert names.NORM_PRE_KEY == "Transformer/norm_pre/scale"
    assert names.QUERY_KERNEL == "MultiHeadDotProductAttention_1/query/kernel"
    assert names.MLP_IN_KERNEL == "MlpBlock_3/Dense_0/kernel"
    assert names.block_key(0, names.MLP_IN_KERNEL) == (
        "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"
    )
    assert names.block_key(11) == "Transformer/encoderblock_11/"
    assert names.unit_name(1, 2) == "block1_unit2"
    assert names.FEATURE_LAYERS[0] == names.PRE_LOGITS
    assert names.CLASSIFIER_OUTPUTS[-1] == names.HEAD == "head"


@settings(max_examples=25, deadline=None)
@given(index=st.integers(0, 10_000))
def test_block_name_and_index_round_trip(index):
    name = names.block_name(index)
    assert name == f"encoderblock_{index}"
    assert names.block_index(name) == index
    key = names.block_key(index, names.QUERY_KERNEL)
    assert re.match(names.BLOCK_KEY_PATTERN, key)[1] == str(index)


@settings(max_examples=25, deadline=None)
@given(stage=st.integers(1, 9), unit=st.integers(1, 99))
def test_unit_names_match_the_unit_pattern(stage, unit):
    match = re.fullmatch(names.UNIT_PATTERN, names.unit_name(stage, unit))
    assert (int(match[1]), int(match[2])) == (stage, unit)


def test_other_names_are_not_blocks():
    for name in (
        "encoderblock_",
        "encoderblock_x",
        "encoderblock_3a",
        "xencoderblock_3",
        "encoder_norm",
        "Transformer/encoderblock_3",
        "encoderblock_-1",
    ):
        assert names.block_index(name) is None, name


def test_a_built_model_uses_the_names(tiny_vit_kwargs):
    import keras_vit

    model = keras_vit.ViT(**tiny_vit_kwargs)
    layer_names = {layer.name for layer in model.layers}
    assert {
        names.EMBEDDING,
        names.CLASS_TOKEN,
        names.POSITION_EMBEDDING,
        names.ENCODER_NORM,
        names.HEAD,
        names.block_name(0),
    } <= layer_names
