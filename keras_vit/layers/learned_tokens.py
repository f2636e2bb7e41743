"""Learned tokens inserted into the sequence: DeiT's distillation token and register tokens.

The distillation token: Touvron et al. 2021, "Training data-efficient image transformers &
distillation through attention", section 5 (timm deit.py `dist_token`, HF
`DeiTEmbeddings.distillation_token`). Register tokens: Darcet et al. 2024, "Vision
Transformers Need Registers" (timm `reg_token`, HF `Dinov2WithRegistersEmbeddings.register_tokens`).
"""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_vit")
class LearnedTokens(keras.layers.Layer):
    """Inserts `num_tokens` learned tokens at position `insert_at` of a token sequence.

    The variable (named `weight_name`) has shape `(1, num_tokens, hidden_dim)`, stored in
    float32 and cast to the compute dtype. keras_vit's models use it as `dist` (one token
    after the class token; key `dist`) and `reg` (R tokens after the class and
    distillation tokens; key `reg`). Initialised truncated-normal with stddev 0.02 (timm
    deit.py's `dist_token`), so that register tokens, which have no position, start apart.

    Args:
        num_tokens: tokens to insert, >= 1.
        insert_at: index in the input sequence before which they go (0: in front), >= 0.
        weight_name: the variable's name ("dist", "reg").
        initializer: default `TruncatedNormal(stddev=0.02)`.
        **kwargs: `name`, `dtype`, `trainable`.

    Call arguments:
        tokens: `(batch, num_tokens_in, hidden_dim)` with at least `insert_at` tokens.

    Returns:
        `(batch, num_tokens_in + num_tokens, hidden_dim)`.

    Raises:
        ValueError: a bad count or index, a rank other than 3, an unknown width, or a
            sequence shorter than `insert_at` (at build).
    """

    def __init__(self, num_tokens=1, insert_at=0, weight_name="tokens", initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.num_tokens = check_positive_int("num_tokens", num_tokens)
        if isinstance(insert_at, bool) or not isinstance(insert_at, int) or insert_at < 0:
            raise ValueError(f"`insert_at` must be an int >= 0. Received: insert_at={insert_at!r}")
        self.insert_at = insert_at
        self.weight_name = str(weight_name)
        if initializer is None:
            initializer = keras.initializers.TruncatedNormal(stddev=0.02)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                "LearnedTokens expects (batch, num_tokens, hidden_dim) with a known hidden_dim. "
                f"Received: input_shape={input_shape}"
            )
        if input_shape[1] is not None and input_shape[1] < self.insert_at:
            raise ValueError(
                f"LearnedTokens(insert_at={self.insert_at}) needs at least that many input "
                f"tokens. Received: input_shape={input_shape}"
            )
        self.tokens = self.add_weight(
            name=self.weight_name,
            shape=(1, self.num_tokens, input_shape[-1]),
            initializer=self.initializer,
        )

    def call(self, tokens):
        batch = ops.shape(tokens)[0]
        learned = ops.cast(self.tokens, tokens.dtype)
        learned = ops.broadcast_to(learned, (batch, self.num_tokens, ops.shape(self.tokens)[-1]))
        head, tail = tokens[:, : self.insert_at], tokens[:, self.insert_at :]
        return ops.concatenate([head, learned, tail], axis=1)

    def compute_output_shape(self, input_shape):
        length = None if input_shape[1] is None else input_shape[1] + self.num_tokens
        return (input_shape[0], length, input_shape[2])

    def get_config(self):
        return {
            **super().get_config(),
            "num_tokens": self.num_tokens,
            "insert_at": self.insert_at,
            "weight_name": self.weight_name,
            "initializer": keras.initializers.serialize(self.initializer),
        }
