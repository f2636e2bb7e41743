"""PyTorch tensor layouts <-> the release's array layouts (shared by the HF and timm formats).

PyTorch stores a linear layer's weight as (out, in) and computes x @ W.T + b, a convolution's
as (out, in, kh, kw); the release stores kernels as (in, out) and (kh, kw, in, out), and the
attention projections split per head: q/k/v kernels (D, heads, head_dim), biases
(heads, head_dim), the output kernel (heads, head_dim, D) (vit_jax/checkpoint.py). Every
function here is a transpose or a reshape, so conversions are exact in both directions.
"""

from __future__ import annotations

import re

import numpy as np

from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.spec import layer_names as names
from keras_vit.spec.input_scaling import MEAN_STD

BLOCK = names.block_key(0).replace("_0/", "_{}/")
ATTENTION = names.QUERY_KERNEL.split("/")[0] + "/"
MLP = names.MLP_IN_KERNEL.split("/")[0] + "/"
POSITION = names.POSITION_KEY
ENCODER_NORM = f"{names.TRANSFORMER}/{names.ENCODER_NORM}/"
POOLED_NORM = f"{names.POOLED_NORM}/"
# The ViT family's release-style keys, read and written by the Hugging Face and timm formats.
DIST, REG = names.DIST_TOKEN, names.REGISTERS
HEAD_DIST = names.HEAD_DIST + "/"
NORM_PRE = f"{names.TRANSFORMER}/{names.NORM_PRE}/"
LAYER_SCALE_ATTENTION = f"{names.LAYER_SCALE_ATTENTION}/scale"
LAYER_SCALE_MLP = f"{names.LAYER_SCALE_MLP}/scale"


def linear_to_kernel(weight) -> np.ndarray:
    """(out, in) -> (in, out)."""
    return np.ascontiguousarray(np.asarray(weight).T)


def kernel_to_linear(kernel) -> np.ndarray:
    """(in, out) -> (out, in)."""
    return np.ascontiguousarray(np.asarray(kernel).T)


def conv_to_kernel(weight) -> np.ndarray:
    """(out, in, kh, kw) -> (kh, kw, in, out)."""
    return np.ascontiguousarray(np.transpose(weight, (2, 3, 1, 0)))


def kernel_to_conv(kernel) -> np.ndarray:
    """(kh, kw, in, out) -> (out, in, kh, kw)."""
    return np.ascontiguousarray(np.transpose(kernel, (3, 2, 0, 1)))


def head_kernel(weight, num_heads) -> np.ndarray:
    """A q/k/v projection (D_out, D_in) -> (D_in, heads, head_dim)."""
    kernel = linear_to_kernel(weight)
    return kernel.reshape(kernel.shape[0], num_heads, kernel.shape[1] // num_heads)


def head_bias(bias, num_heads) -> np.ndarray:
    """(D,) -> (heads, head_dim)."""
    bias = np.asarray(bias)
    return bias.reshape(num_heads, bias.shape[0] // num_heads)


def out_kernel(weight, num_heads) -> np.ndarray:
    """The output projection (D_out, D_in) -> (heads, head_dim, D_out)."""
    kernel = linear_to_kernel(weight)
    return kernel.reshape(num_heads, kernel.shape[0] // num_heads, kernel.shape[1])


def flat_linear(kernel) -> np.ndarray:
    """A release kernel (in..., out) or (heads, head_dim, out) with its input axes merged,
    back to PyTorch's (out, in)."""
    kernel = np.asarray(kernel)
    return kernel_to_linear(kernel.reshape(-1, kernel.shape[-1]))


def flat_head_linear(kernel) -> np.ndarray:
    """A q/k/v kernel (D_in, heads, head_dim) -> PyTorch (D_out, D_in)."""
    kernel = np.asarray(kernel)
    return kernel_to_linear(kernel.reshape(kernel.shape[0], -1))


def norms_and_mlp_from_torch(get, torch_block: str, block: str, norms, denses) -> dict:
    """One block's LayerNorms and MLP denses in release keys, read with `get(torch key)`.

    Args:
        get: returns the tensor of a PyTorch key (and records it as used).
        torch_block, block: the block's PyTorch prefix ("blocks.0.") and release prefix.
        norms, denses: `{PyTorch sub-layer: release sub-layer}` of the LayerNorms and of
            the MLP's linear layers.
    """
    out = {}
    for name, release in norms.items():
        out[f"{block}{release}/scale"] = get(f"{torch_block}{name}.weight")
        out[f"{block}{release}/bias"] = get(f"{torch_block}{name}.bias")
    for name, release in denses.items():
        out[f"{block}{MLP}{release}/kernel"] = linear_to_kernel(get(f"{torch_block}{name}.weight"))
        out[f"{block}{MLP}{release}/bias"] = get(f"{torch_block}{name}.bias")
    return out


def norms_and_mlp_to_torch(arrays, torch_block: str, block: str, norms, denses) -> dict:
    """The inverse of `norms_and_mlp_from_torch`: `{PyTorch key: tensor}` of one block."""
    out = {}
    for name, release in norms.items():
        out[f"{torch_block}{name}.weight"] = arrays[f"{block}{release}/scale"]
        out[f"{torch_block}{name}.bias"] = arrays[f"{block}{release}/bias"]
    for name, release in denses.items():
        kernel = arrays[f"{block}{MLP}{release}/kernel"]
        out[f"{torch_block}{name}.weight"] = kernel_to_linear(kernel)
        out[f"{torch_block}{name}.bias"] = arrays[f"{block}{MLP}{release}/bias"]
    return out


def num_release_blocks(arrays) -> int:
    """How many Transformer blocks release-layout `arrays` hold."""
    return num_blocks(arrays, names.BLOCK_KEY_PATTERN)


def num_blocks(keys, pattern: str) -> int:
    """How many blocks `pattern` (a regex with one group for the index) numbers in `keys`."""
    indices = {int(m[1]) for key in keys if (m := re.match(pattern, key))}
    if indices and indices != set(range(len(indices))):
        raise CheckpointError(f"The block indices are not 0..n-1: {sorted(indices)}.")
    return len(indices)


def take(state: dict, key: str, path) -> np.ndarray:
    """`state[key]`, or a CheckpointError naming the file and the missing key."""
    try:
        return state[key]
    except KeyError:
        raise CheckpointError(f"{path} has no tensor {key!r}.") from None


def _normalisation_values(name: str, value) -> tuple:
    """`value` (a number or a list of numbers) rounded to 3 digits, as a tuple.

    Raises:
        CheckpointError: anything else (missing, text, nested lists), naming `name`.
    """
    items = value if isinstance(value, (list, tuple)) else [value]
    numbers = all(
        isinstance(item, (int, float, np.integer, np.floating)) and not isinstance(item, bool)
        for item in items
    )
    try:  # text such as "0.5" and booleans are no numbers, though NumPy would convert them
        values = np.atleast_1d(np.asarray(value, dtype=np.float64)) if numbers else None
    except (TypeError, ValueError):
        values = None
    if values is None or values.ndim != 1 or not np.isfinite(values).all():
        raise CheckpointError(
            f"Input normalisation {name}={value!r} is not a number or a list of numbers."
        )
    return tuple(np.round(values, 3))


def preprocessing_from_mean_std(mean, std, channels=None, names=("mean", "std")) -> str:
    """ "[-1,1]" for mean = std = 0.5 on every channel, "imagenet" for ImageNet's mean/std,
    "clip" for OpenAI CLIP's.

    Args:
        mean, std: one value per channel in [0, 1] pixel units (a single number: every
            channel).
        channels: the model's image channels; the lists must have that many values.
        names: what the source calls mean and std, for messages ("image_mean", ...).

    Raises:
        CheckpointError: another count of values than `channels`, or any other
            normalisation.
    """
    mean, std = _normalisation_values(names[0], mean), _normalisation_values(names[1], std)
    if (channels is not None and len(mean) != channels) or len(std) != len(mean):
        raise CheckpointError(
            f"Input normalisation mean={mean}, std={std} has {len(mean)} values for a model "
            f"of {channels} channel(s); it needs one mean and one std per channel."
        )
    if set(mean) == {0.5} and set(std) == {0.5}:
        return "[-1,1]"
    for name, (known_mean, known_std) in MEAN_STD.items():
        if mean == tuple(np.round(known_mean, 3)) and std == tuple(np.round(known_std, 3)):
            return name
    raise CheckpointError(
        f"Input normalisation mean={mean}, std={std} is neither [-1, 1] (0.5, 0.5), "
        "ImageNet's nor OpenAI CLIP's mean/std, the scalings keras_vit applies."
    )


def mean_std(preprocessing: str, channels: int = 3) -> tuple[tuple, tuple]:
    """The (mean, std) in [0, 1] pixel units of a preprocessing name, one per channel.

    Raises:
        CheckpointError: "imagenet" / "clip" for other than 3 channels (theirs are RGB).
    """
    if preprocessing in MEAN_STD:
        if channels != 3:
            raise CheckpointError(
                f"The {preprocessing} mean/std are for 3 channels; the model has {channels}."
            )
        return MEAN_STD[preprocessing]
    return (0.5,) * channels, (0.5,) * channels
