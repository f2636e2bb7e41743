"""LoRA fine-tuning of keras_vit models through Keras' own `enable_lora`.

LoRA (Hu et al. 2021, https://arxiv.org/abs/2106.09685) freezes a projection's kernel `W` and
trains a low-rank update: Keras' `Dense.enable_lora(rank, lora_alpha)` and
`EinsumDense.enable_lora` add `lora_kernel_a` `(*W.shape[:-1], rank)` and `lora_kernel_b`
`(rank, W.shape[-1])` and apply `W + (lora_alpha / rank) * A @ B` (B starts at zero, so the
adapted model starts as the pre-trained one). The attention's query, key and value are
`keras_vit.layers.HeadProjection`s, whose adapters have the paper's shape `A (D, rank)`,
`B (rank, heads, head_dim)` instead of Keras' per-head `A (D, heads, rank)`.

The recipe (`apply_lora`, what `keras_vit.finetune(..., lora_rank=R)` runs):

- adapters on every projection of the Transformer blocks and of a MAP head: the attention's
  `query`, `key`, `value`, `out` and the MLP's `Dense_0`, `Dense_1` (their kernels and biases
  frozen);
- trainable in full: the classifier (`head`, `head_dist`, `pre_logits`) and every
  LayerNormalization (scale and bias, 2 x D each); the position table too when it was
  resized to a new grid (`train_position_table=True`);
- frozen: everything else (patch embedding, class/distillation/register tokens, LayerScale,
  the hybrid's ResNet).

Every keras_vit writer merges the adapters into the kernels (`keras_vit.checkpoints.base.lora`),
and so does Keras' `.keras` format, so saved models load as plain keras_vit models.
"""

from __future__ import annotations

import keras
import numpy as np

from keras_vit._validation import check_positive_int
from keras_vit.checkpoints.base.lora import lora_layers
from keras_vit.checkpoints.base.quantized import layers_below
from keras_vit.spec import layer_names as names

PROJECTION_TYPES = (keras.layers.Dense, keras.layers.EinsumDense)
CLASSIFIER_LAYERS = (names.HEAD, names.HEAD_DIST, names.PRE_LOGITS)


def _adapted_containers(model) -> list:
    """The Transformer blocks and MAP heads of `model` (nested models included)."""
    from keras_vit.layers import MAPHead, TransformerBlock

    return [
        layer
        for layer in model._flatten_layers(include_self=False, recursive=True)
        if isinstance(layer, (TransformerBlock, MAPHead))
    ]


def lora_projections(model) -> list:
    """The Dense / EinsumDense projections LoRA adapts: every one inside a Transformer block
    or a MAP head of `model`, in model order.

    Raises:
        ValueError: `model` has no Transformer blocks.
    """
    containers = _adapted_containers(model)
    if not containers:
        raise ValueError(
            f"LoRA needs a keras_vit model with Transformer blocks; {model.name!r} has none."
        )
    found = []
    for container in containers:
        found += [layer for layer in layers_below(container) if isinstance(layer, PROJECTION_TYPES)]
    return found


def check_lora_rank(lora_rank, lora_alpha=None) -> tuple[int | None, float | None]:
    """`(lora_rank, lora_alpha)` validated: None or a positive int rank; alpha None (Keras'
    default: the rank, scale 1) or a positive number, only with a rank.

    Raises:
        ValueError: a bad value, named.
    """
    if lora_rank is None:
        if lora_alpha is not None:
            raise ValueError(f"`lora_alpha` needs `lora_rank`. Received: lora_alpha={lora_alpha}")
        return None, None
    check_positive_int("lora_rank", lora_rank)
    if lora_alpha is not None and (
        isinstance(lora_alpha, bool)
        or not isinstance(lora_alpha, (int, float))
        or not np.isfinite(lora_alpha)
        or lora_alpha <= 0
    ):
        raise ValueError(
            f"`lora_alpha` must be a positive number or None. Received: lora_alpha={lora_alpha!r}"
        )
    return lora_rank, lora_alpha


def apply_lora(model, rank: int, alpha=None, *, train_position_table: bool = False):
    """Enables LoRA adapters on `model`'s projections and freezes the rest (the recipe above).

    Args:
        model: a built keras_vit ViT or hybrid (changed in place), without LoRA adapters.
        rank: the adapters' rank R (a positive int).
        alpha: Keras' `lora_alpha` (the update is scaled by alpha / R); None: R.
        train_position_table: keep the position table trainable (after a resize).

    Returns:
        `model`; compile it after this call.

    Raises:
        ValueError: a bad rank or alpha, a model without Transformer blocks, or one whose
            projections already have adapters (`keras_vit.finetune` merges them first).
    """
    rank, alpha = check_lora_rank(rank, alpha)
    projections = lora_projections(model)
    adapted = lora_layers(projections)
    if adapted:
        raise ValueError(
            f"Model {model.name!r} already has LoRA adapters (e.g. {adapted[0].path!r}); "
            "fine-tune it with keras_vit.finetune, which merges them first."
        )
    trainable = _recipe_trainable(model, train_position_table)
    for variable in model.weights:
        variable.trainable = variable.path in trainable
    for layer in projections:
        layer.enable_lora(rank, lora_alpha=alpha)
    return model


def _recipe_trainable(model, train_position_table: bool) -> set:
    """Paths of the variables the recipe trains in full (adapters come on top)."""
    keep = []
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, keras.layers.LayerNormalization) or layer.name in CLASSIFIER_LAYERS:
            keep += layer.weights
        elif layer.name == names.POSITION_EMBEDDING and train_position_table:
            keep += layer.weights
    return {variable.path for variable in keep}


def trainable_count(model) -> int:
    """Number of trainable parameters of `model` (what the optimizer updates)."""
    return int(sum(np.prod(v.shape) for v in model.trainable_weights))
