"""Learned class token prepended to the patch sequence (paper section 3.1, eq. 1)."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class ClassToken(keras.layers.Layer):
    """Prepends one learned token (the "class token", x_class in eq. 1) to a token sequence.

    The variable `cls` has shape `(1, 1, hidden_dim)`, zero-initialised as in the release
    (checkpoint key `cls`). It is stored in float32 and cast to the compute dtype when called,
    so the layer works under `mixed_float16` / `mixed_bfloat16`.

    Args:
        initializer: default "zeros".
        **kwargs: `name`, `dtype`, `trainable`.

    Call arguments:
        tokens: `(batch, num_tokens, hidden_dim)`.

    Returns:
        `(batch, 1 + num_tokens, hidden_dim)` with the class token at position 0.

    Raises:
        ValueError: if the input is not rank 3 or its last axis is unknown.
    """

    def __init__(self, initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                "ClassToken expects (batch, num_tokens, hidden_dim) with a known hidden_dim. "
                f"Received: input_shape={input_shape}"
            )
        self.cls = self.add_weight(
            name="cls", shape=(1, 1, input_shape[-1]), initializer=self.initializer
        )

    def call(self, tokens):
        batch = ops.shape(tokens)[0]
        cls = ops.cast(self.cls, tokens.dtype)
        cls = ops.broadcast_to(cls, (batch, 1, ops.shape(self.cls)[-1]))
        return ops.concatenate([cls, tokens], axis=1)

    def compute_output_shape(self, input_shape):
        length = None if input_shape[1] is None else input_shape[1] + 1
        return (input_shape[0], length, input_shape[2])

    def get_config(self):
        return {
            **super().get_config(),
            "initializer": keras.initializers.serialize(self.initializer),
        }
