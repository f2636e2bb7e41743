"""The Transformer MLP: Dense -> GELU -> Dropout -> Dense -> Dropout (paper eq. 3), or its gated
SwiGLU form (Shazeer 2020, arXiv:2002.05202; DINOv3 H+/16 and 7B/16)."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_choice, check_positive_int, check_rate
from keras_vit.kernels import dispatch
from keras_vit.layers.dropout import Dropout
from keras_vit.spec import layer_names as names
from keras_vit.spec.configs import MLP_ACTIVATIONS, SWIGLU, UNGATED_ACTIVATIONS  # noqa: F401

GATE = names.MLP_GATE
"""The gated MLP's gate projection (timm `mlp.fc1_g`, HF `mlp.gate_proj`)."""


def quick_gelu(x):
    """x * sigmoid(1.702 x): OpenAI CLIP's GELU approximation (CLIP model.py `QuickGELU`,
    timm `QuickGELU`)."""
    return x * ops.sigmoid(ops.cast(1.702, x.dtype) * x)


@keras.saving.register_keras_serializable(package="keras_vit")
class MlpBlock(keras.layers.Layer):
    """Two dense layers with a GELU between them, dropout after each (release placement).

    Weights (checkpoint keys under `MlpBlock_3/`): `Dense_0` kernel `(hidden_dim, mlp_dim)`,
    `Dense_1` kernel `(mlp_dim, hidden_dim)`; kernels xavier-uniform, biases normal(1e-6).

    With `activation="swiglu"` the MLP is gated: `Dense_1(silu(Dense_gate(x)) * Dense_0(x))`,
    `Dense_gate` a third projection `(hidden_dim, mlp_dim)` with a bias (timm
    `SwiGLU(fc1_g, fc1_x, fc2)` / `GluMlp` with `swiglu_mlp=True`, Hugging Face
    `DINOv3ViTGatedMLP(gate_proj, up_proj, down_proj)` with `hidden_act="silu"`). `mlp_dim` is
    the gated width itself (timm: `int(D * mlp_ratio)` rounded up to `swiglu_align_to`; HF:
    `intermediate_size`); the dropout is applied after the product and after `Dense_1`.

    Args:
        mlp_dim: inner width.
        dropout_rate: dropout after the GELU and after the second dense, in [0, 1).
        gelu_approximate: True (default) for the tanh approximation of the JAX release
            (timm `act_layer="gelu_tanh"`, transformers "gelu_pytorch_tanh"), False for the
            exact erf form (timm's default); they differ by at most ~4.7e-4.
        activation: "gelu" (default, the form `gelu_approximate` says), "quick_gelu"
            (`quick_gelu`, OpenAI CLIP towers) or "swiglu" (the gated MLP above;
            `gelu_approximate` is then unused).
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
        self.dense_gate = None
        if self.activation == SWIGLU:
            self.dense_gate = keras.layers.Dense(self.mlp_dim, name=GATE, **common)
            self.dense_gate.build(input_shape)
        self.dense_1 = keras.layers.Dense(hidden_dim, name="Dense_1", **common)
        self.dense_1.build((*input_shape[:-1], self.mlp_dim))
        self.dropout = Dropout(self.dropout_rate, dtype=self.dtype_policy)

    def call(self, tokens, training=None):
        # Under a reduced-precision policy the tokens go through as (batch * num_tokens,
        # hidden_dim): on TensorFlow without XLA (what
        # `keras_vit.runtime.precision_auto.choose_precision` picks for bfloat16 on CPU) the 2-D
        # product, bias and GELU then run as one fused
        # oneDNN kernel, where a 3-D input runs as a batched product with separate bias and
        # GELU kernels (B/16 bfloat16 inference 1.41x faster; docs/performance_log.md). float32
        # keeps the 3-D form, which XLA compiles a little faster.
        flatten = self.compute_dtype != "float32"
        x = ops.reshape(tokens, (-1, ops.shape(tokens)[-1])) if flatten else tokens
        if self.dense_gate is not None:
            x = ops.silu(self.dense_gate(x)) * self.dense_0(x)
        elif self.activation == "quick_gelu":
            x = quick_gelu(self.dense_0(x))
        else:
            x = self.dense_0(x)
            x = dispatch.gelu(x, self.gelu_approximate, self.compute_dtype, training=training)
        x = self.dropout(x, training=training)
        x = self.dense_1(x)
        x = ops.reshape(x, ops.shape(tokens)) if flatten else x
        return self.dropout(x, training=training)

    def projections(self) -> list:
        """`Dense_0`, the gate (`Dense_gate`, "swiglu" only) and `Dense_1`, in that order."""
        gate = [] if self.dense_gate is None else [self.dense_gate]
        return [self.dense_0, *gate, self.dense_1]

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
