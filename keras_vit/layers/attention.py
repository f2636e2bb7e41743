"""Multi-head self-attention with the official checkpoint's weight layout (paper eq. 2, appx. A)."""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_vit._validation import check_heads, check_positive_int, check_rate
from keras_vit.layers import _reduced_precision

QUANTIZED_SAVE_MESSAGE = (
    "Cannot save layer {name!r}: it was quantized with keras.Model.quantize, and a quantized "
    "keras_vit model does not load back (its attention and MLP projections are built from "
    "layer configs that record no quantization, as in Keras' own MultiHeadAttention). "
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


def _exact_bfloat16_kernels() -> tuple[bool, bool]:
    """(bfloat16 einsum sums in float32, bfloat16 softmax rounds once like float32's) for
    the backend's kernels: measured once on TensorFlow; (True, False) on other backends,
    whose softmax `_call_heads_major` always runs in float32."""
    if keras.backend.backend() != "tensorflow":
        return True, False
    from keras_vit import _tf_checks

    return (
        _tf_checks.bfloat16_einsum_accumulates_in_float32(),
        _tf_checks.bfloat16_softmax_rounds_like_float32(),
    )


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


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head scaled dot-product self-attention, softmax(q k^T / sqrt(head_dim)) v.

    Weights have the official layout (keys under `MultiHeadDotProductAttention_1/`):
    `query`, `key`, `value` kernels `(hidden_dim, num_heads, head_dim)` with biases
    `(num_heads, head_dim)`, and `out` kernel `(num_heads, head_dim, hidden_dim)` with bias
    `(hidden_dim,)`. The same layout as `keras.layers.MultiHeadAttention`, so no transposes.

    Numerics: under float16 the logits and softmax are computed in float32 (q k^T easily
    exceeds float16's 65504), and under every policy the softmax accumulates in float32
    (under bfloat16 inference on TensorFlow, inside TensorFlow's bfloat16 softmax kernel).

    Args:
        num_heads: number of heads; the input width must be divisible by it.
        attention_dropout_rate: dropout on the attention weights, in [0, 1). Default 0.
        **kwargs: `name`, `dtype`, `trainable`.

    Call arguments:
        tokens: `(batch, num_tokens, hidden_dim)`.
        training: Python bool or None; enables attention dropout.
        num_queries: None (default: every token attends) or an int k >= 1: only the first k
            tokens are queries, keys and values still come from all tokens, so the k outputs
            equal the first k rows of the full result at a fraction of the cost.

    Returns:
        `(batch, num_tokens, hidden_dim)`, or `(batch, k, hidden_dim)` with `num_queries=k`.

    Raises:
        ValueError: if `hidden_dim` is not divisible by `num_heads`, a rate is outside
            [0, 1), or `num_queries` is not an int in [1, num_tokens].
    """

    def __init__(self, num_heads, attention_dropout_rate=0.0, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.attention_dropout_rate = check_rate("attention_dropout_rate", attention_dropout_rate)

    def build(self, input_shape):
        hidden_dim = input_shape[-1]
        self.head_dim = check_heads(hidden_dim, self.num_heads)
        init = flattened_glorot_uniform(hidden_dim)
        for name in ("query", "key", "value"):
            layer = keras.layers.EinsumDense(
                "btd,dnh->btnh",
                output_shape=(None, self.num_heads, self.head_dim),
                bias_axes="nh",
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
        self.attention_dropout = keras.layers.Dropout(
            self.attention_dropout_rate, dtype=self.dtype_policy, name="attention_dropout"
        )

    def attention_probabilities(self, tokens):
        """Attention weights `(batch, num_heads, num_tokens, num_tokens)`, float32, rows sum to 1.

        Computed from this layer's own weights; used by `keras_vit.attention_maps`.
        """
        return self._probabilities(self.query(tokens), self.key(tokens))

    def _probabilities(self, query, key):
        """Softmax of the scaled logits, in float32 whatever the policy."""
        query = query * ops.cast(1.0 / math.sqrt(self.head_dim), query.dtype)
        if self.compute_dtype == "float16":
            query, key = ops.cast(query, "float32"), ops.cast(key, "float32")
        logits = ops.einsum("btnh,bsnh->bnts", query, key)
        return ops.softmax(ops.cast(logits, "float32"), axis=-1)

    def call(self, tokens, training=None, num_queries=None):
        queries = tokens
        if num_queries is not None:
            num_queries = check_num_queries(num_queries, tokens.shape[1])
            queries = tokens[:, :num_queries]
        if self.compute_dtype == "bfloat16" and not self._quantized():
            return self._call_heads_major(queries, tokens, training, num_queries is None)
        query, key, value = self.query(queries), self.key(tokens), self.value(tokens)
        use_dropout = training and self.attention_dropout_rate > 0
        if self.compute_dtype == "float16" or use_dropout:
            probs = ops.cast(self._probabilities(query, key), self.compute_dtype)
            probs = self.attention_dropout(probs, training=training)
            context = ops.einsum("bnts,bsnh->btnh", probs, value)
        else:
            scale = 1.0 / math.sqrt(self.head_dim)
            context = _reduced_precision.attention(
                query, key, value, scale, self.compute_dtype, training=training
            )
        return self.out(context)

    def _quantized(self) -> bool:
        """True once `keras.Model.quantize` has replaced the projections' kernels (their
        `kernel` is then an integer tensor that only EinsumDense's own call can apply)."""
        layers = (self.query, self.key, self.value, self.out)
        return any(getattr(layer, "quantization_mode", None) for layer in layers)

    def save_own_variables(self, store):
        """Refuses to write an int8-quantized attention into a `.keras` file.

        `keras.Model.quantize("int8")` swaps the projections' float kernels for int8 kernels
        and scales, but the quantization is part of no layer config that rebuilds them
        (keras_vit's attention and MLP create their projections in `build`, as Keras' own
        MultiHeadAttention does), so the `.keras` file would not load back. Quantization is
        deterministic: save the float model and call `quantize("int8")` after loading it.
        `save_weights` (`.weights.h5`, no archive) still works: its file loads into a model
        quantized the same way first.

        Raises:
            ValueError: the layer's projections are quantized and `store` belongs to a
                `.keras` archive.
        """
        if self._quantized() and getattr(store, "archive", None) is not None:
            raise ValueError(QUANTIZED_SAVE_MESSAGE.format(name=self.name))
        super().save_own_variables(store)

    def _call_heads_major(self, queries, tokens, training, self_attention):
        """`call` under bfloat16: every product a 2-D or heads-major batched matmul.

        On TensorFlow without XLA (what `keras_vit.runtime.distribute.choose_precision` picks for
        bfloat16 on CPU) the 2-D products run with their bias as one fused oneDNN kernel and
        the batched products need no layout copies inside `einsum`; q, k and v come from one
        product when queries and keys are the same tokens. The scale 1/sqrt(head_dim) is
        folded into the query kernel and bias (exact for head_dim 64: a power of two); in
        training the softmax runs on float32 logits, as its gradient needs. Where this
        TensorFlow build's bfloat16 `einsum` rounds its partial sums or its softmax rounds
        each step (oneDNN off, `keras_vit._tf_checks`), the token products run as batched
        matmuls and the softmax in float32 in inference too. Same weights and, up to
        rounding, the same result as the EinsumDense path.
        """
        scale = 1.0 / math.sqrt(self.head_dim)
        if self_attention:
            query, key, value = self._project_heads_major(
                tokens, (self.query, self.key, self.value), (scale, 1.0, 1.0)
            )
        else:
            (query,) = self._project_heads_major(queries, (self.query,), (scale,))
            key, value = self._project_heads_major(tokens, (self.key, self.value), (1.0, 1.0))
        einsum_exact, softmax_exact = _exact_bfloat16_kernels()
        if einsum_exact:
            logits = ops.einsum("bnth,bnsh->bnts", query, key)
        else:
            logits = ops.matmul(query, ops.swapaxes(key, -1, -2))
        if training or not softmax_exact:
            probs = ops.cast(ops.softmax(ops.cast(logits, "float32"), axis=-1), self.compute_dtype)
        else:
            # the bfloat16 kernel already accumulates in float32 and rounds once: same bits
            # as the float32 softmax rounded to bfloat16, without the two casts
            probs = ops.softmax(logits, axis=-1)
        probs = self.attention_dropout(probs, training=training)
        if einsum_exact:
            context = ops.einsum("bnts,bnsh->btnh", probs, value)
        else:
            context = ops.transpose(ops.matmul(probs, value), (0, 2, 1, 3))
        hidden_dim = self.num_heads * self.head_dim
        outputs = ops.matmul(
            ops.reshape(context, (-1, hidden_dim)), ops.reshape(self.out.kernel, (hidden_dim, -1))
        )
        outputs = ops.add(outputs, self.out.bias)
        return ops.reshape(outputs, (ops.shape(queries)[0], ops.shape(queries)[1], hidden_dim))

    def _project_heads_major(self, tokens, layers, scales):
        """`tokens` `(batch, t, D)` through the EinsumDense `layers` as one 2-D product:
        a list of `(batch, num_heads, t, head_dim)`, output i multiplied by `scales[i]`."""
        hidden_dim = tokens.shape[-1]
        kernels, biases = [], []
        for layer, scale in zip(layers, scales, strict=True):
            kernel = ops.reshape(layer.kernel, (hidden_dim, -1))
            bias = ops.reshape(layer.bias, (-1,))
            if scale != 1.0:
                kernel = kernel * ops.cast(scale, kernel.dtype)
                bias = bias * ops.cast(scale, bias.dtype)
            kernels.append(kernel)
            biases.append(bias)
        kernel, bias = ops.concatenate(kernels, axis=1), ops.concatenate(biases, axis=0)
        x = ops.add(ops.matmul(ops.reshape(tokens, (-1, hidden_dim)), kernel), bias)
        batch, num_tokens = ops.shape(tokens)[0], ops.shape(tokens)[1]
        x = ops.reshape(x, (batch, num_tokens, len(layers), self.num_heads, self.head_dim))
        # unstack, not x[i]: the gradient of a slice is a zero-filled copy per output
        return ops.unstack(ops.transpose(x, (2, 0, 3, 1, 4)), num=len(layers), axis=0)

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
        }
