"""HeadProjection: EinsumDense from tokens to heads whose LoRA adapters have the paper's shape
(A `(D, R)`, B `(R, heads, head_dim)`), checked against a NumPy forward pass."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_vit.layers import HeadProjection

D, HEADS, HEAD_DIM, RANK = 12, 3, 4, 2


def _projection(seed=0):
    layer = HeadProjection("btd,dnh->btnh", output_shape=(None, HEADS, HEAD_DIM), bias_axes="nh")
    layer.build((None, 5, D))
    rng = np.random.default_rng(seed)
    for variable in layer.weights:
        variable.assign(rng.standard_normal(variable.shape).astype("float32"))
    return layer


def _tokens(seed=1):
    return np.random.default_rng(seed).standard_normal((2, 5, D)).astype("float32")


def test_adapters_have_the_paper_shape_and_apply_w_plus_scaled_a_b():
    layer = _projection()
    kernel, bias = (keras.ops.convert_to_numpy(v) for v in (layer.kernel, layer.bias))
    layer.enable_lora(RANK, lora_alpha=3)
    assert tuple(layer.lora_kernel_a.shape) == (D, RANK)
    assert tuple(layer.lora_kernel_b.shape) == (RANK, HEADS, HEAD_DIM)
    assert [v.path.split("/")[-1] for v in layer.trainable_weights] == [
        "bias",
        "lora_kernel_a",
        "lora_kernel_b",
    ]
    rng = np.random.default_rng(2)
    a = rng.standard_normal((D, RANK)).astype("float32")
    b = rng.standard_normal((RANK, HEADS * HEAD_DIM)).astype("float32")
    layer.lora_kernel_a.assign(a)
    layer.lora_kernel_b.assign(b.reshape(RANK, HEADS, HEAD_DIM))
    x = _tokens()
    adapted = kernel.reshape(D, -1) + 1.5 * a @ b  # alpha / rank = 3 / 2
    expected = (x @ adapted).reshape(2, 5, HEADS, HEAD_DIM) + bias
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)), expected, atol=1e-4)


def test_new_adapters_leave_the_output_unchanged():
    layer = _projection()
    x = _tokens()
    plain = keras.ops.convert_to_numpy(layer(x))
    layer.enable_lora(RANK)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(x)), plain)


def test_keras_quantizes_it_as_an_einsum_dense():
    layer = _projection()
    reference = keras.layers.EinsumDense(
        "btd,dnh->btnh", output_shape=(None, HEADS, HEAD_DIM), bias_axes="nh"
    )
    reference.build((None, 5, D))
    reference.set_weights(layer.get_weights())
    layer.quantize("int8")
    reference.quantize("int8")
    assert layer.quantization_mode == "int8"
    x = _tokens()
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(layer(x)), keras.ops.convert_to_numpy(reference(x))
    )
    layer.enable_lora(RANK)  # QLoRA-style: Keras' own adapter shapes on a quantized kernel
    assert tuple(layer.lora_kernel_a.shape) == (D, HEADS, RANK)


def test_quantizing_paper_shaped_adapters_is_refused():
    layer = _projection()
    layer.enable_lora(RANK)
    with pytest.raises(ValueError, match="LoRA adapters of shape"):
        layer.quantize("int8")


def test_adapters_twice_or_before_build_are_refused():
    layer = _projection()
    layer.enable_lora(RANK)
    with pytest.raises(ValueError, match="already enabled"):
        layer.enable_lora(RANK)
    unbuilt = HeadProjection("btd,dnh->btnh", output_shape=(None, HEADS, HEAD_DIM))
    with pytest.raises(ValueError, match="before it is built"):
        unbuilt.enable_lora(RANK)
