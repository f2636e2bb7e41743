import warnings

import keras
import numpy as np
import pytest

from keras_vit.layers import MlpBlock, MultiHeadSelfAttention, TransformerBlock
from tests import numpy_reference as ref
from tests.output_checks import assert_outputs_close, bfloat16_slack


def _official_block_params(block, prefix="b/"):
    """Reads a built block's weights into official-key arrays (explicit attributes)."""
    params = {}
    for norm, attr in (("LayerNorm_0", block.norm_0), ("LayerNorm_2", block.norm_2)):
        params[f"{prefix}{norm}/scale"] = np.asarray(attr.gamma)
        params[f"{prefix}{norm}/bias"] = np.asarray(attr.beta)
    for name in ("query", "key", "value", "out"):
        layer = getattr(block.attention, name)
        params[f"{prefix}MultiHeadDotProductAttention_1/{name}/kernel"] = np.asarray(layer.kernel)
        params[f"{prefix}MultiHeadDotProductAttention_1/{name}/bias"] = np.asarray(layer.bias)
    for name, layer in (("Dense_0", block.mlp.dense_0), ("Dense_1", block.mlp.dense_1)):
        params[f"{prefix}MlpBlock_3/{name}/kernel"] = np.asarray(layer.kernel)
        params[f"{prefix}MlpBlock_3/{name}/bias"] = np.asarray(layer.bias)
    return params


def _numpy_block(params, x, num_heads, eps=1e-6, approximate=True, prefix="b/"):
    y = ref.layer_norm(
        x, params[prefix + "LayerNorm_0/scale"], params[prefix + "LayerNorm_0/bias"], eps
    )
    x = x + ref.self_attention(y, params, prefix + "MultiHeadDotProductAttention_1/", num_heads)
    y = ref.layer_norm(
        x, params[prefix + "LayerNorm_2/scale"], params[prefix + "LayerNorm_2/bias"], eps
    )
    h = ref.gelu(
        y @ params[prefix + "MlpBlock_3/Dense_0/kernel"]
        + params[prefix + "MlpBlock_3/Dense_0/bias"],
        approximate,
    )
    return (
        x
        + h @ params[prefix + "MlpBlock_3/Dense_1/kernel"]
        + params[prefix + "MlpBlock_3/Dense_1/bias"]
    )


def _randomise(layer, rng, scale=0.3):
    for w in layer.weights:
        w.assign(
            rng.standard_normal(w.shape).astype(np.float32) * scale + (w.path.endswith("gamma"))
        )


def _random_block_and_reference(seed, approximate=True, **kwargs):
    """A built block with random weights, an input x and the NumPy output on x (float64)."""
    rng = np.random.default_rng(seed)
    block = TransformerBlock(num_heads=4, mlp_dim=64, gelu_approximate=approximate, **kwargs)
    block.build((None, 17, 32))
    _randomise(block, rng)
    x = rng.standard_normal((2, 17, 32)).astype(np.float32)
    params = _official_block_params(block)
    return block, x, _numpy_block(params, x.astype(np.float64), 4, approximate=approximate)


@pytest.mark.parametrize("approximate", [True, False])
def test_matches_numpy_equations(approximate):
    block, x, expected = _random_block_and_reference(1, approximate)
    np.testing.assert_allclose(np.asarray(block(x)), expected, atol=1e-4)


@pytest.mark.parametrize("num_output_tokens", [1, 3])
def test_num_output_tokens_gives_the_first_rows_of_the_full_block(num_output_tokens):
    """Queries from the first k tokens only, keys/values from all: rows 0..k-1 of eq. 2-3."""
    block, x, expected = _random_block_and_reference(2, num_output_tokens=num_output_tokens)
    out = np.asarray(block(x))
    assert out.shape == (2, num_output_tokens, 32)
    assert block.compute_output_shape((None, 17, 32)) == (None, num_output_tokens, 32)
    np.testing.assert_allclose(out, expected[:, :num_output_tokens], atol=1e-4)
    full = np.asarray(block.forward(x, num_output_tokens=None))
    np.testing.assert_allclose(full, expected, atol=1e-4)
    clone = TransformerBlock.from_config(block.get_config())
    assert clone.num_output_tokens == num_output_tokens


def test_attention_builds_in_a_functional_model():
    tokens = keras.Input((5, 32))
    assert MultiHeadSelfAttention(4)(tokens).shape == (None, 5, 32)
    assert MultiHeadSelfAttention(4)(tokens, num_queries=2).shape == (None, 2, 32)


@pytest.mark.parametrize("num_queries", [0, -1, True, 2.5, 6])
def test_attention_rejects_bad_num_queries(num_queries):
    layer = MultiHeadSelfAttention(4)
    x = np.zeros((2, 5, 32), np.float32)
    with pytest.raises(ValueError, match="num_queries"):
        layer(x, num_queries=num_queries)


def test_num_output_tokens_above_the_token_count_is_rejected_at_build():
    with pytest.raises(ValueError, match="num_output_tokens=8, num_tokens=5"):
        TransformerBlock(num_heads=4, mlp_dim=64, num_output_tokens=8).build((None, 5, 32))
    unknown = TransformerBlock(num_heads=4, mlp_dim=64, num_output_tokens=2)
    assert unknown(keras.Input((None, 32))).shape == (None, None, 32)


def test_attention_num_queries_under_float16_matches_full_rows():
    """The float16 path (float32 logits) also honours num_queries."""
    rng = np.random.default_rng(3)
    layer = MultiHeadSelfAttention(num_heads=4, dtype="mixed_float16")
    layer.build((None, 9, 32))
    x = rng.standard_normal((2, 9, 32)).astype(np.float32)
    full = np.asarray(layer(x), np.float32)
    first = np.asarray(layer(x, num_queries=2), np.float32)
    assert first.shape == (2, 2, 32)
    np.testing.assert_allclose(first, full[:, :2], atol=1e-2)


def test_weight_shapes_follow_checkpoint_layout():
    block = TransformerBlock(num_heads=12, mlp_dim=3072)
    block.build((None, 197, 768))
    attention = block.attention
    assert tuple(attention.query.kernel.shape) == (768, 12, 64)
    assert tuple(attention.query.bias.shape) == (12, 64)
    assert tuple(attention.out.kernel.shape) == (12, 64, 768)
    assert tuple(attention.out.bias.shape) == (768,)
    assert tuple(block.mlp.dense_0.kernel.shape) == (768, 3072)


def test_b05_build_alone_creates_all_16_weights():
    """B05: sub-layers are built by build(), no call needed, and all weights are visible."""
    block = TransformerBlock(num_heads=4, mlp_dim=64)
    block.build((None, 17, 32))
    assert len(block.weights) == 16
    assert len(block.trainable_weights) == 16


def test_b03_config_round_trip_keeps_every_argument():
    """B03: every constructor argument is in get_config; the rebuilt block computes the same."""
    block = TransformerBlock(
        num_heads=4,
        mlp_dim=64,
        dropout_rate=0.1,
        attention_dropout_rate=0.1,
        drop_path_rate=0.2,
        layer_norm_epsilon=1e-6,
        gelu_approximate=False,
        name="blk",
    )
    config = block.get_config()
    for key in (
        "num_heads",
        "mlp_dim",
        "dropout_rate",
        "attention_dropout_rate",
        "drop_path_rate",
        "layer_norm_epsilon",
        "gelu_approximate",
    ):
        assert key in config
    clone = TransformerBlock.from_config(config)
    assert clone.get_config() == config
    x = np.random.default_rng(0).standard_normal((2, 17, 32)).astype(np.float32)
    block.build(x.shape)
    clone.build(x.shape)
    assert [w.shape for w in clone.weights] == [w.shape for w in block.weights]
    clone.set_weights(block.get_weights())
    np.testing.assert_allclose(np.asarray(clone(x)), np.asarray(block(x)), atol=1e-6)


def test_dropout_and_drop_path_only_in_training():
    block = TransformerBlock(num_heads=4, mlp_dim=64, dropout_rate=0.5, drop_path_rate=0.5)
    x = np.random.default_rng(0).standard_normal((4, 17, 32)).astype(np.float32)
    inference = np.asarray(block(x))
    np.testing.assert_array_equal(inference, np.asarray(block(x, training=False)))
    assert not np.allclose(np.asarray(block(x, training=True)), inference)


def test_b12_layer_norm_under_mixed_float16_stays_accurate():
    """B12: inputs ~N(300, 50^2) width 768 under mixed_float16, against the NumPy block.

    Compared: each LayerNorm's own output (~N(0, 1), float16 spacing <= 2^-9 there, so atol
    4e-3) and the residual branch out - x (std ~1.3 with these weights; the output near
    300-600 is stored with float16 spacing 0.25-0.5, so atol 0.3). Returning the input
    unchanged leaves a branch of 0 and fails.
    """
    rng = np.random.default_rng(2)
    half = TransformerBlock(num_heads=12, mlp_dim=256, dtype="mixed_float16")
    half.build((None, 17, 768))
    _randomise(half, rng, scale=0.05)
    x = keras.ops.cast(rng.normal(300, 50, (2, 17, 768)).astype(np.float32), "float16")
    x64 = np.asarray(x).astype(np.float64)
    params = _official_block_params(half)
    for name, norm in (("LayerNorm_0", half.norm_0), ("LayerNorm_2", half.norm_2)):
        expected = ref.layer_norm(
            x64, params[f"b/{name}/scale"], params[f"b/{name}/bias"], half.layer_norm_epsilon
        )
        out = np.asarray(keras.ops.cast(norm(x), "float32"))
        assert_outputs_close(out, expected, atol=4e-3, what=f"{name} output")
    branch = np.asarray(keras.ops.cast(half(x), "float32")) - x64
    expected_branch = _numpy_block(params, x64, 12) - x64
    assert_outputs_close(branch, expected_branch, atol=0.3, what="residual branch out - x")


def test_b13_float16_softmax_with_huge_logits_is_finite_and_normalised():
    """B13: q.k logits near +-6e4 would overflow float16; probabilities stay finite, sum 1."""
    attention = MultiHeadSelfAttention(num_heads=2, dtype="mixed_float16")
    attention.build((None, 5, 16))
    for name in ("query", "key"):
        getattr(attention, name).kernel.assign(np.full((16, 2, 8), 1.0, np.float32))
    x = keras.ops.cast(
        np.full((1, 5, 16), 20.0, np.float32) * np.linspace(-1, 1, 5)[None, :, None], "float16"
    )
    # q.k per head = 8 * (16*20)^2 * products of the linspace factors, i.e. up to ~8e5 before
    # the 1/sqrt(hd) scale: far past float16's 65504.
    probs = np.asarray(attention.attention_probabilities(x))
    assert np.isfinite(probs).all()
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-3)
    # The float64 NumPy softmax of the same logits (query/key biases are zero here).
    x64 = np.asarray(x).astype(np.float64)
    q, k = (
        x64 @ np.asarray(getattr(attention, n).kernel).reshape(16, 16) for n in ("query", "key")
    )
    q, k = (t.reshape(1, 5, 2, 8).transpose(0, 2, 1, 3) for t in (q, k))
    expected = ref.softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(8))
    assert_outputs_close(probs, expected, atol=1e-3, what="attention probabilities")
    assert np.isfinite(np.asarray(keras.ops.cast(attention(x), "float32"))).all()


def test_attention_probabilities_rows_sum_to_one():
    block = TransformerBlock(num_heads=4, mlp_dim=64)
    x = np.random.default_rng(3).standard_normal((2, 9, 32)).astype(np.float32)
    block.build(x.shape)
    probs = np.asarray(block.attention_probabilities(x))
    assert probs.shape == (2, 4, 9, 9)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)


def test_mlp_block_matches_numpy():
    rng = np.random.default_rng(4)
    mlp = MlpBlock(mlp_dim=16)
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    mlp.build(x.shape)
    _randomise(mlp, rng)
    h = ref.gelu(x @ np.asarray(mlp.dense_0.kernel) + np.asarray(mlp.dense_0.bias), True)
    expected = h @ np.asarray(mlp.dense_1.kernel) + np.asarray(mlp.dense_1.bias)
    np.testing.assert_allclose(np.asarray(mlp(x)), expected, atol=1e-5)


def test_qkv_initialiser_is_glorot_over_flattened_matrix():
    """The release: xavier_uniform over (D, D): limit sqrt(6 / (D + D))."""
    attention = MultiHeadSelfAttention(num_heads=8)
    attention.build((None, 4, 256))
    kernel = np.asarray(attention.query.kernel)
    limit = np.sqrt(6 / (256 + 256))
    assert np.abs(kernel).max() <= limit
    assert np.abs(kernel).max() > 0.95 * limit


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_heads=0, mlp_dim=8), "num_heads"),
        (dict(num_heads=2, mlp_dim=8, dropout_rate=1.5), "dropout_rate"),
        (dict(num_heads=2, mlp_dim=8, drop_path_rate=-0.1), "drop_path_rate"),
        (dict(num_heads=2, mlp_dim=8, layer_norm_epsilon=0), "layer_norm_epsilon"),
        (dict(num_heads=2, mlp_dim=8, num_output_tokens=0), "num_output_tokens"),
        (dict(num_heads=2, mlp_dim=8, num_output_tokens=1.5), "num_output_tokens"),
    ],
)
def test_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TransformerBlock(**kwargs)


def test_rejects_width_not_divisible_by_heads():
    with pytest.raises(ValueError, match="hidden_dim=30, num_heads=4"):
        TransformerBlock(num_heads=4, mlp_dim=8).build((None, 5, 30))


def _bfloat16_block_and_reference(seed, **kwargs):
    """A mixed_bfloat16 block (head_dim 16) and a float32 twin with the same random weights."""
    rng = np.random.default_rng(seed)
    blocks = [
        TransformerBlock(num_heads=4, mlp_dim=128, dtype=policy, **kwargs)
        for policy in ("mixed_bfloat16", "float32")
    ]
    for block in blocks:
        block.build((None, 17, 64))
    _randomise(blocks[1], rng, scale=0.15)
    blocks[0].set_weights(blocks[1].get_weights())
    x = rng.standard_normal((2, 17, 64)).astype(np.float32)
    return blocks, x, _numpy_block(_official_block_params(blocks[1]), x.astype(np.float64), 4)


@pytest.fixture(params=["measured", "matmul"])
def bfloat16_kernels(request, monkeypatch):
    """The bfloat16 attention as this host's kernels choose it, and forced onto the path
    taken where bfloat16 einsum and softmax round each step (batched matmuls, float32
    softmax), so that every host runs both."""
    if request.param == "matmul":
        from keras_vit.kernels import tensorflow as tf_kernels

        monkeypatch.setattr(tf_kernels, "exact_bfloat16_kernels", lambda: (False, False))
    return request.param


@pytest.mark.parametrize("num_output_tokens", [None, 3])
def test_bfloat16_block_matches_numpy_equations(num_output_tokens, bfloat16_kernels):
    """The bfloat16 attention (one q/k/v product, heads-major, scale folded into the query
    kernel) against the float64 equations: within bfloat16 rounding (8 bits: ~0.4%)."""
    (half, _), x, expected = _bfloat16_block_and_reference(5, num_output_tokens=num_output_tokens)
    rows = expected.shape[1] if num_output_tokens is None else num_output_tokens
    out = np.asarray(keras.ops.cast(half(x), "float32"))
    assert out.shape == (2, rows, 64)
    # the residual branch alone (the input passes through exactly): std ~1.6 here
    branch, expected_branch = out - x[:, :rows], expected[:, :rows] - x[:, :rows]
    assert np.abs(expected_branch).std() > 0.5
    assert_outputs_close(
        branch, expected_branch, atol=0.06 * bfloat16_slack(), what="bfloat16 residual branch"
    )


def test_bfloat16_block_gradients_match_float32(bfloat16_kernels):
    """Every weight's gradient under mixed_bfloat16 (through the concatenated q/k/v kernel,
    the folded scale and the unstacked heads) agrees with float32 within bfloat16 rounding."""
    import tensorflow as tf

    (half, full), x, _ = _bfloat16_block_and_reference(6)
    probe = np.random.default_rng(7).standard_normal((2, 17, 64)).astype(np.float32)
    grads = []
    for block in (half, full):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(block(x, training=True), "float32") * probe)
        grads.append(tape.gradient(loss, block.trainable_weights))
    grads = {
        weight.path.split("/", 1)[1]: (np.asarray(g_half, np.float32), np.asarray(g_full))
        for weight, g_half, g_full in zip(full.trainable_weights, *grads, strict=True)
    }
    assert len(grads) == 16
    for path, (g_half, g_full) in grads.items():
        # The key bias adds the same q.b to every logit of a row, which the softmax removes:
        # its gradient is 0 up to rounding, so it is measured on the query bias's scale.
        scale_of = path.replace("key/bias", "query/bias")
        scale = np.abs(grads[scale_of][1]).max()
        assert scale > 0, path
        assert_outputs_close(
            g_half / scale, g_full / scale, atol=0.03 * bfloat16_slack(), what=path
        )


def test_bfloat16_inference_softmax_matches_the_float32_softmax():
    """Inference (bfloat16 softmax kernel, float32 accumulation) against training mode
    (float32 softmax, no dropout here): the same attention output within one bfloat16 step."""
    rng = np.random.default_rng(8)
    attention = MultiHeadSelfAttention(num_heads=4, dtype="mixed_bfloat16")
    attention.build((None, 50, 64))
    for weight in attention.weights:
        weight.assign(rng.standard_normal(weight.shape).astype(np.float32) * 0.4)
    x = rng.standard_normal((2, 50, 64)).astype(np.float32)
    inference = np.asarray(keras.ops.cast(attention(x, training=False), "float32"))
    reference = np.asarray(keras.ops.cast(attention(x, training=True), "float32"))
    assert np.abs(reference).max() > 1.0
    np.testing.assert_allclose(inference, reference, rtol=2**-7, atol=2**-7)


def test_bfloat16_attention_after_int8_quantization_keeps_einsum_dense_path():
    """`keras.Model.quantize("int8")` swaps the projections' kernels for int8 ones that only
    EinsumDense applies: the quantized bfloat16 model stays within int8 error of the float32
    result (the heads-major path would read the raw int8 kernel: errors of ~1e5)."""
    rng = np.random.default_rng(9)
    tokens = keras.Input((17, 64))
    attention = MultiHeadSelfAttention(num_heads=4, dtype="mixed_bfloat16")
    model = keras.Model(tokens, attention(tokens))
    for weight in model.weights:
        weight.assign(rng.standard_normal(weight.shape).astype(np.float32) * 0.3)
    x = rng.standard_normal((2, 17, 64)).astype(np.float32)
    reference = np.asarray(keras.ops.cast(model(x), "float32"))
    assert np.abs(reference).max() > 1.0
    with warnings.catch_warnings():  # Keras names each layer without a quantize method
        warnings.simplefilter("ignore", UserWarning)
        model.quantize("int8")
    assert attention.query.quantization_mode == "int8"
    quantized = np.asarray(keras.ops.cast(model(x), "float32"))
    assert_outputs_close(
        quantized, reference, atol=0.05 * bfloat16_slack() * np.abs(reference).max(), what="int8"
    )


@pytest.mark.parametrize("approximate", [True, False])
def test_float32_training_block_matches_equations_and_keras_gradients(approximate, monkeypatch):
    """In float32 training the block's LayerNorms, GELU and attention core are
    keras_vit.kernels.tensorflow's forms: the output is the NumPy block's, and every weight's
    gradient is the one autodiff gives through Keras' own LayerNormalization, gelu and
    dot_product_attention (the inference path)."""
    import tensorflow as tf

    from keras_vit.kernels import dispatch, tf_checks

    monkeypatch.setattr(tf_checks, "gpu_visible", lambda: False)  # the kernel, on any host
    block, x, expected = _random_block_and_reference(8, approximate)
    probe = np.random.default_rng(9).standard_normal((2, 17, 32)).astype(np.float32)
    kernels_used = []
    real_fast = dispatch._fast

    def recording(dtype, training):
        kernels_used.append(real_fast(dtype, training=training))
        return kernels_used[-1]

    def gradients():
        with tf.GradientTape() as tape:
            out = block(x, training=True)
            loss = tf.reduce_sum(out * probe)
        return out, tape.gradient(loss, block.trainable_weights)

    monkeypatch.setattr(dispatch, "_fast", recording)
    out, fast = gradients()
    assert kernels_used and all(kernels_used)
    np.testing.assert_allclose(np.asarray(out), expected, atol=1e-4)
    monkeypatch.setattr(dispatch, "_fast", lambda dtype, training: False)
    _, keras_path = gradients()
    assert len(fast) == 16
    for weight, g_fast, g_keras in zip(block.trainable_weights, fast, keras_path, strict=True):
        g_keras = np.asarray(g_keras)
        assert np.abs(g_keras).max() > 0 or "key/bias" in weight.path, weight.path
        np.testing.assert_allclose(
            np.asarray(g_fast),
            g_keras,
            atol=2e-5 * max(1.0, np.abs(g_keras).max()),
            err_msg=weight.path,
        )


@pytest.mark.parametrize("jit_compile", [False, True])
def test_float32_training_attention_kernel_runs_without_xla_only(jit_compile, monkeypatch):
    """keras_vit.kernels.tensorflow.attention in a float32 training step without XLA; under XLA,
    where it measured slower for the default model, Keras' dot_product_attention. Both give
    the block the same gradients."""
    import tensorflow as tf

    from keras_vit.kernels import tensorflow as tf_kernels
    from keras_vit.kernels import tf_checks

    monkeypatch.setattr(tf_checks, "gpu_visible", lambda: False)  # as on a CPU-only host
    block, x, _ = _random_block_and_reference(8, True)
    calls = []
    real = tf_kernels.attention

    def counting(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(tf_kernels, "attention", counting)

    def gradients(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(block(x, training=True) ** 2)
        return tape.gradient(loss, block.trainable_weights)

    compiled = tf.function(gradients, jit_compile=jit_compile)(tf.constant(x))
    assert bool(calls) is not jit_compile
    eager = [np.asarray(g) for g in gradients(tf.constant(x))]
    largest = max(float(np.abs(g).max()) for g in eager)
    for weight, g_compiled, g_eager in zip(block.trainable_weights, compiled, eager, strict=True):
        # the key bias's gradient is 0 in exact arithmetic (softmax ignores a constant
        # logit shift): rounding noise, bounded against the largest gradient
        own = largest if "key/bias" in weight.path else max(1.0, float(np.abs(g_eager).max()))
        np.testing.assert_allclose(
            np.asarray(g_compiled), g_eager, atol=2e-4 * own, err_msg=weight.path
        )


def test_float32_training_attention_kernel_stays_off_where_a_gpu_is_visible(monkeypatch):
    """Measured on CPUs only: a process that sees a GPU keeps Keras' dot_product_attention."""
    import tensorflow as tf

    from keras_vit.kernels import tensorflow as tf_kernels
    from keras_vit.kernels import tf_checks

    monkeypatch.setattr(tf_checks, "gpu_visible", lambda: True)
    block, x, _ = _random_block_and_reference(8, True)
    calls = []
    monkeypatch.setattr(tf_kernels, "attention", lambda *args: calls.append(1))
    out = block(tf.constant(x), training=True)
    assert not calls and out.shape == x.shape
    assert block.attention.attention_kernel == "fused"


def test_remat_recomputes_the_block_in_training_with_the_same_values(monkeypatch):
    """remat=True routes the training call through keras.remat (not inference) and gives the
    block's outputs and every weight's gradient unchanged; the flag is in the config."""
    import tensorflow as tf

    rng = np.random.default_rng(11)
    blocks = [TransformerBlock(num_heads=2, mlp_dim=32, remat=flag) for flag in (True, False)]
    for block in blocks:
        block.build((None, 5, 16))
    _randomise(blocks[0], rng, scale=0.3)
    blocks[1].set_weights(blocks[0].get_weights())
    calls = []
    real = keras.remat
    monkeypatch.setattr(keras, "remat", lambda f: calls.append(1) or real(f))
    x = tf.constant(rng.standard_normal((2, 5, 16)).astype(np.float32))
    results = []
    for block in blocks:
        with tf.GradientTape() as tape:
            out = block(x, training=True)
            loss = tf.reduce_sum(out**2)
        results.append((np.asarray(out), tape.gradient(loss, block.trainable_weights)))
    assert calls == [1]  # the remat block, once
    blocks[0](x, training=False)
    assert calls == [1]  # inference stores nothing: no remat
    np.testing.assert_allclose(results[0][0], results[1][0], atol=1e-6)
    for g_remat, g_plain in zip(results[0][1], results[1][1], strict=True):
        np.testing.assert_allclose(np.asarray(g_remat), np.asarray(g_plain), atol=1e-5)
    assert blocks[0].get_config()["remat"] is True
    assert TransformerBlock.from_config(blocks[0].get_config()).remat is True
    with pytest.raises(ValueError, match="`remat` must be True or False. Received: remat='yes'"):
        TransformerBlock(num_heads=2, mlp_dim=32, remat="yes")
