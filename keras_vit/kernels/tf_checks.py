"""Run-time checks that only the TensorFlow backend needs (kept out of `keras_vit.layers`,
whose code uses `keras.ops` only so that it runs on every backend): shape assertions inside
the graph, probes of how this TensorFlow build's bfloat16 kernels round, whether the code
is being traced for XLA, and whether a GPU is visible.

TensorFlow's CPU kernels differ by build and host: with oneDNN (on by default where the CPU
has AVX-512) bfloat16 products and softmax accumulate in float32 and round once; without it
(e.g. AVX2-only hosts, or `TF_ENABLE_ONEDNN_OPTS=0`) Eigen's bfloat16 `einsum` contraction
rounds its partial sums to bfloat16 and its softmax rounds each step, while `MatMul` and
`BatchMatMul` still accumulate in float32. The probes measure this once per process.
"""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf


def assert_image_size(images, image_size, channels):
    """`images` (batch, height, width, channels), passed through once their spatial size is
    asserted to equal `image_size` (height, width) at run time.

    Raises (when the graph runs) `tf.errors.InvalidArgumentError` naming the expected
    `(None, height, width, channels)` and the shape found.
    """
    height, width = image_size
    shape = tf.shape(images)
    check = tf.debugging.Assert(
        tf.reduce_all(tf.equal(shape[1:3], [height, width])),
        [
            f"Input images are incompatible with the model: expected shape=(None, {height}, "
            f"{width}, {channels}), found shape=",
            shape,
        ],
        summarize=4,
    )
    with tf.control_dependencies([check]):
        return tf.identity(images)


def assert_divisible(images, patch_size):
    """`images` (batch, height, width, channels), passed through once each of height and
    width is asserted to be a multiple of `patch_size` (height, width) at run time.

    Raises (when the graph runs) `tf.errors.InvalidArgumentError` naming the patch size, the
    rule and the shape found.
    """
    patch = tf.constant([int(patch_size[0]), int(patch_size[1])])
    shape = tf.shape(images)
    check = tf.debugging.Assert(
        tf.reduce_all(tf.equal(shape[1:3] % patch, 0)),
        [
            f"Image height and width must each be a multiple of the patch size "
            f"{tuple(int(p) for p in patch_size)} (the image is cut into non-overlapping "
            "patches, paper section 3.1; dynamic_image_size does not crop); found shape=",
            shape,
        ],
        summarize=4,
    )
    with tf.control_dependencies([check]):
        return tf.identity(images)


@functools.cache
def bfloat16_einsum_accumulates_in_float32() -> bool:
    """True when a bfloat16 `tf.einsum` contraction sums in float32 and rounds once.

    Probe: 1 + 256 x 2^-9 along the contracted axis is 1.5 summed in float32 (exact in
    bfloat16) and 1.0 when each partial sum is rounded to bfloat16's 8 significant bits.
    Runs eagerly (`tf.init_scope`) even when first called while a graph is traced.
    """
    with tf.init_scope():
        terms = np.full((1, 1, 1, 257), 2.0**-9, np.float32)
        terms[..., 0] = 1.0
        query = tf.constant(terms, tf.bfloat16)
        key = tf.ones((1, 1, 1, 257), tf.bfloat16)
        total = tf.einsum("bnth,bnsh->bnts", query, key)
        return bool(abs(float(tf.cast(total, tf.float32).numpy().ravel()[0]) - 1.5) < 1e-3)


@functools.cache
def bfloat16_softmax_rounds_like_float32() -> bool:
    """True when `tf.nn.softmax` on bfloat16 logits gives the float32 softmax of the same
    logits rounded to bfloat16 (on at least 99% of 4096 random entries, rows of 64).

    Runs eagerly (`tf.init_scope`) even when first called while a graph is traced.
    """
    with tf.init_scope():
        logits = np.random.default_rng(0).normal(0.0, 3.0, (64, 64)).astype(np.float32)
        logits = tf.cast(tf.constant(logits), tf.bfloat16)
        direct = tf.nn.softmax(logits, axis=-1)
        reference = tf.cast(tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1), tf.bfloat16)
        same = tf.reduce_mean(tf.cast(tf.equal(direct, reference), tf.float32))
        return bool(float(same.numpy()) >= 0.99)


def tracing_for_xla() -> bool:
    """True while the code runs inside a function XLA compiles (`tf.function(jit_compile=
    True)`, a Keras model compiled with `jit_compile=True`), False in other functions and
    eagerly. Read from the graph's control-flow context (TensorFlow's own test for it);
    should that internal API move, True: callers then keep the forms XLA gets today.
    """
    try:
        from tensorflow.python.ops import control_flow_util

        graph = tf.compat.v1.get_default_graph()
        return bool(control_flow_util.GraphOrParentsInXlaContext(graph))
    except (ImportError, AttributeError):
        return True


def gpu_visible() -> bool:
    """True where TensorFlow sees a GPU (kernels whose speed was measured on CPUs only stay
    off there)."""
    return bool(tf.config.list_logical_devices("GPU"))
