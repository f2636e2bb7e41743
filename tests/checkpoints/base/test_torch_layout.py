"""checkpoints/torch_layout: PyTorch's layouts (nn.Linear `y = x W^T + b`, weight (out, in);
nn.Conv2d weight (out, in, kh, kw); timm/HF attention: q/k/v Linear(D, D) split into heads
as `reshape(heads, head_dim)`) against the release's kernels, checked by what each layer
computes (NumPy), and the input normalisations of timm / HF configs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_vit.checkpoints.base import torch_layout as tl
from keras_vit.checkpoints.base.errors import CheckpointError

# timm/data/constants.py
IMAGENET_DEFAULT_MEAN = (0.485, 0.456, 0.406)
IMAGENET_DEFAULT_STD = (0.229, 0.224, 0.225)
OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

dims = st.integers(1, 6)


@settings(max_examples=10, deadline=None)
@given(d_in=dims, d_out=dims, seed=st.integers(0, 2**16))
def test_linear_kernel_computes_torchs_linear(d_in, d_out, seed):
    rng = np.random.default_rng(seed)
    weight, x = rng.normal(size=(d_out, d_in)), rng.normal(size=(3, d_in))
    kernel = tl.linear_to_kernel(weight)
    np.testing.assert_allclose(x @ kernel, x @ weight.T)
    np.testing.assert_array_equal(tl.kernel_to_linear(kernel), weight)
    np.testing.assert_array_equal(tl.flat_linear(kernel), weight)
    assert kernel.flags.c_contiguous


@settings(max_examples=10, deadline=None)
@given(c_in=dims, c_out=dims, kh=st.integers(1, 4), kw=st.integers(1, 4), seed=st.integers(0, 99))
def test_conv_kernel_computes_torchs_conv_on_a_patch(c_in, c_out, kh, kw, seed):
    """One output pixel of a conv with stride = kernel (the patch embedding): torch sums
    W[o, i, h, w] * x[i, h, w]; Keras sums x[h, w, i] * K[h, w, i, o]."""
    rng = np.random.default_rng(seed)
    weight, patch = rng.normal(size=(c_out, c_in, kh, kw)), rng.normal(size=(c_in, kh, kw))
    kernel = tl.conv_to_kernel(weight)
    assert kernel.shape == (kh, kw, c_in, c_out)
    torch_out = np.einsum("oihw,ihw->o", weight, patch)
    keras_out = np.einsum("hwio,hwi->o", kernel, patch.transpose(1, 2, 0))
    np.testing.assert_allclose(keras_out, torch_out)
    np.testing.assert_array_equal(tl.kernel_to_conv(kernel), weight)


@settings(max_examples=10, deadline=None)
@given(heads=st.integers(1, 4), head_dim=st.integers(1, 4), seed=st.integers(0, 99))
def test_attention_kernels_split_heads_as_torch_does(heads, head_dim, seed):
    rng = np.random.default_rng(seed)
    width = heads * head_dim
    weight, bias = rng.normal(size=(width, width)), rng.normal(size=width)
    x = rng.normal(size=width)
    torch_q = (x @ weight.T + bias).reshape(heads, head_dim)  # timm: reshape(B, N, H, hd)
    kernel, per_head_bias = tl.head_kernel(weight, heads), tl.head_bias(bias, heads)
    np.testing.assert_allclose(np.einsum("d,dnh->nh", x, kernel) + per_head_bias, torch_q)
    np.testing.assert_array_equal(tl.flat_head_linear(kernel), weight)
    # Output projection: torch takes the heads concatenated, (H * hd) -> D.
    proj, z = rng.normal(size=(width, width)), rng.normal(size=(heads, head_dim))
    out = tl.out_kernel(proj, heads)
    assert out.shape == (heads, head_dim, width)
    np.testing.assert_allclose(np.einsum("nh,nhd->d", z, out), z.reshape(-1) @ proj.T)
    np.testing.assert_array_equal(tl.flat_linear(out), proj)


@settings(max_examples=15, deadline=None)
@given(indices=st.sets(st.integers(0, 12), max_size=8))
def test_block_count_needs_indices_zero_to_n(indices):
    keys = [f"blocks.{i}.attn.qkv.weight" for i in indices] + ["cls_token", "blocks.x.norm"]
    pattern = r"blocks\.(\d+)\."
    if indices == set(range(len(indices))):
        assert tl.num_blocks(keys, pattern) == len(indices)
    else:
        with pytest.raises(CheckpointError, match=r"not 0..n-1: \[" + str(min(indices))):
            tl.num_blocks(keys, pattern)
    release = {f"Transformer/encoderblock_{i}/x": 0 for i in range(3)}
    assert tl.num_release_blocks(release) == 3


def test_take_names_the_file_and_the_key():
    assert tl.take({"a": 1}, "a", "f.pth") == 1
    with pytest.raises(CheckpointError, match=r"f\.pth has no tensor 'cls_token'"):
        tl.take({"a": 1}, "cls_token", "f.pth")


@pytest.mark.parametrize(
    "mean, std, channels, want",
    [
        ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5], 3, "[-1,1]"),
        (0.5, 0.5, None, "[-1,1]"),
        ([0.5], [0.5], 1, "[-1,1]"),
        (IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, 3, "imagenet"),
        (list(OPENAI_CLIP_MEAN), list(OPENAI_CLIP_STD), 3, "clip"),
        ((0.4850001, 0.456, 0.406), IMAGENET_DEFAULT_STD, 3, "imagenet"),  # JSON rounding
    ],
)
def test_known_normalisations_are_recognised(mean, std, channels, want):
    assert tl.preprocessing_from_mean_std(mean, std, channels) == want


@pytest.mark.parametrize(
    "mean, std, channels, rule",
    [
        ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5], 1, "3 values for a model of 1 channel"),
        ([0.5, 0.5], [0.5, 0.5, 0.5], None, "one mean and one std per channel"),
        ([0.5, 0.5, 0.5], [0.25, 0.25, 0.25], 3, "neither"),
        (IMAGENET_DEFAULT_MEAN, OPENAI_CLIP_STD, 3, "neither"),
        ("half", 0.5, None, "mean='half' is not a number"),
        ([[0.5]], 0.5, None, r"mean=\[\[0.5\]\] is not a number"),
        (0.5, float("nan"), None, "std=nan is not a number"),
    ],
)
def test_other_normalisations_are_refused(mean, std, channels, rule):
    with pytest.raises(CheckpointError, match=rule):
        tl.preprocessing_from_mean_std(mean, std, channels)


def test_mean_std_of_a_name():
    assert tl.mean_std("imagenet") == (IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD)
    assert tl.mean_std("clip") == (OPENAI_CLIP_MEAN, OPENAI_CLIP_STD)
    assert tl.mean_std("[-1,1]", channels=4) == ((0.5,) * 4, (0.5,) * 4)
    with pytest.raises(CheckpointError, match="imagenet mean/std are for 3 channels; .* 1"):
        tl.mean_std("imagenet", channels=1)
