"""Multi-head self-attention with the official checkpoint's weight layout (paper eq. 2, appx. A)."""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_vit._validation import check_choice, check_heads, check_positive_int, check_rate
from keras_vit.kernels import dispatch
from keras_vit.layers.dropout import Dropout
from keras_vit.layers.head_projection import HeadProjection
from keras_vit.layers.rotary import check_rope, check_rope_head_dim, rope_sin_cos, rotate_tokens

QUANTIZED_SAVE_MESSAGE = (
    "Cannot save layer {name!r}: it was quantized with keras.Model.quantize, and a quantized "
    "MAP head does not load back (its attention and MLP projections are built from layer "
    "configs that record no quantization, as in Keras' own MultiHeadAttention). "
    "Quantization is deterministic: save the float model (before quantize) and call "
    "model.quantize('int8') again after loading it."
)


def flattened_glorot_uniform(hidden_dim: int) -> keras.initializers.Initializer:
    """Xavier-uniform over the flattened (D, D) matrix, as the release initialises q/k/v/out.

    Keras' GlorotUniform would take the fans of the 3-D kernel (D, heads, head_dim) and give
    a different range; for a square (D, D) map the limit is sqrt(6 / (D + D)) = sqrt(3 / D).
    """
    limit = math.sqrt(3.0 / hidden_dim)
    return keras.initializers.RandomUniform(-limit, limit)


def check_num_queries(num_queries, num_tokens, name="num_queries") -> int:
    """`num_queries` if it is an int in [1, num_tokens] (num_tokens None: unknown), else a
    ValueError naming the argument `name`."""
    num_queries = check_positive_int(name, num_queries)
    if num_tokens is not None and num_queries > num_tokens:
        raise ValueError(
            f"`{name}` must be at most the number of tokens. "
            f"Received: {name}={num_queries}, num_tokens={num_tokens}"
        )
    return num_queries


QKV_BIASES = ("qkv", "qv", "none")
"""Which of the query, key and value projections have a bias: all three (default, the
release's), query and value only (EVA / DINOv3 `qkv_bias=True`, whose key bias is fixed at
zero; HF `DINOv3ViTConfig` `key_bias=False`), or none (timm's DINOv3 `qkv_bias=False`)."""


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head scaled dot-product self-attention, softmax(q k^T / sqrt(head_dim)) v.

    Weights have the official layout (keys under `MultiHeadDotProductAttention_1/`):
    `query`, `key`, `value` kernels `(hidden_dim, num_heads, head_dim)` with biases
    `(num_heads, head_dim)`, and `out` kernel `(num_heads, head_dim, hidden_dim)` with bias
    `(hidden_dim,)`. The same layout as `keras.layers.MultiHeadAttention`, so no transposes.

    Kernel: chosen when the layer is built, by `keras_vit.kernels.dispatch.attention_kernel`,
    and stored in `self.attention_kernel` (as timm's `fused_attn`): `"fused"` runs
    `keras.ops.dot_product_attention`, which takes the backend's fused kernel where it has
    one (cuDNN flash attention on JAX GPUs, splash attention on TPUs, PyTorch's
    `scaled_dot_product_attention`); `"tensorflow"` the TensorFlow CPU forms measured faster
    there (`keras_vit.kernels.tensorflow`); `"explicit"` einsum, softmax, einsum. Set the
    attribute to `"explicit"` after building to force explicit probabilities. Explicit
    fallbacks, whatever the kernel: float16 (the logits and softmax are computed in float32,
    as q k^T easily exceeds float16's 65504; the policy's kernel is `"explicit"`), and
    attention dropout in training (a fused kernel has no dropout on its weights).
    `num_queries` (the class-token-only last block) runs on every kernel: the fused op takes
    fewer queries than keys. Under every policy the softmax accumulates in float32 (under
    bfloat16 inference on TensorFlow, inside TensorFlow's bfloat16 softmax kernel).
    `attention_probabilities` (attention maps, rollout, `explain`) always computes the
    explicit probabilities from the same weights.

    With `rope` the queries and keys of the patch tokens are rotated after their projection
    (DINOv3's rotary position embedding, `keras_vit.layers.rotary`); the tokens before them
    (class, storage) are not.

    Args:
        num_heads: number of heads; the input width must be divisible by it.
        attention_dropout_rate: dropout on the attention weights, in [0, 1). Default 0.
        qkv_bias: which projections have a bias, one of `QKV_BIASES`: "qkv" (default), "qv"
            (no key bias) or "none".
        rope: None (default) or the rotary position embedding's config (see
            `keras_vit.layers.rotary.check_rope`: `num_prefix_tokens`, `grid_size`,
            `patch_size`, `temperature`); the head width must then divide by 4.
        **kwargs: `name`, `dtype`, `trainable`.

    Call arguments:
        tokens: `(batch, num_tokens, hidden_dim)`.
        training: Python bool or None; enables attention dropout.
        num_queries: None (default: every token attends) or an int k >= 1: only the first k
            tokens are queries, keys and values still come from all tokens, so the k outputs
            equal the first k rows of the full result at a fraction of the cost.
        images: with a `rope` that has a `patch_size` (a dynamic image size), the model's
            input images, whose height and width give the patch grid; else unused.

    Returns:
        `(batch, num_tokens, hidden_dim)`, or `(batch, k, hidden_dim)` with `num_queries=k`.

    Raises:
        ValueError: if `hidden_dim` is not divisible by `num_heads`, a rate is outside
            [0, 1), an unknown `qkv_bias`, a bad `rope` (or a head width not divisible by 4
            with one), or `num_queries` is not an int in [1, num_tokens].
    """

    def __init__(self, num_heads, attention_dropout_rate=0.0, qkv_bias="qkv", rope=None, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.attention_dropout_rate = check_rate("attention_dropout_rate", attention_dropout_rate)
        self.restorable_quantization = False  # set by a holder that records the quantization
        self.qkv_bias = check_choice("qkv_bias", qkv_bias, QKV_BIASES)
        self.rope = check_rope(rope)

    def build(self, input_shape):
        hidden_dim = input_shape[-1]
        self.head_dim = check_heads(hidden_dim, self.num_heads)
        if self.rope is not None:
            check_rope_head_dim(self.head_dim)
        init = flattened_glorot_uniform(hidden_dim)
        for name in ("query", "key", "value"):
            layer = HeadProjection(
                "btd,dnh->btnh",
                output_shape=(None, self.num_heads, self.head_dim),
                bias_axes="nh" if name[0] in self.qkv_bias else None,
                kernel_initializer=init,
                bias_initializer="zeros",
                dtype=self.dtype_policy,
                name=name,
            )
            layer.build(input_shape)
            setattr(self, name, layer)
        self.out = keras.layers.EinsumDense(
            "btnh,nhd->btd",
            output_shape=(None, hidden_dim),
            bias_axes="d",
            kernel_initializer=init,
            bias_initializer="zeros",
            dtype=self.dtype_policy,
            name="out",
        )
        self.out.build((None, input_shape[1], self.num_heads, self.head_dim))
        self.attention_dropout = Dropout(
            self.attention_dropout_rate, dtype=self.dtype_policy, name="attention_dropout"
        )
        self.attention_kernel = dispatch.attention_kernel(self.compute_dtype)

    def attention_probabilities(self, tokens, images=None):
        """Attention weights `(batch, num_heads, num_tokens, num_tokens)`, float32, rows sum to 1.

        Computed from this layer's own weights (and RoPE: `images` as in `call`); used by
        `keras_vit.attention_maps`.
        """
        query, key = self.rotate(self.query(tokens), self.key(tokens), tokens, images)
        return self._probabilities(query, key)

    def rotate(self, query, key, tokens, images=None):
        """`(query, key)` with the rotary position embedding applied (unchanged without
        `rope`). query `(batch, q, heads, head_dim)`, key `(batch, t, heads, head_dim)`;
        `tokens` `(batch, t, D)` are the keys' tokens, `images` as in `call`.

        Raises:
            ValueError: a fixed-grid `rope` and a known token count that is not its
                `num_prefix_tokens + rows * cols`.
        """
        if self.rope is None:
            return query, key
        sin, cos = self.rope_tables(tokens, images)
        prefix = self.rope["num_prefix_tokens"]
        return rotate_tokens(query, sin, cos, prefix), rotate_tokens(key, sin, cos, prefix)

    def rope_tables(self, tokens, images=None):
        """The RoPE `(sin, cos)` tables `(rows * cols, head_dim)` for this call's grid: from
        `images` with a `patch_size` (dynamic image size), else the stored `grid_size`.

        Raises:
            ValueError: a `patch_size` and no `images`, or a fixed grid and a known token
                count that is not its `num_prefix_tokens + rows * cols`.
        """
        rope = self.rope
        rows, cols = rope["grid_size"]
        if rope["patch_size"] is not None:
            if images is None:
                raise ValueError(
                    f"Layer {self.name!r} rotates by each input's patch grid (a dynamic image "
                    "size) and needs the model's input images: call it with images=."
                )
            shape = ops.shape(images)
            rows, cols = shape[1] // rope["patch_size"][0], shape[2] // rope["patch_size"][1]
        elif tokens.shape[1] is not None and tokens.shape[1] != rope["num_prefix_tokens"] + (
            rows * cols
        ):
            raise ValueError(
                f"Layer {self.name!r} rotates a {rows}x{cols} patch grid after "
                f"{rope['num_prefix_tokens']} prefix tokens but received {tokens.shape[1]} "
                "tokens. Build the model for this image size, or with dynamic_image_size=True "
                "and pass the images."
            )
        return rope_sin_cos(rows, cols, self.head_dim, rope["temperature"])

    def _probabilities(self, query, key):
        """Softmax of the scaled logits, in float32 whatever the policy."""
        query = query * ops.cast(1.0 / math.sqrt(self.head_dim), query.dtype)
        if self.compute_dtype == "float16":
            query, key = ops.cast(query, "float32"), ops.cast(key, "float32")
        logits = ops.einsum("btnh,bsnh->bnts", query, key)
        return ops.softmax(ops.cast(logits, "float32"), axis=-1)

    def explicit_context(self, query, key, value, training=None):
        """The explicit form of the attention core: the probabilities (float32 logits and
        softmax, `_probabilities`), attention dropout, then the weighted sum of `value`.

        query `(batch, q, heads, head_dim)`; key, value `(batch, t, heads, head_dim)`.
        Returns `(batch, q, heads, head_dim)` in the compute dtype."""
        probs = ops.cast(self._probabilities(query, key), self.compute_dtype)
        probs = self.attention_dropout(probs, training=training)
        return ops.einsum("bnts,bsnh->btnh", probs, value)

    def call(self, tokens, training=None, num_queries=None, images=None):
        queries = tokens
        if num_queries is not None:
            num_queries = check_num_queries(num_queries, tokens.shape[1])
            queries = tokens[:, :num_queries]
        return dispatch.attention(
            self,
            queries,
            tokens,
            training=training,
            self_attention=num_queries is None,
            images=images,
        )

    def quantized(self) -> bool:
        """True once `keras.Model.quantize` has replaced the projections' kernels (their
        `kernel` is then an integer tensor that only EinsumDense's own call can apply)."""
        layers = (self.query, self.key, self.value, self.out)
        return any(getattr(layer, "quantization_mode", None) for layer in layers)

    def save_own_variables(self, store):
        """Refuses to write a quantized attention into a `.keras` file unless the layer that
        holds it records the quantization.

        `keras.Model.quantize("int8")` swaps the projections' float kernels for int8 kernels
        and scales; keras_vit's attention creates its projections in `build` (as Keras' own
        MultiHeadAttention does). A `TransformerBlock` records the mode in its config and
        rebuilds the projections quantized (`restorable_quantization` is set on its
        attention), so its `.keras` file loads back; another holder (the MAP head) does not,
        and its file would not load back. Quantization is deterministic: save the float model
        and call `quantize` after loading it. `save_weights` (`.weights.h5`, no archive)
        still works: its file loads into a model quantized the same way first.

        Raises:
            ValueError: the layer's projections are quantized, its holder does not record
                that, and `store` belongs to a `.keras` archive.
        """
        restorable = self.restorable_quantization
        if self.quantized() and not restorable and getattr(store, "archive", None) is not None:
            raise ValueError(QUANTIZED_SAVE_MESSAGE.format(name=self.name))
        super().save_own_variables(store)

    def cross_attend(self, queries, tokens):
        """Attention of `queries` `(batch, q, D)` over `tokens` `(batch, t, D)` with this
        layer's weights: `(batch, q, D)` (big_vision's MAP head attends a probe this way)."""
        query, key, value = self.query(queries), self.key(tokens), self.value(tokens)
        probs = ops.cast(self._probabilities(query, key), self.compute_dtype)
        return self.out(ops.einsum("bnts,bsnh->btnh", probs, value))

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "attention_dropout_rate": self.attention_dropout_rate,
            "qkv_bias": self.qkv_bias,
            "rope": self.rope,
        }
