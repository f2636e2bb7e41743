"""The probes of TensorFlow's bfloat16 kernels against TensorFlow's own report of oneDNN and
against sums computed here; the shape assertions are tested with the layers that use them."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_vit.kernels import tf_checks as _tf_checks
from tests.output_checks import onednn_bfloat16_kernels


def _einsum_error(equation, a_shape, b_shape):
    """Largest error of a bfloat16 `tf.einsum` against float64 on the same bfloat16 inputs,
    relative to the largest |output|."""
    rng = np.random.default_rng(0)
    a = tf.cast(rng.standard_normal(a_shape), tf.bfloat16)
    b = tf.cast(rng.standard_normal(b_shape), tf.bfloat16)
    out = tf.cast(tf.einsum(equation, a, b), tf.float64).numpy()
    exact = np.einsum(equation, tf.cast(a, tf.float64).numpy(), tf.cast(b, tf.float64).numpy())
    return np.abs(out - exact).max() / np.abs(exact).max()


def test_einsum_probe_agrees_with_oneDNN_report_and_with_measured_error():
    """oneDNN's contraction rounds once (error <= one bfloat16 half-step, 2^-9, of the
    output); Eigen's rounds its partial sums (several steps over 512 terms)."""
    accumulates = _tf_checks.bfloat16_einsum_accumulates_in_float32()
    assert accumulates == onednn_bfloat16_kernels()
    error = _einsum_error("bnth,bnsh->bnts", (2, 2, 8, 512), (2, 2, 8, 512))
    assert (error <= 2**-8) == accumulates, error


def test_softmax_probe_agrees_with_oneDNN_report():
    assert _tf_checks.bfloat16_softmax_rounds_like_float32() == onednn_bfloat16_kernels()


def test_probes_run_eagerly_when_first_called_while_tracing():
    """First called inside a `tf.function` (as the attention layer's call is), each probe
    still returns a Python bool equal to its eager answer."""
    probes = (
        _tf_checks.bfloat16_einsum_accumulates_in_float32,
        _tf_checks.bfloat16_softmax_rounds_like_float32,
    )
    eager = [probe() for probe in probes]
    traced = []
    for probe in probes:
        probe.cache_clear()

    @tf.function
    def trace():
        traced.extend(probe() for probe in probes)
        return tf.constant(0)

    trace()
    assert traced == eager and all(isinstance(answer, bool) for answer in traced)


def test_tracing_for_xla_is_true_only_inside_xla_compiled_functions():
    import keras

    seen = {}

    def record(name):
        seen[name] = _tf_checks.tracing_for_xla()

    tf.function(lambda: record("jit_compile"), jit_compile=True)()
    tf.function(lambda: record("graph"))()
    record("eager")

    class Recording(keras.layers.Layer):
        def call(self, x, training=None):
            if training:
                record(f"fit jit_compile={self.jit}")
            return x * 2.0

    for jit in (True, False):
        layer = Recording()
        layer.jit = jit
        inputs = keras.Input((3,))
        model = keras.Model(inputs, keras.layers.Dense(1)(layer(inputs)))
        model.compile("sgd", "mse", jit_compile=jit)
        model.fit(np.ones((4, 3)), np.ones((4, 1)), epochs=1, verbose=0)
    assert seen == {
        "jit_compile": True,
        "graph": False,
        "eager": False,
        "fit jit_compile=True": True,
        "fit jit_compile=False": False,
    }


def test_gpu_visible_follows_tensorflows_logical_devices(monkeypatch):
    assert _tf_checks.gpu_visible() == bool(tf.config.list_logical_devices("GPU"))
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: ["GPU:0"])
    assert _tf_checks.gpu_visible()
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: [])
    assert not _tf_checks.gpu_visible()
