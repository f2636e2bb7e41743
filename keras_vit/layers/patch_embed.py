"""Patch embedding: image -> sequence of patch tokens (paper section 3.1, eq. 1)."""

from __future__ import annotations

import numbers

import keras
from keras import ops

from keras_vit._validation import check_choice, check_divisible, check_positive_int, to_pair
from keras_vit.kernels import dispatch

PREPROCESSING_MODES = ("[-1,1]", "imagenet", "clip")


def _checked_at_run_time(images, patch_size):
    """`images`, for sizes unknown when the graph is traced (TensorFlow's relaxed shapes),
    after a run-time check that each side is a multiple of the patch: a clear error naming
    the patch, the rule and the shape (`keras_vit.kernels.tf_checks.assert_divisible`), never a
    silently dropped border. JAX traces with concrete sizes, where `check_divisible` in
    `call` applies; other backends fail the reshape to whole patches instead."""
    if dispatch.graph_assertions():
        return dispatch.assert_divisible(images, patch_size)
    shape = ops.shape(images)
    rows = (shape[1] // patch_size[0]) * patch_size[0]
    cols = (shape[2] // patch_size[1]) * patch_size[1]
    return ops.reshape(images, (shape[0], rows, cols, shape[3]))


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEmbed(keras.layers.Layer):
    """Cuts an image into P x P patches and projects each to a `hidden_dim` token.

    Implemented as a strided convolution (kernel = stride = patch), which equals the paper's
    "flatten each patch, multiply by E" and compiles under XLA. The kernel has the official
    checkpoint's layout `(P, P, channels, hidden_dim)` (key `embedding/kernel`).

    Args:
        patch_size: int or (height, width) of a patch in pixels.
        hidden_dim: width D of the output tokens.
        kernel_initializer: default "lecun_normal" as in the release.
        bias_initializer: default "zeros".
        dynamic_image_size: accept images of any size (multiples of the patch); the grid
            of `image_size` stays the model's own (its position table's).
        image_size: (height, width) the model is built for, when dynamic.
        input_preprocessing: the pixel scaling the weights expect, recorded for
            `predict`, `evaluate` and the SavedModel export (the layer itself does not
            rescale): "[-1,1]" (default, the release's (x - 127.5) / 127.5) or "imagenet"
            ((x / 255 - mean) / std with ImageNet's mean and std, timm's in1k models).
        **kwargs: `name`, `dtype`, `trainable`.

    Call arguments:
        images: `(batch, height, width, channels)`, any real or integer dtype; it is cast to the
            layer's compute dtype. Height and width must be multiples of the patch size.

    Returns:
        `(batch, (height / P) * (width / P), hidden_dim)`, patches in row-major order.

    Raises:
        ValueError: non-positive sizes, an image side that is not a multiple of the patch,
            or an image whose size or channel count differs from the one the layer was built
            for.

    Example:
    >>> layer = PatchEmbed(patch_size=8, hidden_dim=32)
    >>> tuple(layer(np.zeros((2, 32, 48, 3))).shape)
    (2, 24, 32)
    """

    def __init__(
        self,
        patch_size,
        hidden_dim,
        kernel_initializer="lecun_normal",
        bias_initializer="zeros",
        input_preprocessing="[-1,1]",
        dynamic_image_size=False,
        image_size=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.dynamic_image_size = bool(dynamic_image_size)
        self.native_image_size = None if image_size is None else to_pair("image_size", image_size)
        if self.dynamic_image_size and self.native_image_size is None:
            raise ValueError("dynamic_image_size=True needs image_size (the table's size).")
        self.image_size = self.native_image_size  # set from the input at build otherwise
        self.input_preprocessing = check_choice(
            "input_preprocessing", input_preprocessing, PREPROCESSING_MODES
        )
        self.patch_size = to_pair("patch_size", patch_size)
        self.hidden_dim = check_positive_int("hidden_dim", hidden_dim)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.grid_size = None

    def build(self, input_shape):
        if len(input_shape) != 4:
            raise ValueError(
                "PatchEmbed expects images of shape (batch, height, width, channels). "
                f"Received: input_shape={input_shape}"
            )
        self.image_size = self.native_image_size or (input_shape[1], input_shape[2])
        self.channels = input_shape[3]
        if None not in self.image_size:
            self.grid_size = check_divisible(self.image_size, self.patch_size)
        self.conv = keras.layers.Conv2D(
            self.hidden_dim,
            kernel_size=self.patch_size,
            strides=self.patch_size,
            padding="valid",
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name="conv",
        )
        self.conv.build(input_shape)

    def check_image_shape(self, shape):
        """Raises the layer's clear ValueError for images of `shape` (batch, height, width,
        channels) it does not take: another channel count, a side that is not a multiple of
        the patch, or (without `dynamic_image_size`) another size than the built one. Unknown
        (None) sizes pass. Used by `call` and, before a step traces, by
        `keras_vit.model.image_model.ImageModel`."""
        channels = shape[-1]
        if self.channels is not None and channels is not None and channels != self.channels:
            raise ValueError(
                f"PatchEmbed was built for {self.channels} channels but received images with "
                f"{channels} channels (shape {tuple(shape)})."
            )
        size = (shape[1], shape[2])
        if None not in size and not all(isinstance(side, numbers.Integral) for side in size):
            _check_symbolic_size(size, self.patch_size, channels)
        elif None not in size:
            grid = check_divisible(size, self.patch_size)
            if not self.dynamic_image_size and self.grid_size not in (None, grid):
                raise ValueError(
                    f"PatchEmbed was built for images of size {self.image_size} "
                    f"({self.grid_size} patches) but received size {size}. Build a model for "
                    "the new size (e.g. keras_vit.finetune(model, ..., image_size=...))."
                )

    def call(self, images):
        self.check_image_shape(images.shape)
        if None in (images.shape[1], images.shape[2]):  # sizes known only at run time
            if self.dynamic_image_size:
                images = _checked_at_run_time(images, self.patch_size)
            elif self.grid_size is not None:
                images = _assert_size_at_run_time(images, self.image_size, self.channels)
        images = ops.cast(images, self.compute_dtype)
        if self.compute_dtype != "float32":
            return self._project_patches(images)
        x = self.conv(images)
        shape = ops.shape(x)
        return ops.reshape(x, (shape[0], shape[1] * shape[2], self.hidden_dim))

    def _project_patches(self, images):
        """The paper's form of eq. 1: each patch flattened, times E, as one 2-D product.

        Used under reduced-precision policies. The convolution's weight gradient on
        TensorFlow's CPU kernels (`Conv2DBackpropFilter`) reaches a few GFLOP/s at patch
        stride where a 2-D `MatMul` of the same FLOPs runs on the bfloat16 units (Ti/16
        bfloat16 training step: ~10% of it; docs/performance_log.md). Same kernel, same output.
        """
        shape = ops.shape(images)
        (p, q), channels = self.patch_size, images.shape[-1]
        rows, cols = shape[1] // p, shape[2] // q
        x = ops.reshape(images, (shape[0], rows, p, cols, q, channels))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
        x = ops.reshape(x, (-1, p * q * channels))
        kernel = ops.reshape(ops.cast(self.conv.kernel, self.compute_dtype), (-1, self.hidden_dim))
        x = ops.matmul(x, kernel) + ops.cast(self.conv.bias, self.compute_dtype)
        return ops.reshape(x, (shape[0], rows * cols, self.hidden_dim))

    def compute_output_shape(self, input_shape):
        height, width = input_shape[1], input_shape[2]
        if height is None or width is None:
            return (input_shape[0], None, self.hidden_dim)
        grid = check_divisible((height, width), self.patch_size)
        return (input_shape[0], grid[0] * grid[1], self.hidden_dim)

    def get_config(self):
        return {
            **super().get_config(),
            "patch_size": self.patch_size,
            "hidden_dim": self.hidden_dim,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "input_preprocessing": self.input_preprocessing,
            "dynamic_image_size": self.dynamic_image_size,
            "image_size": self.native_image_size,
        }


def _check_symbolic_size(size, patch_size, channels) -> None:
    """Raises a one-line ValueError naming the polymorphic shape that works when the symbolic
    sides of a shape-polymorphic trace (`jax.export`, Keras' automatic JAX export through
    jax2tf: `(batch, a, b, 3)`) are not provably multiples of the patch."""
    if all(side % patch == 0 for side, patch in zip(size, patch_size, strict=True)):
        return
    (p, q), c = patch_size, channels if channels is not None else "C"
    constraint = f"(b, {p}*h, {q}*w, {c})"
    raise ValueError(
        f"PatchEmbed received images of symbolic size {size[0]} x {size[1]}, not declared "
        f"multiples of the patch {p}x{q}; trace with the polymorphic shape {constraint!r} "
        f"(Keras on JAX: model.export(path, jax2tf_kwargs={{'polymorphic_shapes': "
        f"[{constraint!r}]}}))."
    )


def _assert_size_at_run_time(images, image_size, channels):
    """`images`, after Keras' clear input-shape error for sizes unknown at trace time.

    TensorFlow's `predict` traces again with relaxed shapes `(batch, None, None, c)` once it
    has seen a second input size, so Keras' own check ("expected shape=(None, 32, 32, 3),
    found shape=(1, 40, 40, 3)") passes and the wrong size used to fail later, inside the
    position-embedding add. On TensorFlow the size is asserted at run time
    (`keras_vit.kernels.tf_checks`), naming both shapes, before anything uses the images. JAX traces
    with concrete shapes, where the static check in `call` already applies.
    """
    if not dispatch.graph_assertions():
        return images
    return dispatch.assert_image_size(images, image_size, channels)
