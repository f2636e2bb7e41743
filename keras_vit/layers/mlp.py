"""The Transformer MLP: Dense -> GELU -> Dropout -> Dense -> Dropout (paper eq. 3)."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_choice, check_positive_int, check_rate
from keras_vit.kernels import dispatch

MLP_ACTIVATIONS = ("gelu", "quick_gelu")


def quick_gelu(x):
    """x * sigmoid(1.702 x): OpenAI CLIP's GELU approximation (CLIP model.py `QuickGELU`,
    timm `QuickGELU`)."""
    return x * ops.sigmoid(ops.cast(1.702, x.dtype) * x)


@keras.saving.register_keras_serializable(package="keras_vit")
class MlpBlock(keras.layers.Layer):
    """Two dense layers with a GELU between them, dropout after each (release placement).

    Weights (checkpoint keys under `MlpBlock_3/`): `Dense_0` kernel `(hidden_dim, mlp_dim)`,
    `Dense_1` kernel `(mlp_dim, hidden_dim)`; kernels xavier-uniform, biases normal(1e-6).

    Args:
        mlp_dim: inner width.
        dropout_rate: dropout after the GELU and after the second dense, in [0, 1).
        gelu_approximate: True (default) for the tanh approximation of the JAX release,
            False for the exact erf form (timm); they differ by at most ~4.7e-4.
        activation: "gelu" (default, the form `gelu_approximate` says) or "quick_gelu"
            (`quick_gelu`, OpenAI CLIP towers).
        **kwargs: `name`, `dtype`, `trainable`.

    Call arguments:
        tokens: `(batch, num_tokens, hidden_dim)`; `training`: enables dropout.

    Returns:
        `(batch, num_tokens, hidden_dim)`.

    Raises:
        ValueError: a non-positive `mlp_dim`, a rate outside [0, 1), an unknown activation.
    """

    def __init__(
        self, mlp_dim, dropout_rate=0.0, gelu_approximate=True, activation="gelu", **kwargs
    ):
        super().__init__(**kwargs)
        self.mlp_dim = check_positive_int("mlp_dim", mlp_dim)
        self.dropout_rate = check_rate("dropout_rate", dropout_rate)
        self.gelu_approximate = bool(gelu_approximate)
        self.activation = check_choice("mlp_activation", activation, MLP_ACTIVATIONS)

    def build(self, input_shape):
        hidden_dim = input_shape[-1]
        common = dict(
            kernel_initializer="glorot_uniform",
            bias_initializer=keras.initializers.RandomNormal(stddev=1e-6),
            dtype=self.dtype_policy,
        )
        self.dense_0 = keras.layers.Dense(self.mlp_dim, name="Dense_0", **common)
        self.dense_0.build(input_shape)
        self.dense_1 = keras.layers.Dense(hidden_dim, name="Dense_1", **common)
        self.dense_1.build((*input_shape[:-1], self.mlp_dim))
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)

    def call(self, tokens, training=None):
        # Under a reduced-precision policy the tokens go through as (batch * num_tokens,
        # hidden_dim): on TensorFlow without XLA (what
        # `keras_vit.runtime.precision.choose_precision` picks for bfloat16 on CPU) the 2-D
        # product, bias and GELU then run as one fused
        # oneDNN kernel, where a 3-D input runs as a batched product with separate bias and
        # GELU kernels (B/16 bfloat16 inference 1.41x faster; docs/performance_log.md). float32
        # keeps the 3-D form, which XLA compiles a little faster.
        flatten = self.compute_dtype != "float32"
        x = ops.reshape(tokens, (-1, ops.shape(tokens)[-1])) if flatten else tokens
        x = self.dense_0(x)
        if self.activation == "quick_gelu":
            x = quick_gelu(x)
        else:
            x = dispatch.gelu(x, self.gelu_approximate, self.compute_dtype, training=training)
        x = self.dropout(x, training=training)
        x = self.dense_1(x)
        x = ops.reshape(x, ops.shape(tokens)) if flatten else x
        return self.dropout(x, training=training)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "mlp_dim": self.mlp_dim,
            "dropout_rate": self.dropout_rate,
            "gelu_approximate": self.gelu_approximate,
            "activation": self.activation,
        }
