"""One pre-norm Transformer encoder block (paper section 3.1, eqs. 2-3)."""

from __future__ import annotations

import keras

from keras_vit._validation import check_choice, check_heads, check_positive_int, check_rate
from keras_vit.kernels import dispatch
from keras_vit.layers.attention import QKV_BIASES, MultiHeadSelfAttention, check_num_queries
from keras_vit.layers.dropout import Dropout, drop_path
from keras_vit.layers.layer_scale import LayerScale, check_layer_scale_init
from keras_vit.layers.mlp import MLP_ACTIVATIONS, MlpBlock
from keras_vit.layers.rotary import check_rope


@keras.saving.register_keras_serializable(package="keras_vit")
class TransformerBlock(keras.layers.Layer):
    """x = x + DropPath(ls1 * Dropout(MSA(LN(x)))); x = x + DropPath(ls2 * MLP(LN(x))).

    Sublayers carry the official checkpoint names (`Transformer/encoderblock_{i}/...`):
    `LayerNorm_0`, `MultiHeadDotProductAttention_1` (q/k/v kernels `(D, heads, head_dim)`,
    out kernel `(heads, head_dim, D)`), `LayerNorm_2`, `MlpBlock_3` (`Dense_0`, `Dense_1`;
    with `mlp_activation="swiglu"` also `Dense_gate`, the gated MLP's gate).
    16 weights in all (18 with the gate), created in `build()`; with LayerScale also
    `LayerScale_1/scale` (ls1, attention branch) and `LayerScale_3/scale` (ls2, MLP branch),
    each `(D,)` (CaiT section 2; timm `Block.ls1`/`ls2`, HF `Dinov2Layer.layer_scale1`/`2`). Without
    LayerScale ls1 = ls2 = 1.

    Args:
        num_heads: attention heads; the token width D must be divisible by it.
        mlp_dim: inner width of the MLP.
        dropout_rate: dropout after the attention projection and inside the MLP. Default 0.
        attention_dropout_rate: dropout on attention weights. Default 0.
        drop_path_rate: stochastic depth, the probability of skipping each residual branch
            per sample (Huang et al. 2016; not in the original release, used by AugReg).
        layer_norm_epsilon: default 1e-6, as in the release (Keras' default is 1e-3).
        gelu_approximate: True (release, tanh) or False (exact erf).
        layer_scale_init: None (default: no LayerScale) or the initial value of the
            LayerScale gammas (a positive float, e.g. 1e-5).
        mlp_activation: "gelu" (default), "quick_gelu" or "swiglu" (the gated MLP,
            `silu(x W_gate) * (x W_0)` then `Dense_1`; DINOv3 H+/16 and 7B/16; see `MlpBlock`).
        remat: False (default) or True: in training, recompute the block's activations in
            the backward pass instead of storing them (`keras.remat`: `jax.checkpoint` on
            JAX, `tf.recompute_grad` on TensorFlow, activation checkpointing on PyTorch),
            trading about one more forward pass per step for the memory of the block's
            intermediates (the attention weights, `(batch, heads, tokens, tokens)`, and the
            MLP's `(batch, tokens, mlp_dim)`); the same values. Inference is unchanged. On
            JAX, XLA:CPU needs its memory scheduler for the saving (see
            `keras_vit.kernels.dispatch.prefer_memory_schedule`; the builders ask for it).
        qkv_bias: which of the attention's q/k/v projections have a bias: "qkv" (default),
            "qv" or "none" (`keras_vit.layers.attention.QKV_BIASES`; DINOv3).
        rope: None (default) or the attention's rotary position embedding config
            (`keras_vit.layers.rotary.check_rope`; DINOv3).
        num_output_tokens: None (default: every token) or an int k >= 1: the block computes
            only its first k output tokens (k queries; keys and values still come from all
            tokens), which equal the first k rows of the full block's output. The ViT
            builders set k = 1 on the last block of a class-token classifier, whose other
            outputs nothing reads; this saves ~7% of a 12-block model's FLOPs.
        **kwargs: `name`, `dtype`, `trainable`.

    Call arguments:
        tokens: `(batch, num_tokens, hidden_dim)`.
        training: Python bool or None (default None, i.e. inference).
        images: the model's input images, for a `rope` with a dynamic grid (else unused).

    Returns:
        `(batch, num_tokens, hidden_dim)` in the compute dtype; `(batch, k, hidden_dim)` with
        `num_output_tokens=k`.

    Raises:
        ValueError: non-positive sizes, rates outside [0, 1), a width not divisible by
            `num_heads`, or `num_output_tokens` above the number of tokens (at build).
    """

    def __init__(
        self,
        num_heads,
        mlp_dim,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        drop_path_rate=0.0,
        layer_norm_epsilon=1e-6,
        gelu_approximate=True,
        num_output_tokens=None,
        layer_scale_init=None,
        mlp_activation="gelu",
        remat=False,
        projection_quantization=None,
        qkv_bias="qkv",
        rope=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.projection_quantization = projection_quantization
        if not isinstance(remat, bool):
            raise ValueError(f"`remat` must be True or False. Received: remat={remat!r}")
        self.remat = remat
        if remat:
            dispatch.prefer_memory_schedule()
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.mlp_dim = check_positive_int("mlp_dim", mlp_dim)
        self.dropout_rate = check_rate("dropout_rate", dropout_rate)
        self.attention_dropout_rate = check_rate("attention_dropout_rate", attention_dropout_rate)
        self.drop_path_rate = check_rate("drop_path_rate", drop_path_rate)
        if not layer_norm_epsilon > 0:
            raise ValueError(
                "`layer_norm_epsilon` must be > 0. "
                f"Received: layer_norm_epsilon={layer_norm_epsilon}"
            )
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.gelu_approximate = bool(gelu_approximate)
        self.layer_scale_init = (
            None if layer_scale_init is None else check_layer_scale_init(layer_scale_init)
        )
        self.mlp_activation = check_choice("mlp_activation", mlp_activation, MLP_ACTIVATIONS)
        self.qkv_bias = check_choice("qkv_bias", qkv_bias, QKV_BIASES)
        self.rope = check_rope(rope)
        self.num_output_tokens = (
            None
            if num_output_tokens is None
            else check_positive_int("num_output_tokens", num_output_tokens)
        )
        if self.drop_path_rate > 0:
            self.seed_generator = keras.random.SeedGenerator()

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                "TransformerBlock expects (batch, num_tokens, hidden_dim). "
                f"Received: input_shape={input_shape}"
            )
        check_heads(input_shape[-1], self.num_heads)
        if self.num_output_tokens is not None:
            check_num_queries(self.num_output_tokens, input_shape[1], "num_output_tokens")
        policy = self.dtype_policy
        eps = self.layer_norm_epsilon
        self.norm_0 = keras.layers.LayerNormalization(epsilon=eps, dtype=policy, name="LayerNorm_0")
        self.attention = MultiHeadSelfAttention(
            self.num_heads,
            self.attention_dropout_rate,
            qkv_bias=self.qkv_bias,
            rope=self.rope,
            dtype=policy,
            name="MultiHeadDotProductAttention_1",
        )
        self.norm_2 = keras.layers.LayerNormalization(epsilon=eps, dtype=policy, name="LayerNorm_2")
        self.mlp = MlpBlock(
            self.mlp_dim,
            self.dropout_rate,
            self.gelu_approximate,
            self.mlp_activation,
            dtype=policy,
            name="MlpBlock_3",
        )
        sublayers = [self.norm_0, self.attention, self.norm_2, self.mlp]
        self.ls1 = self.ls2 = None
        if self.layer_scale_init is not None:
            init = self.layer_scale_init
            self.ls1 = LayerScale(init, dtype=policy, name="LayerScale_1")
            self.ls2 = LayerScale(init, dtype=policy, name="LayerScale_3")
            sublayers += [self.ls1, self.ls2]
        for layer in sublayers:
            layer.build(input_shape)
        self.dropout = Dropout(self.dropout_rate, dtype=policy)
        # the config records the quantization (`get_config`), so a .keras file loads back
        self.attention.restorable_quantization = True
        if self.projection_quantization is not None:
            for layer in self.projections():
                layer.quantize(self.projection_quantization)

    def projections(self) -> list:
        """The attention's `query`, `key`, `value`, `out` and the MLP's `Dense_0`, its gate
        (`Dense_gate`, with `mlp_activation="swiglu"`) and `Dense_1`."""
        attention = self.attention
        return [
            attention.query,
            attention.key,
            attention.value,
            attention.out,
            *self.mlp.projections(),
        ]

    def _drop_path(self, x, training):
        if not training or self.drop_path_rate == 0:
            return x
        return drop_path(x, self.drop_path_rate, self.seed_generator)

    def attention_probabilities(self, tokens, images=None):
        """Attention weights `(batch, num_heads, num_tokens, num_tokens)` of this block.

        `tokens` is the block's input (`images`: as in `call`); used by
        `keras_vit.attention_maps`.
        """
        return self.attention.attention_probabilities(self.norm_0(tokens), images=images)

    def call(self, tokens, training=None, images=None):
        num_output_tokens = self.num_output_tokens
        if self.remat and training:
            # Keras' rematerialisation of the whole block (as `keras.RematScope(mode="full")`
            # does per layer): its activations are recomputed in the backward pass
            def block(x):
                return self.forward(
                    x, training=training, num_output_tokens=num_output_tokens, images=images
                )

            return keras.remat(block)(tokens)
        return self.forward(
            tokens, training=training, num_output_tokens=num_output_tokens, images=images
        )

    def forward(self, tokens, training=None, num_output_tokens=None, images=None):
        """The block on `tokens`, returning the first `num_output_tokens` outputs (None: all).

        `call` uses the layer's own `num_output_tokens`; `keras_vit.feature_extractor` calls
        this with None to read a class-token-only last block's full output sequence.
        `images`: the model's input, for a `rope` with a dynamic grid.
        """
        normed = dispatch.layer_norm(self.norm_0, tokens, training=training)
        y = self.attention(normed, training=training, num_queries=num_output_tokens, images=images)
        y = self.dropout(y, training=training)
        if self.ls1 is not None:
            y = self.ls1(y)
        residual = tokens if num_output_tokens is None else tokens[:, :num_output_tokens]
        x = residual + self._drop_path(y, training=training)
        y = self.mlp(dispatch.layer_norm(self.norm_2, x, training=training), training=training)
        if self.ls2 is not None:
            y = self.ls2(y)
        return x + self._drop_path(y, training=training)

    def compute_output_shape(self, input_shape):
        if self.num_output_tokens is None:
            return input_shape
        # With an unknown sequence length the output length is unknown too (k or fewer).
        num_tokens = None if input_shape[1] is None else self.num_output_tokens
        return (input_shape[0], num_tokens, input_shape[2])

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate,
            "drop_path_rate": self.drop_path_rate,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "gelu_approximate": self.gelu_approximate,
            "num_output_tokens": self.num_output_tokens,
            "layer_scale_init": self.layer_scale_init,
            "mlp_activation": self.mlp_activation,
            "remat": self.remat,
            "qkv_bias": self.qkv_bias,
            "rope": self.rope,
            **self._quantization_config(),
        }

    def _quantization_config(self) -> dict:
        """`{"projection_quantization": mode}` once `keras.Model.quantize` has quantized the
        projections (rebuilt quantized by `build`, so a `.keras` file loads back), else {}."""
        if not self.built:
            mode = self.projection_quantization
        else:
            modes = {getattr(layer, "quantization_mode", None) for layer in self.projections()}
            if len(modes) > 1:
                raise ValueError(
                    f"Cannot save {self.name!r}: its projections are quantized in different "
                    f"modes {sorted(map(str, modes))}; quantize the whole model in one mode."
                )
            mode = modes.pop()
        return {} if mode is None else {"projection_quantization": mode}
