"""checkpoints/channels: a checkpoint's input convolution adapted to other image channels by
timm's rule (`timm.models._manipulate.adapt_input_conv`), against a NumPy transcription of
that function in PyTorch's (out, in, kh, kw) layout."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_vit.checkpoints.base import channels


def timm_adapt_input_conv(in_chans, conv_weight):
    """timm's adapt_input_conv (O, I, J, K), for I <= 3 (the kernels a ViT file holds)."""
    out, source, kh, kw = conv_weight.shape
    if in_chans == 1:
        return conv_weight.sum(axis=1, keepdims=True)
    if in_chans != 3:
        if source != 3:
            raise NotImplementedError("Weight format not supported by conversion.")
        repeat = int(math.ceil(in_chans / 3))
        return np.tile(conv_weight, (1, repeat, 1, 1))[:, :in_chans] * (3 / float(in_chans))
    return conv_weight


def to_torch(kernel):
    return kernel.transpose(3, 2, 0, 1)


@settings(max_examples=15, deadline=None)
@given(source=st.integers(1, 3), target=st.integers(1, 7), seed=st.integers(0, 2**16))
def test_matches_timms_rule(source, target, seed):
    kernel = np.random.default_rng(seed).normal(size=(2, 3, source, 5)).astype("float32")
    if not channels.can_adapt(source, target):
        with pytest.raises(ValueError, match=f"from {source} to {target} input channels"):
            channels.adapt_input_kernel(kernel, target)
        with pytest.raises(NotImplementedError):
            timm_adapt_input_conv(target, to_torch(kernel))
        return
    adapted = channels.adapt_input_kernel(kernel, target)
    assert adapted.shape == (2, 3, target, 5) and adapted.dtype == kernel.dtype
    want = timm_adapt_input_conv(target, to_torch(kernel).astype("float64"))
    np.testing.assert_allclose(to_torch(adapted), want, rtol=1e-6, atol=1e-6)


@settings(max_examples=10, deadline=None)
@given(target=st.sampled_from([1, 3, 6, 9]), seed=st.integers(0, 2**16))
def test_a_gray_image_on_every_channel_gives_the_rgb_activations(target, seed):
    """Exact for 1 channel and multiples of 3 (for other counts the cut repeat weighs the
    first channels more: timm's rule keeps only the mean scale)."""
    rng = np.random.default_rng(seed)
    kernel, gray = rng.normal(size=(2, 2, 3, 4)), rng.normal(size=(2, 2))
    rgb = np.einsum("hwio,hwi->o", kernel, np.repeat(gray[..., None], 3, axis=-1))
    adapted = channels.adapt_input_kernel(kernel, target)
    out = np.einsum("hwio,hwi->o", adapted, np.repeat(gray[..., None], target, axis=-1))
    np.testing.assert_allclose(out, rgb, rtol=1e-10, atol=1e-10)


def test_mismatch_only_in_the_input_axis():
    assert channels.channel_mismatch(np.zeros((4, 4, 3, 8)), (4, 4, 1, 8)) == (3, 1)
    assert channels.channel_mismatch(np.zeros((4, 4, 3, 8)), (4, 4, 3, 8)) is None
    assert channels.channel_mismatch(np.zeros((4, 4, 3, 8)), (2, 2, 1, 8)) is None
    assert channels.channel_mismatch(np.zeros((4, 4, 3, 8)), (4, 4, 1, 16)) is None
    assert channels.channel_mismatch(np.zeros((3, 8)), (1, 8)) is None


def test_the_input_kernel_is_the_hybrids_root_else_the_patch_embedding():
    assert channels.input_kernel_key({"embedding/kernel": 0}) == "embedding/kernel"
    both = {"embedding/kernel": 0, "conv_root/kernel": 0}
    assert channels.input_kernel_key(both) == "conv_root/kernel"
    assert channels.input_kernel_key({"head/kernel": 0}) is None
