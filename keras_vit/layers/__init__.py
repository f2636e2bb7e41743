"""Keras layers of the Vision Transformer, each usable on its own."""

from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.class_token import ClassToken
from keras_vit.layers.layer_scale import LayerScale
from keras_vit.layers.learned_tokens import LearnedTokens
from keras_vit.layers.map_head import MAPHead
from keras_vit.layers.mlp import MlpBlock
from keras_vit.layers.patch_embed import PatchEmbed
from keras_vit.layers.pooling import TokenPooling
from keras_vit.layers.position_embedding import AddPositionEmbs, AddSinCosPositionEmbs
from keras_vit.layers.resnet import BottleneckUnit, StdConv2D
from keras_vit.layers.transformer_block import TransformerBlock

__all__ = [
    "AddPositionEmbs",
    "AddSinCosPositionEmbs",
    "BottleneckUnit",
    "ClassToken",
    "LayerScale",
    "LearnedTokens",
    "MAPHead",
    "MlpBlock",
    "MultiHeadSelfAttention",
    "PatchEmbed",
    "StdConv2D",
    "TokenPooling",
    "TransformerBlock",
]
