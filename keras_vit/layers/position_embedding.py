"""Learned 1-D position embeddings added to the token sequence (paper section 3.1, eq. 1)."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class AddPositionEmbs(keras.layers.Layer):
    """Adds a learned table of shape `(1, num_tokens, hidden_dim)` to the tokens.

    The table (checkpoint key `Transformer/posembed_input/pos_embedding`) holds one row per
    token, class token first when the model has one. It is stored in float32 and cast to the
    compute dtype of the input. To use a model at another resolution, the table is resized
    once, outside the graph, with `keras_vit.resize_position_embeddings`.

    Args:
        initializer: default normal with stddev 0.02, as in the release.
        **kwargs: `name`, `dtype`, `trainable`.

    Call arguments:
        tokens: `(batch, num_tokens, hidden_dim)` with `num_tokens` fixed at build time.

    Returns:
        `(batch, num_tokens, hidden_dim)` in the input's dtype.

    Raises:
        ValueError: if the sequence length or width is unknown at build time, or a call's
            sequence length differs from the table's.
    """

    def __init__(self, initializer=None, **kwargs):
        super().__init__(**kwargs)
        if initializer is None:
            initializer = keras.initializers.RandomNormal(stddev=0.02)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[1] is None or input_shape[2] is None:
            raise ValueError(
                "AddPositionEmbs needs a known (num_tokens, hidden_dim) at build time. "
                f"Received: input_shape={input_shape}"
            )
        self.pos_embedding = self.add_weight(
            name="pos_embedding",
            shape=(1, input_shape[1], input_shape[2]),
            initializer=self.initializer,
        )

    def call(self, tokens):
        length = tokens.shape[1]
        if length is not None and length != self.pos_embedding.shape[1]:
            raise ValueError(
                f"AddPositionEmbs holds {self.pos_embedding.shape[1]} positions but received "
                f"{length} tokens. Resize the table with keras_vit.resize_position_embeddings "
                "or build the model for this image size."
            )
        return tokens + ops.cast(self.pos_embedding, tokens.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "initializer": keras.initializers.serialize(self.initializer),
        }
