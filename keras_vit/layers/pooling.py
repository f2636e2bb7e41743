"""Turns the encoder's token sequence into one feature vector (paper section 3.1, appx. D.3)."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_choice

POOLING_MODES = ("token", "gap")


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """Pools `(batch, num_tokens, hidden_dim)` to `(batch, hidden_dim)`.

    Args:
        pooling: "token" takes the class token at position 0 (the paper's default);
            "gap" averages over all tokens (global average pooling, appendix D.3).
        **kwargs: `name`, `dtype`, `trainable`.

    Raises:
        ValueError: if `pooling` is not "token" or "gap".
    """

    def __init__(self, pooling="token", **kwargs):
        super().__init__(**kwargs)
        self.pooling = check_choice("pooling", pooling, POOLING_MODES)

    def call(self, tokens):
        if self.pooling == "token":
            return tokens[:, 0]
        return ops.mean(tokens, axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[2])

    def get_config(self):
        return {**super().get_config(), "pooling": self.pooling}
