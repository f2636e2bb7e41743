"""The training loss of the recipes: cross-entropy from logits, with optional label smoothing
for integer labels (`loss`), and labels checked in the graph (an integer class id in
[0, num_classes), else an InvalidArgumentError naming the value) rather than silently clipped.

Where the data was checked before it reaches the step (`keras_vit.train.runs.fit_run` checks
arrays whole and asserts each dataset batch's labels in its tf.data graph), the steps traced
under `labels_checked_upstream()` leave the in-step check out: on JAX it is a host callback
that costs CPU every step and keeps the compiled step out of JAX's persistent cache.
"""

from __future__ import annotations

import contextlib
import contextvars

import keras
import numpy as np
from keras import ops

from keras_vit._validation import (
    check_labels,
)

_CHECKED_UPSTREAM = contextvars.ContextVar("keras_vit_labels_checked_upstream", default=False)


@contextlib.contextmanager
def labels_checked_upstream():
    """Within it, a loss traced into a step (TensorFlow graph, JAX jit) leaves out its
    raising label check (the TensorFlow Assert, the JAX host callback): for data whose labels
    were checked where the data is made. The NaN factor of `label_factor` stays, so a label
    that still slipped through gives a NaN loss, never a finite wrong one; eager calls still
    raise. A step compiled within it keeps its choice: reset the model's compiled functions
    before handing it to code that feeds unchecked data (`fit_run` does). Per thread: a
    thread started inside (TensorFlow's replica threads) still checks."""
    token = _CHECKED_UPSTREAM.set(True)
    try:
        yield
    finally:
        _CHECKED_UPSTREAM.reset(token)


def _concrete(labels) -> bool:
    """True when `labels` holds values now (eager), False inside a traced function."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.executing_eagerly()
    if backend == "jax":
        import jax

        return not isinstance(labels, jax.core.Tracer)
    return True  # numpy, torch: eager


def _raise_on_bad_labels(labels, num_classes) -> None:
    """Host-side check (eager, or a JAX callback): ValueError naming the first bad label."""
    check_labels(np.asarray(labels), int(num_classes), what="labels passed to the loss")


def _traced_label_check(labels, valid, num_classes) -> None:
    """Inside a traced train step: TensorFlow's Assert in graph mode, or a JAX host callback
    that raises. Not under TensorFlow's XLA: XLA cannot compile an Assert, and one in the
    step cost the default `keras-vit train` 40x its step time on CPU (epoch 2: 5.5 s without,
    ~260 s with); there the NaN factor of `label_factor` is the failure."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        from keras_vit.kernels import tf_checks

        if tf_checks.tracing_for_xla():
            return

        first = tf.argmin(tf.cast(valid, tf.int32))
        tf.debugging.Assert(
            tf.reduce_all(valid),
            [
                "Bad labels passed to the loss: each must be an integer class id in [0,",
                num_classes,
                "); first bad label and its index:",
                labels[first],
                first,
            ],
            summarize=3,
        )
    elif backend == "jax":
        import jax

        jax.debug.callback(_raise_on_bad_labels, labels, num_classes)


def label_factor(y_true, num_classes, ignore_class=None):
    """1.0 for each integer label in [0, `num_classes`), NaN for any other, shape `(n,)` for
    `y_true` flattened; raises first where the backend can.

    Sparse cross-entropy casts labels to int32 and one-hot encodes them, so 7 or -1 of 5
    classes become an all-zero target (a finite loss, trained on without a word) and 1.5
    becomes 1. Eager: ValueError naming the first bad label, its index and the range.
    Traced: TensorFlow raises InvalidArgumentError from `tf.debugging.Assert` in graph mode;
    JAX raises from a host callback (`jax.debug.callback`). Under TensorFlow's XLA
    (`jit_compile=True`) assert ops are dropped, so there the NaN factor makes the loss and
    the gradients NaN: a visible failure, never a finite wrong loss. `ignore_class` labels
    count as good (Keras skips them). Traced within `labels_checked_upstream()`: the NaN
    factor alone (the data was checked where it was made).
    """
    labels = ops.reshape(y_true, (-1,))
    if _concrete(labels):
        values = np.asarray(ops.convert_to_numpy(labels))
        if ignore_class is not None:
            values = np.where(values == ignore_class, 0, values)
        _raise_on_bad_labels(values, num_classes)
    values = ops.cast(labels, "float32")
    upper = ops.cast(num_classes, "float32")
    valid = (values == ops.floor(values)) & (values >= 0) & (values < upper)
    if ignore_class is not None:
        valid = valid | (values == float(ignore_class))
    if not _concrete(labels) and not _CHECKED_UPSTREAM.get():
        _traced_label_check(labels, valid, num_classes)
    return ops.where(valid, 1.0, float("nan"))


def _times_factor(per_example, factor):
    return per_example * ops.cast(ops.reshape(factor, ops.shape(per_example)), per_example.dtype)


@keras.saving.register_keras_serializable(package="keras_vit")
class SparseCrossentropyWithSmoothing(keras.losses.Loss):
    """Cross-entropy from logits for integer labels with label smoothing.

    The target distribution is (1 - label_smoothing) * one_hot(y) + label_smoothing / K
    (as keras.losses.CategoricalCrossentropy, which needs one-hot labels). Labels that are
    no integer class id in [0, K) raise (see `label_factor`).

    Args:
        label_smoothing: in [0, 1).
    """

    def __init__(self, label_smoothing=0.1, name="sparse_crossentropy_with_smoothing", **kwargs):
        super().__init__(name=name, **kwargs)
        if not 0 <= label_smoothing < 1:
            raise ValueError(
                f"`label_smoothing` must be in [0, 1). Received: label_smoothing={label_smoothing}"
            )
        self.label_smoothing = float(label_smoothing)

    def call(self, y_true, y_pred):
        num_classes = ops.shape(y_pred)[-1]
        factor = label_factor(y_true, num_classes)
        labels = ops.one_hot(ops.cast(ops.reshape(y_true, (-1,)), "int32"), num_classes)
        per_example = keras.losses.categorical_crossentropy(
            labels, y_pred, from_logits=True, label_smoothing=self.label_smoothing
        )
        return _times_factor(per_example, factor)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing}


@keras.saving.register_keras_serializable(package="keras_vit")
class CheckedSparseCrossentropy(keras.losses.SparseCategoricalCrossentropy):
    """`keras.losses.SparseCategoricalCrossentropy` that raises on labels outside
    [0, num_classes) or not whole (see `label_factor`): Keras' own wraps them on the JAX
    backend and under XLA into a finite loss, and casts 1.5 to 1 on every backend."""

    def call(self, y_true, y_pred):
        factor = label_factor(y_true, ops.shape(y_pred)[-1], self.ignore_class)
        return _times_factor(super().call(y_true, y_pred), factor)


def loss(label_smoothing=0.0, one_hot=False):
    """Cross-entropy from logits (keras_vit models return logits).

    Args:
        label_smoothing: in [0, 1); 0 (default) for none.
        one_hot: True when the data yields one-hot (or MixUp-mixed) float labels.

    Returns:
        `keras.losses.CategoricalCrossentropy` (one_hot), `CheckedSparseCrossentropy` (a
        `SparseCategoricalCrossentropy`; integer labels, no smoothing) or
        `SparseCrossentropyWithSmoothing`. The last two raise on labels that are no integer
        class id in [0, num_classes) (`label_factor`).
    """
    if one_hot:
        return keras.losses.CategoricalCrossentropy(
            from_logits=True, label_smoothing=label_smoothing
        )
    if label_smoothing:
        return SparseCrossentropyWithSmoothing(label_smoothing)
    return CheckedSparseCrossentropy(from_logits=True)
