"""BiT-style ResNet pieces for the hybrid ViT (paper section 3.1, "Hybrid Architecture").

The release's hybrid stem (google-research/vision_transformer, `models_resnet.py`) is a
ResNet v1.5 with weight-standardised convolutions without bias and GroupNorm (Kolesnikov et
al. 2020, "Big Transfer", https://arxiv.org/abs/1912.11370). Layer and weight names follow the
official checkpoint (`block{s}/unit{u}/conv1/kernel`, `.../gn1/scale`, ...).
"""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_positive_int, to_pair

_PADDINGS = ("same", "valid")


def standardize_kernel(kernel, epsilon=1e-5):
    """Weight standardisation of a conv kernel `(kh, kw, in, out)`, per output channel.

    w <- (w - mean(w)) / (std(w) + epsilon), mean and population (biased) std over
    (kh, kw, in), epsilon outside the square root, as in the release's `weight_standardize`.
    Computed in float32 whatever the kernel's dtype.
    """
    kernel = ops.cast(kernel, "float32")
    mean = ops.mean(kernel, axis=(0, 1, 2), keepdims=True)
    centred = kernel - mean
    std = ops.sqrt(ops.mean(ops.square(centred), axis=(0, 1, 2), keepdims=True))
    return centred / (std + epsilon)


@keras.saving.register_keras_serializable(package="keras_vit")
class StdConv2D(keras.layers.Layer):
    """2-D convolution with a weight-standardised kernel and no bias (BiT's StdConv).

    Before every convolution the kernel is standardised per output channel:

        w <- (w - mean(w)) / (std(w) + epsilon)

    with mean and population std (biased variance, divide by n) taken over (kh, kw, in),
    epsilon = 1e-5 added OUTSIDE the square root, exactly as the official JAX release
    (`weight_standardize(w, axis=[0, 1, 2], eps=1e-5)`; timm instead puts eps 1e-8 inside the
    square root, a ~5e-5 difference). The stored variable is the raw kernel, `kernel` of shape
    `(kh, kw, in_channels, filters)`, the official checkpoint's layout
    (`conv_root/kernel`, `block{s}/unit{u}/conv{1,2,3}/kernel`). The standardisation runs in
    float32 under any dtype policy; the convolution runs in the compute dtype.

    Args:
        filters: output channels.
        kernel_size: int or (height, width).
        strides: int or (height, width). Default 1.
        padding: "same" (default; TensorFlow "SAME", asymmetric, as the release) or "valid".
        epsilon: added to the std, default 1e-5 (the release's).
        kernel_initializer: default "lecun_normal" (flax `nn.Conv`'s default).
        **kwargs: `name`, `dtype`, `trainable`.

    Call arguments:
        inputs: `(batch, height, width, in_channels)`, cast to the compute dtype.

    Returns:
        `(batch, out_height, out_width, filters)`; with "same" padding
        out = ceil(in / stride).

    Raises:
        ValueError: non-positive sizes, an unknown padding, epsilon <= 0, or an input that is
            not 4-D with a known channel count.

    Example:
    >>> conv = StdConv2D(8, 3, strides=2)
    >>> tuple(conv(np.zeros((1, 9, 9, 4))).shape)
    (1, 5, 5, 8)
    """

    def __init__(
        self,
        filters,
        kernel_size,
        strides=1,
        padding="same",
        epsilon=1e-5,
        kernel_initializer="lecun_normal",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.filters = check_positive_int("filters", filters)
        self.kernel_size = to_pair("kernel_size", kernel_size)
        self.strides = to_pair("strides", strides)
        if padding not in _PADDINGS:
            raise ValueError(
                f"`padding` must be one of {list(_PADDINGS)}. Received: padding={padding!r}"
            )
        self.padding = padding
        if not epsilon > 0:
            raise ValueError(f"`epsilon` must be > 0. Received: epsilon={epsilon!r}")
        self.epsilon = float(epsilon)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        if len(input_shape) != 4 or input_shape[-1] is None:
            raise ValueError(
                "StdConv2D expects (batch, height, width, channels) with known channels. "
                f"Received: input_shape={input_shape}"
            )
        self.kernel = self.add_weight(
            name="kernel",
            shape=(*self.kernel_size, input_shape[-1], self.filters),
            initializer=self.kernel_initializer,
            autocast=False,
        )

    def effective_kernel(self):
        """The standardised float32 kernel `(kh, kw, in, filters)` the convolution uses."""
        return standardize_kernel(self.kernel, self.epsilon)

    def call(self, inputs):
        kernel = ops.cast(self.effective_kernel(), self.compute_dtype)
        inputs = ops.cast(inputs, self.compute_dtype)
        return ops.conv(inputs, kernel, strides=self.strides, padding=self.padding)

    def compute_output_shape(self, input_shape):
        sizes = []
        for size, k, s in zip(input_shape[1:3], self.kernel_size, self.strides, strict=True):
            if size is None:
                sizes.append(None)
            elif self.padding == "same":
                sizes.append(-(-size // s))
            else:
                sizes.append((size - k) // s + 1)
        return (input_shape[0], *sizes, self.filters)

    def get_config(self):
        return {
            **super().get_config(),
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "strides": self.strides,
            "padding": self.padding,
            "epsilon": self.epsilon,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }


def _group_norm(groups, epsilon, dtype, name, zero_scale=False):
    return keras.layers.GroupNormalization(
        groups=groups,
        epsilon=epsilon,
        gamma_initializer="zeros" if zero_scale else "ones",
        dtype=dtype,
        name=name,
    )


@keras.saving.register_keras_serializable(package="keras_vit")
class BottleneckUnit(keras.layers.Layer):
    """One bottleneck residual unit (post-activation ResNet v1.5, stride on the 3x3 conv).

    y = relu(gn1(conv1 1x1(x))); y = relu(gn2(conv2 3x3/stride(y)));
    y = gn3(conv3 1x1 (4 * features)(y)); out = relu(shortcut(x) + y),
    with shortcut = gn_proj(conv_proj 1x1/stride(x)) when the input width differs from
    4 * features or the stride is not 1 (the first unit of every stage), else identity.
    Every conv is a `StdConv2D` without bias, "same" (TF "SAME") padding; every norm is
    GroupNorm (`groups`, epsilon 1e-6); `gn3`'s scale starts at zero, so a fresh unit is the
    shortcut followed by relu. Source: the official release's `ResidualUnit`
    (google-research/vision_transformer, models_resnet.py); sublayer names are its checkpoint
    names (`conv1`, `gn1`, ..., `conv_proj`, `gn_proj`).

    Args:
        features: bottleneck width; the unit outputs `4 * features` channels.
        strides: int or (height, width) stride of `conv2` and `conv_proj`. Default 1.
        groups: GroupNorm groups; must divide `features`. Default 32 (the release's).
        norm_epsilon: GroupNorm epsilon, default 1e-6.
        std_epsilon: weight-standardisation epsilon, default 1e-5.
        **kwargs: `name`, `dtype`, `trainable`.

    Call arguments:
        inputs: `(batch, height, width, in_channels)`.

    Returns:
        `(batch, ceil(height / stride), ceil(width / stride), 4 * features)`.

    Raises:
        ValueError: non-positive sizes, or `features` not divisible by `groups`.
    """

    def __init__(
        self,
        features,
        strides=1,
        groups=32,
        norm_epsilon=1e-6,
        std_epsilon=1e-5,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.features = check_positive_int("features", features)
        self.strides = to_pair("strides", strides)
        self.groups = check_positive_int("groups", groups)
        if self.features % self.groups:
            raise ValueError(
                "`features` must be divisible by `groups` (GroupNorm). "
                f"Received: features={features}, groups={groups}"
            )
        for arg, value in (("norm_epsilon", norm_epsilon), ("std_epsilon", std_epsilon)):
            if not value > 0:
                raise ValueError(f"`{arg}` must be > 0. Received: {arg}={value!r}")
        self.norm_epsilon = float(norm_epsilon)
        self.std_epsilon = float(std_epsilon)
        self.has_projection = None

    def _conv(self, filters, kernel_size, strides, name):
        return StdConv2D(
            filters,
            kernel_size,
            strides=strides,
            epsilon=self.std_epsilon,
            dtype=self.dtype_policy,
            name=name,
        )

    def _norm(self, name, zero_scale=False):
        return _group_norm(self.groups, self.norm_epsilon, self.dtype_policy, name, zero_scale)

    def build(self, input_shape):
        if len(input_shape) != 4 or input_shape[-1] is None:
            raise ValueError(
                "BottleneckUnit expects (batch, height, width, channels) with known channels. "
                f"Received: input_shape={input_shape}"
            )
        out_channels = 4 * self.features
        self.has_projection = input_shape[-1] != out_channels or self.strides != (1, 1)
        self.conv1 = self._conv(self.features, 1, 1, "conv1")
        self.gn1 = self._norm("gn1")
        self.conv2 = self._conv(self.features, 3, self.strides, "conv2")
        self.gn2 = self._norm("gn2")
        self.conv3 = self._conv(out_channels, 1, 1, "conv3")
        self.gn3 = self._norm("gn3", zero_scale=True)
        shape = tuple(input_shape)
        for conv, norm in ((self.conv1, self.gn1), (self.conv2, self.gn2), (self.conv3, self.gn3)):
            conv.build(shape)
            shape = conv.compute_output_shape(shape)
            norm.build(shape)
        if self.has_projection:
            self.conv_proj = self._conv(out_channels, 1, self.strides, "conv_proj")
            self.gn_proj = self._norm("gn_proj")
            self.conv_proj.build(tuple(input_shape))
            self.gn_proj.build(self.conv_proj.compute_output_shape(tuple(input_shape)))

    def call(self, inputs):
        inputs = ops.cast(inputs, self.compute_dtype)
        residual = inputs
        if self.has_projection:
            residual = self.gn_proj(self.conv_proj(inputs))
        y = ops.relu(self.gn1(self.conv1(inputs)))
        y = ops.relu(self.gn2(self.conv2(y)))
        y = self.gn3(self.conv3(y))
        return ops.relu(residual + y)

    def compute_output_shape(self, input_shape):
        sizes = [
            None if s is None else -(-s // st)
            for s, st in zip(input_shape[1:3], self.strides, strict=True)
        ]
        return (input_shape[0], *sizes, 4 * self.features)

    def get_config(self):
        return {
            **super().get_config(),
            "features": self.features,
            "strides": self.strides,
            "groups": self.groups,
            "norm_epsilon": self.norm_epsilon,
            "std_epsilon": self.std_epsilon,
        }


@keras.saving.register_keras_serializable(package="keras_vit")
class ZeroPaddedMaxPool(keras.layers.Layer):
    """A max-pool with TF "SAME" padding (Keras' `padding="same"`) for a non-negative input
    (after a ReLU), computed as zero padding + a "valid" pool: the same values, since every
    window holds one input. The pads follow each call's height and width (odd or even).

    PyTorch's form of the hybrid root's 3x3/2 pool: Keras' "same" pooling pads by edge
    replication on PyTorch, whose backward torch 2.14's inductor fails to compile
    (`torch.compile`); see `keras_vit.kernels.dispatch.pads_pools_explicitly`.

    Args:
        pool_size: window side (default 3). strides: step (default 2).
    Input `(batch, height, width, channels)` >= 0; output `(batch, ceil(height / strides),
    ceil(width / strides), channels)`.
    """

    def __init__(self, pool_size=3, strides=2, **kwargs):
        super().__init__(**kwargs)
        self.pool_size = check_positive_int("pool_size", pool_size)
        self.strides = check_positive_int("strides", strides)

    def _pads(self, size):
        out = -(-size // self.strides)
        total = max((out - 1) * self.strides + self.pool_size - size, 0)
        return (total // 2, total - total // 2)

    def call(self, x):
        pads = [(0, 0), self._pads(x.shape[1]), self._pads(x.shape[2]), (0, 0)]
        padded = ops.pad(x, pads)
        return ops.max_pool(padded, self.pool_size, self.strides, padding="valid")

    def compute_output_shape(self, input_shape):
        def side(n):
            return None if n is None else -(-n // self.strides)

        return (input_shape[0], side(input_shape[1]), side(input_shape[2]), input_shape[3])

    def get_config(self):
        return {**super().get_config(), "pool_size": self.pool_size, "strides": self.strides}
