"""Multihead attention pooling (MAP head) of big_vision's ViT (`big_vision/models/vit.py`).

A learned probe token attends over the encoder's output tokens; then a pre-norm MLP with a
residual. SigLIP's image tower and big_vision's `pool_type="map"` models pool this way
instead of a class token (Zhai et al., "Scaling Vision Transformers", 2022, section 3.2).
"""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_choice, check_positive_int
from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.mlp import UNGATED_ACTIVATIONS, MlpBlock


@keras.saving.register_keras_serializable(package="keras_vit")
class MAPHead(keras.layers.Layer):
    """probe -> MHA(probe, tokens) -> x + MLP(LN(x)) -> `(batch, hidden_dim)`.

    Weights in big_vision's layout (keys under `MAPHead_0/`): `probe` `(1, 1, D)`,
    `MultiHeadDotProductAttention_0/{query,key,value}` kernels `(D, heads, head_dim)` and
    `out` `(heads, head_dim, D)`, `LayerNorm_0`, `MlpBlock_0/Dense_0`, `Dense_1`.

    Args:
        num_heads: attention heads; D must be divisible by it.
        mlp_dim: inner MLP width.
        layer_norm_epsilon: default 1e-6 (Flax's).
        gelu_approximate: True (Flax's `nn.gelu` default, tanh) or False.
        activation: the MLP's activation, "gelu" (default) or "quick_gelu" (`MlpBlock`);
            the encoder blocks' (timm's `AttentionPoolLatent` takes the model's `act_layer`).
        **kwargs: `name`, `dtype`, `trainable`.

    Call arguments:
        tokens: `(batch, num_tokens, hidden_dim)`.

    Returns:
        `(batch, hidden_dim)`.
    """

    def __init__(
        self,
        num_heads,
        mlp_dim,
        layer_norm_epsilon=1e-6,
        gelu_approximate=True,
        activation="gelu",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.mlp_dim = check_positive_int("mlp_dim", mlp_dim)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.gelu_approximate = bool(gelu_approximate)
        self.activation = check_choice("mlp_activation", activation, UNGATED_ACTIVATIONS)

    def build(self, input_shape):
        width = input_shape[-1]
        policy = self.dtype_policy
        self.probe = self.add_weight(
            name="probe", shape=(1, 1, width), initializer="glorot_uniform"
        )
        self.attention = MultiHeadSelfAttention(
            self.num_heads, dtype=policy, name="MultiHeadDotProductAttention_0"
        )
        self.attention.build(input_shape)
        self.norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=policy, name="LayerNorm_0"
        )
        self.norm.build((None, 1, width))
        self.mlp = MlpBlock(
            self.mlp_dim,
            gelu_approximate=self.gelu_approximate,
            activation=self.activation,
            dtype=policy,
            name="MlpBlock_0",
        )
        self.mlp.build((None, 1, width))

    def call(self, tokens):
        probe = ops.cast(self.probe, tokens.dtype)
        probe = ops.broadcast_to(probe, (ops.shape(tokens)[0], 1, ops.shape(self.probe)[-1]))
        x = self.attention.cross_attend(probe, tokens)
        x = x + self.mlp(self.norm(x))
        return x[:, 0]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "gelu_approximate": self.gelu_approximate,
            "activation": self.activation,
        }
