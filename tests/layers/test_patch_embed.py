import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_vit.layers import PatchEmbed
from tests.numpy_reference import patchify


def test_output_shape_and_kernel_layout_non_square():
    layer = PatchEmbed(patch_size=8, hidden_dim=32)
    out = layer(np.zeros((2, 32, 48, 3), np.float32))
    assert tuple(out.shape) == (2, 4 * 6, 32)
    assert tuple(layer.conv.kernel.shape) == (8, 8, 3, 32)


def test_equals_flattened_patches_times_kernel():
    """Eq. 1: each patch flattened (row-major) and multiplied by E, plus bias."""
    rng = np.random.default_rng(0)
    images = rng.standard_normal((2, 16, 24, 3)).astype(np.float32)
    layer = PatchEmbed(patch_size=8, hidden_dim=5)
    out = np.asarray(layer(images))
    kernel = np.asarray(layer.conv.kernel).reshape(-1, 5)
    bias = rng.standard_normal(5).astype(np.float32)
    layer.conv.bias.assign(bias)
    out = np.asarray(layer(images))
    expected = patchify(images, 8) @ kernel + bias
    np.testing.assert_allclose(out, expected, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float64", "float32", "uint8", "float16"])
def test_accepts_common_input_dtypes(dtype):
    layer = PatchEmbed(patch_size=4, hidden_dim=8)
    out = layer(np.ones((1, 8, 8, 3), dtype=dtype))
    assert out.dtype == "float32"


def test_rejects_size_not_divisible_by_patch():
    with pytest.raises(ValueError, match=r"not divisible by the patch size"):
        PatchEmbed(patch_size=16, hidden_dim=8)(np.zeros((1, 220, 224, 3), np.float32))


def test_rejects_call_with_other_size_than_built():
    layer = PatchEmbed(patch_size=8, hidden_dim=8)
    layer(np.zeros((1, 32, 32, 3), np.float32))
    with pytest.raises(ValueError, match=r"built for images of size \(32, 32\)"):
        layer(np.zeros((1, 40, 40, 3), np.float32))


def test_rejects_other_channel_count_than_built():
    layer = PatchEmbed(patch_size=8, hidden_dim=8)
    layer(np.zeros((1, 32, 32, 3), np.float32))
    with pytest.raises(ValueError, match=r"built for 3 channels"):
        layer(np.zeros((1, 32, 32, 1), np.float32))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(patch_size=0, hidden_dim=8), "patch_size"),
        (dict(patch_size=8, hidden_dim=-1), "hidden_dim"),
        (dict(patch_size=(8, 8, 8), hidden_dim=8), "patch_size"),
    ],
)
def test_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PatchEmbed(**kwargs)


WRONG_SIZE_CALLS = {
    "predict": lambda model, x: model.predict(x, verbose=0),
    "call": lambda model, x: model(x),
    "predict_on_batch": lambda model, x: model.predict_on_batch(x),
}


@pytest.mark.parametrize(
    "first, second", [(a, b) for a in WRONG_SIZE_CALLS for b in WRONG_SIZE_CALLS]
)
def test_wrong_image_size_after_a_good_call_gets_the_clear_shape_error(first, second):
    """B: `predict` on 32x32 then on 40x40 used to fail inside TensorFlow at the
    position-embedding add; every order of calls now names the expected and found shapes."""
    import keras_vit
    from tests.conftest import TINY_VIT

    model = keras_vit.ViT(**TINY_VIT)
    good = np.zeros((2, 32, 32, 3), "float32")
    wrong = np.zeros((1, 40, 40, 3), "float32")
    WRONG_SIZE_CALLS[first](model, good)
    for _ in range(2):  # the second wrong call runs the relaxed trace again
        with pytest.raises(Exception) as info:
            WRONG_SIZE_CALLS[second](model, wrong)
        message = str(info.value)
        # Keras' input check (a direct call) or keras_vit's, before the step (predict)
        expected = ("expected shape=(None, 32, 32, 3)", "takes images of shape (32, 32, 3)")
        assert any(text in message for text in expected), message[-2000:]
        assert "40, 40, 3)" in message or "[1 40 40 3]" in message, message[-2000:]
        assert "posembed" not in message.split("expected shape")[0][-300:]
    assert np.asarray(WRONG_SIZE_CALLS[first](model, good)).shape == (2, 10)  # still works


@settings(max_examples=10, deadline=None)
@given(
    patch=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    grid=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    channels=st.sampled_from([1, 3, 4]),
    policy=st.sampled_from(["mixed_bfloat16", "mixed_float16"]),
    seed=st.integers(0, 2**16),
)
def test_reduced_precision_product_equals_eq1_value_and_kernel_gradient(
    patch, grid, channels, policy, seed
):
    """Under reduced precision the layer is one 2-D product of the flattened patches (not the
    convolution): eq. 1 in float64, and the kernel's gradient patches^T @ upstream."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    size = (patch[0] * grid[0], patch[1] * grid[1])
    images = rng.uniform(-1, 1, (2, *size, channels)).astype(np.float32)
    layer = PatchEmbed(patch_size=patch, hidden_dim=6, dtype=policy)
    layer.build(images.shape)
    layer.conv.bias.assign(rng.standard_normal(6).astype(np.float32))
    upstream = rng.standard_normal((2, grid[0] * grid[1], 6))
    with tf.GradientTape() as tape:
        out = layer(images)
        loss = tf.reduce_sum(tf.cast(out, tf.float64) * upstream)
    d_kernel = np.asarray(tape.gradient(loss, layer.conv.kernel), np.float64)
    assert out.dtype == policy.split("_")[1]
    rounded = np.asarray(tf.cast(tf.cast(images, out.dtype), tf.float64))
    flat = np.stack([_patches_of(x, patch) for x in rounded])
    kernel = np.asarray(layer.conv.kernel, np.float64).reshape(-1, 6)
    expected = flat @ kernel + np.asarray(layer.conv.bias, np.float64)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(np.asarray(tf.cast(out, tf.float64)), expected, atol=1e-2 * scale)
    expected_grad = np.einsum("bnk,bnd->kd", flat, upstream).reshape(layer.conv.kernel.shape)
    np.testing.assert_allclose(d_kernel, expected_grad, atol=1e-2 * np.abs(expected_grad).max())


def _patches_of(image, patch):
    """(H, W, C) -> (patches, P*Q*C), row-major patches, each flattened row-major."""
    (p, q), (h, w, c) = patch, image.shape
    x = image.reshape(h // p, p, w // q, q, c).transpose(0, 2, 1, 3, 4)
    return x.reshape((h // p) * (w // q), p * q * c)
