"""The one size table (`keras_vit.spec.configs`): every named model, its builder, and the places
that derive from it (CLI help, the training recipe, checkpoint names)."""

import argparse

import keras_vit
from keras_vit.cli import train as train_cli
from keras_vit.spec import configs
from keras_vit.train import training


def test_every_named_model_has_its_builder():
    assert len(configs.MODEL_CONFIGS) == len(configs.VIT_CONFIGS) + len(configs.HYBRID_CONFIGS)
    for variant in configs.MODEL_CONFIGS:
        builder = getattr(keras_vit, configs.builder_name(variant))
        assert builder.__name__ == configs.builder_name(variant)


def test_builder_and_release_names():
    # The release's file names (vit_jax README): ViT-B_16.npz, R50+ViT-B_16.npz.
    assert configs.builder_name("B/16") == "ViT_B16"
    assert configs.builder_name("R+Ti/16") == "R_Ti16"
    assert configs.release_name("R50+B/16") == "R50+ViT-B_16"
    assert configs.table_name("R50+ViT-B_16") == "R50+B/16"
    assert configs.table_name("ViT-L_32") == "L/32"


def test_hybrid_stride_is_the_release_resnet_stride():
    # Root /4, each stage after the first /2 (paper section 3.1; 14x14 tokens at 224).
    assert configs.HYBRID_CONFIGS["R50+B/16"].total_stride == 16
    assert configs.HYBRID_CONFIGS["R+Ti/16"].total_stride == 4
    assert configs.HYBRID_CONFIGS["R26+B/32"].total_stride == 32


def test_train_help_lists_every_variant():
    parser = argparse.ArgumentParser()
    train_cli.add_parser(parser.add_subparsers())
    sub = parser._subparsers._group_actions[0].choices["train"]
    help_text = next(a.help for a in sub._actions if a.dest == "model")
    for variant in configs.MODEL_CONFIGS:  # hybrids too: train builds them
        assert variant in help_text


def test_train_recipe_sizes_come_from_the_table():
    recipe = training.TrainConfig()
    fields = ("patch_size", "hidden_dim", "mlp_dim", "num_heads", "num_layers")
    assert {f: getattr(recipe, f) for f in fields} == {
        f: getattr(configs.RECIPE_VIT, f) for f in fields
    }
