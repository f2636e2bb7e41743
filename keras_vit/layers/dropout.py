"""Dropout and stochastic depth whose random draw is float32 in every dtype policy.

A draw in the compute dtype drops at another rate than the one set: under `mixed_bfloat16`,
`floor(uniform + keep)` rounds in bfloat16 (8 significant bits), so a stochastic-depth rate of
0.00435 is observed as ~0.0078 on JAX and TensorFlow and ~0.0038 on PyTorch, and Keras'
`Dropout` on TensorFlow (`tf.nn.experimental.stateless_dropout` draws in the input's dtype)
drops ~0.0154 for 0.0087. Here the uniform noise is drawn in float32 and only the 0/1 keep
mask is cast to the compute dtype, so the rate is the set one (to float32's 2**-24 spacing)
on every backend. The same fix as jwohlwend/boltz's stochastic depth.
"""

from __future__ import annotations

import keras
from keras import ops

NOISE_DTYPE = "float32"


def keep_mask(shape, rate, seed, dtype):
    """A 0/1 mask of `shape` in `dtype`: each entry is 0 with probability `rate`.

    The uniform noise is drawn in float32 (`NOISE_DTYPE`) whatever `dtype` is, then compared
    and cast; `seed` is a `keras.random.SeedGenerator` (or an int for a fixed draw).
    """
    noise = keras.random.uniform(shape, seed=seed, dtype=NOISE_DTYPE)
    return ops.cast(ops.greater_equal(noise, rate), dtype)


def drop_path(x, rate, seed):
    """Stochastic depth (Huang et al. 2016): each sample's `x` is zeroed with probability
    `rate` and kept as `x / (1 - rate)` otherwise.

    Args:
        x: `(batch, ...)`, any float dtype; one draw per sample (index 0).
        rate: in [0, 1); 0 returns `x` as it is.
        seed: a `keras.random.SeedGenerator`.

    Returns:
        `x`'s shape and dtype.
    """
    if rate == 0:
        return x
    shape = (ops.shape(x)[0],) + (1,) * (len(x.shape) - 1)
    mask = keep_mask(shape, rate, seed, x.dtype)
    return x * mask / ops.cast(1.0 - rate, x.dtype)


@keras.saving.register_keras_serializable(package="keras_vit")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` (same arguments, config and seeding) whose random draw is float32.

    In training each entry of the input (or of `noise_shape`, broadcast) is zeroed with
    probability `rate` and the rest scaled by `1 / (1 - rate)`; the keep mask comes from
    `keep_mask`, so the rate holds under `mixed_bfloat16` and `mixed_float16` too (Keras'
    own `Dropout` on TensorFlow draws in the compute dtype). Inference returns the input.

    Args:
        rate: in [0, 1].
        noise_shape: None (default: the input's shape) or a shape broadcast to the input's,
            None entries taking the input's size.
        seed: None (default) or an int.
        **kwargs: `name`, `dtype`, `trainable`.

    Call arguments:
        inputs: any shape, any float dtype.
        training: Python bool or None (default None, i.e. inference).

    Returns:
        `inputs`' shape and dtype.

    Raises:
        ValueError: a rate outside [0, 1] (Keras' check).
    """

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        if self.rate == 1:
            return ops.zeros_like(inputs)
        mask = keep_mask(self._mask_shape(inputs), self.rate, self.seed_generator, inputs.dtype)
        return inputs * mask / ops.cast(1.0 - self.rate, inputs.dtype)

    def _mask_shape(self, inputs):
        shape = ops.shape(inputs)
        if self.noise_shape is None:
            return shape
        return tuple(shape[i] if size is None else size for i, size in enumerate(self.noise_shape))
