"""Turns the encoder's token sequence into one feature vector (paper section 3.1, appx. D.3)."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_choice
from keras_vit.spec.configs import POOLING_MODES


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """Pools `(batch, num_tokens, hidden_dim)` to `(batch, hidden_dim)`.

    Args:
        pooling: "token" takes the token at `token_index` (0: the class token, the paper's
            default); "gap" averages over the tokens after the first `num_prefix_tokens`
            (global average pooling, appendix D.3; registers are skipped, as timm's
            `global_pool="avg"` skips its prefix tokens).
        token_index: the token "token" pooling reads (1: DeiT's distillation token).
            Default 0.
        num_prefix_tokens: leading tokens "gap" leaves out (register tokens). Default 0.
        **kwargs: `name`, `dtype`, `trainable`.

    Raises:
        ValueError: if `pooling` is not "token" or "gap", or an index or count is not an
            int >= 0.
    """

    def __init__(self, pooling="token", token_index=0, num_prefix_tokens=0, **kwargs):
        super().__init__(**kwargs)
        self.pooling = check_choice("pooling", pooling, POOLING_MODES)
        self.token_index = _non_negative("token_index", token_index)
        self.num_prefix_tokens = _non_negative("num_prefix_tokens", num_prefix_tokens)

    def call(self, tokens):
        if self.pooling == "token":
            return tokens[:, self.token_index]
        return ops.mean(tokens[:, self.num_prefix_tokens :], axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[2])

    def get_config(self):
        return {
            **super().get_config(),
            "pooling": self.pooling,
            "token_index": self.token_index,
            "num_prefix_tokens": self.num_prefix_tokens,
        }


def _non_negative(name, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"`{name}` must be an int >= 0. Received: {name}={value!r}")
    return value
