"""Attention weights and intermediate token features of a keras_vit model (paper figs. 6-7).

Both functions build a `keras.Model` view that shares the model's layers: the model itself,
its weights, saved form and forward pass are left untouched and pay nothing.
"""

from __future__ import annotations

import logging
import numbers

import keras
import numpy as np

from keras_vit._validation import check_positive_int
from keras_vit.layers import TokenPooling
from keras_vit.spec.layer_names import POOL_DIST
from keras_vit.visualize.graph import find_encoder, sub_graph_model

logger = logging.getLogger(__name__)


def _block_inputs(block):
    """`(tokens, images)`: the block's token input in its model's graph, and the images it
    was called with (a dynamic-grid RoPE block, `position_embedding="rope"`), else None."""
    try:
        inputs = block.input
    except (AttributeError, ValueError) as error:
        raise ValueError(
            f"Block {block.name!r} must be called exactly once in its model's graph to read its "
            f"input ({error})."
        ) from error
    if isinstance(inputs, (list, tuple)):
        return inputs[0], inputs[1]
    return inputs, None


def _block_input(block):
    return _block_inputs(block)[0]


def _images_key(block) -> str:
    return f"{block.name}:images"


@keras.saving.register_keras_serializable(package="keras_vit")
class AllTokensView(keras.layers.Layer):
    """Runs a `TransformerBlock` on every token, whatever its `num_output_tokens`.

    The last block of a class-token classifier computes only the class token; this view
    shares that block's weights (no copies) and returns its full `(batch, num_tokens,
    hidden_dim)` output, for `feature_extractor`. Saved with the extractor, it stores its
    own copy of the block (config and weights).

    Args:
        block: the `TransformerBlock` (or its serialized config, when loading).
        **kwargs: `name` (default "<block name>_all_tokens"), `dtype`, `trainable`.
    """

    def __init__(self, block, **kwargs):
        if isinstance(block, dict):
            block = keras.saving.deserialize_keras_object(block)
        kwargs.setdefault("name", f"{block.name}_all_tokens")
        kwargs.setdefault("dtype", block.dtype_policy)
        super().__init__(**kwargs)
        self.block = block

    def build(self, input_shape):
        if not self.block.built:
            self.block.build(input_shape)

    def call(self, tokens, training=None, images=None):
        return self.block.forward(tokens, training=training, num_output_tokens=None, images=images)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "block": keras.saving.serialize_keras_object(self.block)}


def _block_output(block):
    """The block's output in the model's graph, with every token (see `AllTokensView`)."""
    if block.num_output_tokens is None:
        return block.output
    tokens, images = _block_inputs(block)
    if images is None:
        return AllTokensView(block)(tokens)
    return AllTokensView(block)(tokens, images=images)


def block_inputs_model(model: keras.Model) -> tuple[keras.Model, tuple]:
    """A model mapping `model`'s input to the input of every `TransformerBlock`.

    Returns:
        `(view, blocks)`: `view(images)` returns a dict, block name -> that block's
        `(batch, num_tokens, hidden_dim)` input (a dict, so that one block is not unwrapped),
        and for a block that takes the images too (a dynamic-grid RoPE block), "<name>:images"
        -> those images.
    """
    path = find_encoder(model)
    outputs = {}
    for block in path.blocks:
        tokens, images = _block_inputs(block)
        outputs[block.name] = tokens
        if images is not None:
            outputs[_images_key(block)] = images
    view = sub_graph_model(path, outputs)
    return view, path.blocks


def attention_maps(model: keras.Model, images, batch_size: int = 32) -> list[np.ndarray]:
    """Attention weights of every Transformer block of a keras_vit model.

    Each block's input is computed by a view of the model (outer input -> block inputs), and
    the weights by `TransformerBlock.attention_probabilities` from the block's own LayerNorm
    and query/key projections: softmax(q k^T / sqrt(head_dim)) (paper eq. 2, appendix A).
    Works for ViTs and hybrids at any (also non-square) resolution, and for a ViT nested
    inside another model (e.g. after fine-tuning with extra layers); inference mode
    (no dropout).

    Args:
        model: a keras_vit model, or a model containing exactly one.
        images: `(batch, height, width, channels)` array in the form the model's input takes
            (for a bare keras_vit model: scaled to [-1, 1], see `keras_vit.preprocess_inputs`).
        batch_size: images per forward pass (default 32).

    Returns:
        A list with one float32 NumPy array per block, `(batch, num_heads, T, T)`, rows
        (last axis) summing to 1. T = 1 + grid_h * grid_w with a class token
        (pooling="token"), grid_h * grid_w without (pooling="gap"); token 0 is the class token.
        A distilled model has its distillation token at 1 and register tokens follow
        ([cls][dist][registers...][patches]); `attention_rollout` and the map grids given
        the model leave them out.

    Raises:
        ValueError: if the model holds no (or several) ViT encoders, or `batch_size` is not a
            positive integer.

    Example:
    >>> maps = keras_vit.attention_maps(model, images)  # doctest: +SKIP
    >>> rollout = keras_vit.attention_rollout(maps, model)  # doctest: +SKIP
    """
    check_positive_int("batch_size", batch_size)
    view, blocks = block_inputs_model(model)
    images = np.asarray(images)
    chunks = [[] for _ in blocks]
    for start in range(0, len(images), batch_size):
        batch = images[start : start + batch_size]
        inputs = view(batch, training=False)
        for chunk, block in zip(chunks, blocks, strict=True):
            probs = block.attention_probabilities(
                inputs[block.name], images=inputs.get(_images_key(block))
            )
            chunk.append(keras.ops.convert_to_numpy(probs).astype(np.float32))
    logger.debug("attention maps of %d blocks for %d images", len(blocks), len(images))
    return [np.concatenate(chunk, axis=0) for chunk in chunks]


def _select_blocks(blocks, layers) -> list:
    if layers is None:
        return list(blocks)
    if isinstance(layers, (str, numbers.Integral)):
        layers = [layers]
    by_name = {block.name: block for block in blocks}
    chosen = []
    for item in layers:
        if isinstance(item, str) and item in by_name:
            chosen.append(by_name[item])
        elif (
            isinstance(item, numbers.Integral)
            and not isinstance(item, bool)
            and -len(blocks) <= item < len(blocks)
        ):
            chosen.append(blocks[item])
        else:
            raise ValueError(
                "`layers` must hold block indices in "
                f"[{-len(blocks)}, {len(blocks)}) or block names {sorted(by_name)}. "
                f"Received: {item!r}"
            )
    return chosen


def feature_extractor(model: keras.Model, layers=None, name: str | None = None) -> keras.Model:
    """A `keras.Model` returning the token sequence after chosen blocks, and the pooled feature.

    For linear probes (paper section 4, few-shot / linear evaluation) and dense tasks. The
    returned model shares the layers (and so the weights) of `model`.

    Args:
        model: a keras_vit model (ViT or hybrid), or a model containing exactly one.
        layers: None (default, every block), or an int / name / list of block indices
            (negative counts from the end) and block names such as "encoderblock_3".
        name: name of the returned model (default "<model name>_features").

    Returns:
        A `keras.Model` taking `model`'s input and returning a dict: for each chosen block its
        name -> `(batch, num_tokens, hidden_dim)` output (before the final `encoder_norm`),
        and "pooled" -> `(batch, hidden_dim)`, the output of the `pool` layer (the class token
        or the token mean after `encoder_norm`), when the model has one.

    Raises:
        ValueError: unknown block names or indices out of range; a model without a ViT
            encoder.
    """
    path = find_encoder(model)
    chosen = _select_blocks(path.blocks, layers)
    outputs = {block.name: _block_output(block) for block in chosen}
    pools = [
        layer
        for layer in path.host.layers
        if isinstance(layer, TokenPooling) and layer.name != POOL_DIST  # DeiT's 2nd pooling
    ]
    if len(pools) == 1:
        outputs["pooled"] = pools[0].output
    return sub_graph_model(path, outputs, name=name or f"{model.name}_features")
