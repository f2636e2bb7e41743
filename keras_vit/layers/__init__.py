"""Keras layers of the Vision Transformer, each usable on its own.

The names are imported on first use (PEP 562 module `__getattr__`), as the package root's
are: `from keras_vit.layers import TransformerBlock` imports that layer's module only.
`keras_vit._registration` imports every name of `__all__` once Keras is imported, so every
layer is registered for `.keras` loading.
"""

from __future__ import annotations

from keras_vit._lazy import lazy_exports

# public name -> the module that defines it
_EXPORTS = {
    "AddPositionEmbs": "keras_vit.layers.position_embedding",
    "AddSinCosPositionEmbs": "keras_vit.layers.position_embedding",
    "BottleneckUnit": "keras_vit.layers.resnet",
    "ClassToken": "keras_vit.layers.class_token",
    "Dropout": "keras_vit.layers.dropout",
    "HeadProjection": "keras_vit.layers.head_projection",
    "LayerScale": "keras_vit.layers.layer_scale",
    "LearnedTokens": "keras_vit.layers.learned_tokens",
    "MAPHead": "keras_vit.layers.map_head",
    "MlpBlock": "keras_vit.layers.mlp",
    "MultiHeadSelfAttention": "keras_vit.layers.attention",
    "PatchEmbed": "keras_vit.layers.patch_embed",
    "StdConv2D": "keras_vit.layers.resnet",
    "TokenPooling": "keras_vit.layers.pooling",
    "TransformerBlock": "keras_vit.layers.transformer_block",
    "ZeroPaddedMaxPool": "keras_vit.layers.resnet",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
