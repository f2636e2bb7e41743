"""Build the ViT or hybrid a dict of keyword arguments describes (the form config.json and
the checkpoint readers record a model in): `keras_vit.HybridViT` when it names
`resnet_stages`, else `keras_vit.ViT`.

It sits just above `keras_vit.models` and `keras_vit.hybrid`, so that the code below them
(`keras_vit.checkpoints.from_checkpoint`) reaches the builders through one narrow door; the
"model from anything" resolver is `keras_vit.model_source`.
"""

from __future__ import annotations


def builder_of(kwargs: dict):
    """`keras_vit.HybridViT` if `kwargs` hold `resnet_stages`, else `keras_vit.ViT`.

    >>> builder_of({"resnet_stages": [3, 4, 9]}).__name__
    'HybridViT'
    >>> builder_of({"patch_size": 16}).__name__
    'ViT'
    """
    if "resnet_stages" in kwargs:
        from keras_vit.hybrid import HybridViT

        return HybridViT
    from keras_vit.models import ViT

    return ViT


def build(kwargs: dict):
    """`builder_of(kwargs)(**kwargs)`, with a JSON list of `resnet_stages` made a tuple.

    Raises:
        ValueError: whatever the builder raises for bad arguments.
    """
    kwargs = dict(kwargs)
    if "resnet_stages" in kwargs:
        kwargs["resnet_stages"] = tuple(kwargs["resnet_stages"])
    return builder_of(kwargs)(**kwargs)
