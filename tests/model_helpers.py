"""Test helpers that put official-key arrays into a keras_vit model by explicit layer access.

Independent of keras_vit.checkpoints: each array is assigned to the variable of the layer
that the paper's equation names, so core tests can compare with tests/numpy_reference.py.
"""

from __future__ import annotations

import numpy as np


def _assign_dense(layer, params, prefix):
    layer.kernel.assign(params[prefix + "/kernel"])
    layer.bias.assign(params[prefix + "/bias"])


def _assign_norm(layer, params, prefix):
    layer.gamma.assign(params[prefix + "/scale"])
    layer.beta.assign(params[prefix + "/bias"])


def assign_official_params(model, params):
    """Sets every weight of a keras_vit ViT from a dict keyed by official checkpoint names."""
    _assign_dense(model.get_layer("embedding").conv, params, "embedding")
    if "cls" in params:
        model.get_layer("cls").cls.assign(params["cls"])
    model.get_layer("posembed_input").pos_embedding.assign(
        params["Transformer/posembed_input/pos_embedding"]
    )
    i = 0
    while f"Transformer/encoderblock_{i}/LayerNorm_0/scale" in params:
        p = f"Transformer/encoderblock_{i}/"
        block = model.get_layer(f"encoderblock_{i}")
        _assign_norm(block.norm_0, params, p + "LayerNorm_0")
        _assign_norm(block.norm_2, params, p + "LayerNorm_2")
        for name in ("query", "key", "value", "out"):
            _assign_dense(
                getattr(block.attention, name), params, p + "MultiHeadDotProductAttention_1/" + name
            )
        _assign_dense(block.mlp.dense_0, params, p + "MlpBlock_3/Dense_0")
        _assign_dense(block.mlp.dense_1, params, p + "MlpBlock_3/Dense_1")
        i += 1
    if "fc_norm/scale" in params:
        _assign_norm(model.get_layer("fc_norm"), params, "fc_norm")
    else:
        _assign_norm(model.get_layer("encoder_norm"), params, "Transformer/encoder_norm")
    if "pre_logits/kernel" in params:
        _assign_dense(model.get_layer("pre_logits"), params, "pre_logits")
    if "head/kernel" in params:
        _assign_dense(model.get_layer("head"), params, "head")


def random_images(rng, batch, height, width, channels=3):
    """Images already in [-1, 1], float32."""
    return rng.uniform(-1, 1, (batch, height, width, channels)).astype(np.float32)
