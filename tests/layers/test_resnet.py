"""StdConv2D and BottleneckUnit against NumPy computations of the release's equations.

References in tests/numpy_reference.py, from vit_facts.md section 2: weight standardisation
w <- (w - mean) / (std + 1e-5) per output channel (population std, epsilon outside the
square root), TF "SAME" padding (pad_total = max((out - 1) * stride + k - in, 0), the smaller
half before), GroupNorm over (height, width, channels-in-group).
"""

import keras
import numpy as np
import pytest

from keras_vit.layers import BottleneckUnit, StdConv2D
from tests.numpy_reference import conv2d_same as np_conv_same
from tests.numpy_reference import group_norm as np_group_norm
from tests.numpy_reference import relu, tf_same_padding
from tests.numpy_reference import standardize_kernel as np_standardize

# ---------------------------------------------------------------- NumPy references


def np_bottleneck(x, p, stride, groups):
    """The release's ResidualUnit (models_resnet.py) from its equations."""

    def conv_gn(y, name, s=1):
        y = np_conv_same(y, np_standardize(p[name]["kernel"]), s)
        gn = p[name.replace("conv", "gn")]
        return np_group_norm(y, groups, gn["gamma"], gn["beta"])

    residual = conv_gn(x, "conv_proj", stride) if "conv_proj" in p else x
    y = relu(conv_gn(x, "conv1"))
    y = relu(conv_gn(y, "conv2", stride))
    y = conv_gn(y, "conv3")
    return relu(residual + y)


def randomize_unit(unit, rng):
    """Random raw kernels and GroupNorm scales/offsets (gn3 non-zero so the branch counts)."""
    params = {}
    for name in ("conv1", "conv2", "conv3", "conv_proj"):
        if not hasattr(unit, name):
            continue
        conv = getattr(unit, name)
        gn = getattr(unit, name.replace("conv", "gn"))
        params[name] = {"kernel": rng.normal(0.3, 0.7, conv.kernel.shape)}
        conv.kernel.assign(params[name]["kernel"])
        gamma = rng.normal(1.0, 0.5, gn.gamma.shape)
        beta = rng.normal(0.0, 0.5, gn.beta.shape)
        gn.gamma.assign(gamma)
        gn.beta.assign(beta)
        params[name.replace("conv", "gn")] = {"gamma": gamma, "beta": beta}
    return params


# ---------------------------------------------------------------- StdConv2D


def test_effective_kernel_is_the_numpy_weight_standardisation():
    rng = np.random.default_rng(0)
    conv = StdConv2D(6, 3)
    conv.build((None, 5, 5, 4))
    raw = rng.normal(0.5, 2.0, (3, 3, 4, 6)).astype(np.float32)
    conv.kernel.assign(raw)
    np.testing.assert_allclose(np.asarray(conv.effective_kernel()), np_standardize(raw), atol=1e-5)
    np.testing.assert_array_equal(np.asarray(conv.kernel), raw)  # the variable stays raw


def test_epsilon_is_outside_the_square_root():
    """A channel with std 1e-5: outside gives (w - m) / 2e-5 (std 0.5 after), inside would not."""
    conv = StdConv2D(1, 1, epsilon=1e-5)
    conv.build((None, 1, 1, 2))
    conv.kernel.assign(np.array([1.0 + 1e-5, 1.0 - 1e-5], np.float64).reshape(1, 1, 2, 1))
    effective = np.asarray(conv.effective_kernel()).ravel()
    np.testing.assert_allclose(effective, [0.5, -0.5], rtol=2e-2)


@pytest.mark.parametrize("stride, size", [(1, 7), (2, 10), (2, 9)])
def test_std_conv_output_matches_numpy_same_convolution(stride, size):
    rng = np.random.default_rng(stride + size)
    x = rng.standard_normal((2, size, size + 1, 3)).astype(np.float32)
    conv = StdConv2D(5, (3, 4), strides=stride)
    conv.build(x.shape)
    raw = rng.standard_normal((3, 4, 3, 5))
    conv.kernel.assign(raw)
    expected = np_conv_same(x.astype(np.float64), np_standardize(raw), stride)
    np.testing.assert_allclose(np.asarray(conv(x)), expected, atol=1e-4)


def test_b35_effective_kernels_of_a_hybrid_have_mean_0_var_1():
    """B35: per output channel the kernel a hybrid conv uses has mean 0 and biased var ~1."""
    from keras_vit import HybridViT

    model = HybridViT(
        resnet_stages=(1,),
        resnet_width=32,
        patch_size=2,
        hidden_dim=32,
        num_heads=4,
        mlp_dim=64,
        num_layers=1,
        image_size=32,
        num_classes=10,
    )
    convs = [model.get_layer("conv_root")]
    unit = model.get_layer("block1_unit1")
    convs += [unit.conv1, unit.conv2, unit.conv3, unit.conv_proj]
    rng = np.random.default_rng(1)
    for conv in convs:
        raw = rng.normal(0.2, 0.05, conv.kernel.shape)
        conv.kernel.assign(raw)
        effective = np.asarray(conv.effective_kernel()).reshape(-1, conv.filters)
        np.testing.assert_allclose(effective.mean(axis=0), 0.0, atol=1e-5)
        # biased variance is (std / (std + 1e-5))^2: 1 up to the epsilon
        std = raw.reshape(-1, conv.filters).std(axis=0)
        np.testing.assert_allclose(effective.var(axis=0), (std / (std + 1e-5)) ** 2, rtol=1e-4)
        np.testing.assert_allclose(effective.var(axis=0), 1.0, atol=1e-3)
    # and the model's root output is the NumPy convolution with that kernel (no bias)
    images = rng.uniform(-1, 1, (1, 32, 32, 3)).astype(np.float32)
    root = keras.Model(model.input, model.get_layer("conv_root").output)
    expected = np_conv_same(images.astype(np.float64), np_standardize(convs[0].kernel.numpy()), 2)
    np.testing.assert_allclose(np.asarray(root(images)), expected, atol=1e-4)


@pytest.mark.parametrize("size, conv_out, pool_out", [(224, 112, 56), (384, 192, 96)])
def test_root_padding_matches_tf_same(size, conv_out, pool_out):
    """Root conv 7x7/2 then max-pool 3x3/2: 224 -> 112 -> 56, 384 -> 192 -> 96."""
    assert tf_same_padding(size, 7, 2)[0] == conv_out
    assert tf_same_padding(conv_out, 3, 2)[0] == pool_out
    conv = StdConv2D(64, 7, strides=2, name="conv_root")
    pool = keras.layers.MaxPooling2D(3, strides=2, padding="same")
    x = np.zeros((1, size, size, 3), np.float32)
    y = conv(x)
    assert tuple(y.shape) == (1, conv_out, conv_out, 64)
    assert conv.compute_output_shape((1, size, size, 3)) == (1, conv_out, conv_out, 64)
    assert tuple(pool(y).shape) == (1, pool_out, pool_out, 64)


def test_asymmetric_same_padding_values_on_even_input():
    """On an even side TF "SAME" pads 2 before and 3 after for 7x7/2 (not 3 and 3)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 12, 12, 2))
    conv = StdConv2D(3, 7, strides=2)
    conv.build(x.shape)
    raw = rng.standard_normal((7, 7, 2, 3))
    conv.kernel.assign(raw)
    w = np_standardize(raw)
    assert tf_same_padding(12, 7, 2) == (6, 2, 3)
    np.testing.assert_allclose(np.asarray(conv(x)), np_conv_same(x, w, 2), atol=1e-4)


def test_std_conv_weights_and_mixed_precision():
    conv = StdConv2D(4, 3, dtype="mixed_float16")
    out = conv(np.ones((1, 6, 6, 2), np.float32))
    assert [w.path for w in conv.weights] == [f"{conv.name}/kernel"]
    assert conv.kernel.dtype == "float32"
    assert out.dtype == "float16"
    assert tuple(out.shape) == (1, 6, 6, 4)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(filters=0, kernel_size=3), "filters"),
        (dict(filters=4, kernel_size=3, padding="SAME"), "padding"),
        (dict(filters=4, kernel_size=3, epsilon=0.0), "epsilon"),
        (dict(filters=4, kernel_size=(3, 3, 3)), "kernel_size"),
    ],
)
def test_std_conv_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StdConv2D(**kwargs)


# ---------------------------------------------------------------- BottleneckUnit


@pytest.mark.parametrize(
    "in_channels, stride, projection", [(16, 2, True), (32, 1, False), (16, 1, True)]
)
def test_bottleneck_matches_numpy_reference(in_channels, stride, projection):
    rng = np.random.default_rng(in_channels + stride)
    x = rng.standard_normal((2, 8, 8, in_channels)).astype(np.float32)
    unit = BottleneckUnit(8, strides=stride, groups=4)
    unit.build(x.shape)
    assert unit.has_projection is projection
    params = randomize_unit(unit, rng)
    expected = np_bottleneck(x.astype(np.float64), params, stride, groups=4)
    out = np.asarray(unit(x))
    assert out.shape == (2, 8 // stride, 8 // stride, 32)
    np.testing.assert_allclose(out, expected, atol=1e-4)


def test_fresh_unit_is_relu_of_the_shortcut():
    """gn3's scale starts at zero (the release), so the residual branch adds nothing."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, 4, 32)).astype(np.float32)
    unit = BottleneckUnit(8, groups=4)
    np.testing.assert_allclose(np.asarray(unit(x)), relu(x), atol=1e-6)
    np.testing.assert_array_equal(np.asarray(unit.gn3.gamma), 0.0)
    np.testing.assert_array_equal(np.asarray(unit.gn1.gamma), 1.0)


def test_bottleneck_weight_names_follow_the_checkpoint():
    unit = BottleneckUnit(64, strides=2, name="block2_unit1")
    unit.build((None, 56, 56, 256))
    paths = {w.path: tuple(w.shape) for w in unit.weights}
    p = "block2_unit1/"
    assert paths == {
        p + "conv1/kernel": (1, 1, 256, 64),
        p + "gn1/gamma": (64,),
        p + "gn1/beta": (64,),
        p + "conv2/kernel": (3, 3, 64, 64),
        p + "gn2/gamma": (64,),
        p + "gn2/beta": (64,),
        p + "conv3/kernel": (1, 1, 64, 256),
        p + "gn3/gamma": (256,),
        p + "gn3/beta": (256,),
        p + "conv_proj/kernel": (1, 1, 256, 256),
        p + "gn_proj/gamma": (256,),
        p + "gn_proj/beta": (256,),
    }
    assert unit.gn1.groups == 32 and unit.gn1.epsilon == 1e-6
    assert unit.compute_output_shape((None, 56, 56, 256)) == (None, 28, 28, 256)


@pytest.mark.parametrize(
    "cls, kwargs, shape",
    [
        (StdConv2D, dict(filters=4, kernel_size=3, strides=2, epsilon=1e-4), (2, 8, 8, 3)),
        (BottleneckUnit, dict(features=8, strides=2, groups=4), (2, 8, 8, 16)),
    ],
)
def test_b02_config_round_trip_and_registration(cls, kwargs, shape):
    layer = cls(**kwargs, name="custom_name", trainable=False, dtype="mixed_bfloat16")
    config = layer.get_config()
    clone = cls.from_config(config)
    assert clone.get_config() == config
    assert (clone.name, clone.trainable, clone.dtype_policy.name) == (
        "custom_name",
        False,
        "mixed_bfloat16",
    )
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    assert layer(x).dtype == "bfloat16"
    clone(x)
    assert [w.shape for w in clone.weights] == [w.shape for w in layer.weights]
    assert all(w.dtype == "float32" for w in clone.weights)
    assert keras.saving.get_registered_object(f"keras_vit>{cls.__name__}") is cls


def test_bottleneck_mixed_float16_output_dtype():
    unit = BottleneckUnit(8, strides=2, groups=4, dtype="mixed_float16")
    out = unit(np.ones((1, 8, 8, 16), np.float32))
    assert out.dtype == "float16"
    assert all(w.dtype == "float32" for w in unit.weights)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(features=8, groups=3), "divisible by `groups`"),
        (dict(features=0), "features"),
        (dict(features=8, groups=4, norm_epsilon=0), "norm_epsilon"),
        (dict(features=8, groups=4, strides=0), "strides"),
    ],
)
def test_bottleneck_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BottleneckUnit(**kwargs)


def test_bottleneck_rejects_non_image_input():
    with pytest.raises(ValueError, match="batch, height, width, channels"):
        BottleneckUnit(8, groups=4).build((None, 16, 32))
