"""Training recipes: learning-rate schedules, optimizers, losses and the default configs.

All are plain Keras objects usable with `model.fit`:

- `warmup_schedule` / `WarmupSchedule`: linear warmup then linear or cosine decay, as the
  release's `create_learning_rate_schedule` (vit_jax/utils.py).
- `pretrain_optimizer`: AdamW (beta1 0.9, beta2 0.999, decoupled weight decay on kernels),
  the paper's pre-training recipe (section 4.1 and appendix B.1); a `ViTAdamW`, whose
  exclusions a `.keras` file keeps.
- `finetune_optimizer`: SGD momentum 0.9, global-norm clipping 1.0, no weight decay, linear
  warmup then cosine decay to 0 (paper appendix B.1.1; the release's vit_jax/train.py).
- `loss`: cross-entropy from logits, with optional label smoothing for integer labels.
- `TrainConfig` / `FinetuneConfig`: the defaults of `keras-vit train` and `keras-vit finetune`;
  `build_model` builds the ViT or hybrid a run's model arguments describe.
"""

from __future__ import annotations

import dataclasses
import math

import keras
import numpy as np
from keras import ops

from keras_vit._validation import (
    check_choice,
    check_heads,
    check_int,
    check_labels,
    check_non_negative_number,
    check_positive_int,
    check_positive_number,
    check_rate,
    to_pair,
)
from keras_vit.layers.pooling import CLASSIFIER_POOLINGS
from keras_vit.layers.position_embedding import POSITION_EMBEDDINGS
from keras_vit.runtime.optimizers import NO_WEIGHT_DECAY_PATTERN, ViTAdamW
from keras_vit.spec.configs import RECIPE_DEFAULTS, RECIPE_VIT

_TRAIN_DEFAULTS, _FINETUNE_DEFAULTS = RECIPE_DEFAULTS["train"], RECIPE_DEFAULTS["finetune"]

DECAYS = ("linear", "cosine")
STEMS = ("resnet", "patch")
POSITIVE_INT_FIELDS = (
    "resnet_width",
    "resnet_groups",
    "hidden_dim",
    "num_heads",
    "mlp_dim",
    "num_layers",
    "epochs",
    "batch_size",
)
"""`TrainConfig`'s fields that must be integers > 0."""
FINETUNE_MAX_WARMUP_STEPS = 500


@keras.saving.register_keras_serializable(package="keras_vit")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `base_lr`, then linear or cosine decay to `end_lr`.

    lr(step) = warm(step) * (end_lr + (base_lr - end_lr) * shape(progress)), with
    warm(step) = min(1, step / warmup_steps) (1 when warmup_steps is 0),
    progress = clip((step - warmup_steps) / (total_steps - warmup_steps), 0, 1),
    shape(p) = 1 - p ("linear") or (1 + cos(pi p)) / 2 ("cosine").
    Source: the release's `create_learning_rate_schedule` (vit_jax/utils.py).

    Args:
        base_lr: peak learning rate (> 0).
        total_steps: optimizer steps of the whole run (> warmup_steps).
        warmup_steps: steps of linear warmup (>= 0).
        decay: "linear" or "cosine".
        end_lr: learning rate reached at `total_steps` (default 0).

    Raises:
        ValueError: non-positive base_lr/total_steps, warmup_steps outside [0, total_steps),
            unknown decay.
    """

    def __init__(self, base_lr, total_steps, warmup_steps=0, decay="cosine", end_lr=0.0):
        if not base_lr > 0:
            raise ValueError(f"`base_lr` must be > 0. Received: base_lr={base_lr!r}")
        check_positive_int("total_steps", total_steps)
        if not isinstance(warmup_steps, int) or not 0 <= warmup_steps < total_steps:
            raise ValueError(
                "`warmup_steps` must be an integer in [0, total_steps). "
                f"Received: warmup_steps={warmup_steps!r}, total_steps={total_steps}"
            )
        check_choice("decay", decay, DECAYS)
        if not 0 <= end_lr <= base_lr:
            raise ValueError(
                f"`end_lr` must be in [0, base_lr]. Received: end_lr={end_lr!r}, base_lr={base_lr}"
            )
        self.base_lr = float(base_lr)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.decay = decay
        self.end_lr = float(end_lr)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        progress = (step - self.warmup_steps) / float(self.total_steps - self.warmup_steps)
        progress = ops.clip(progress, 0.0, 1.0)
        if self.decay == "linear":
            shape = 1.0 - progress
        else:
            shape = 0.5 * (1.0 + ops.cos(math.pi * progress))
        lr = self.end_lr + (self.base_lr - self.end_lr) * shape
        if self.warmup_steps:
            lr = lr * ops.minimum(1.0, step / float(self.warmup_steps))
        return lr

    def get_config(self):
        return {
            "base_lr": self.base_lr,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay": self.decay,
            "end_lr": self.end_lr,
        }


def warmup_schedule(base_lr, total_steps, warmup_steps=0, decay="cosine", end_lr=0.0):
    """A `WarmupSchedule` (see there): linear warmup, then "linear" or "cosine" decay."""
    return WarmupSchedule(base_lr, total_steps, warmup_steps, decay, end_lr)


def pretrain_optimizer(
    base_lr,
    total_steps,
    warmup_steps,
    *,
    weight_decay=0.1,
    decay="linear",
    global_clipnorm=1.0,
    end_lr=0.0,
):
    """AdamW for (pre-)training from scratch, as in the paper (section 4.1, appendix B.1).

    Adam beta1 0.9, beta2 0.999, epsilon 1e-8; decoupled weight decay (scaled by the learning
    rate, as optax.adamw) on kernels only: biases, LayerNorm scales/offsets, the class token
    and the position table are not decayed.

    Args:
        base_lr: peak learning rate.
        total_steps: optimizer steps of the whole run.
        warmup_steps: linear warmup steps (paper: 10k of ~90 epochs).
        weight_decay: decoupled weight decay (paper: 0.1 JFT, 0.03 ImageNet-21k, 0.3 ImageNet).
        decay: "linear" (paper) or "cosine".
        global_clipnorm: clip the gradients' global norm (paper: 1.0); None for no clipping.
        end_lr: final learning rate.

    Returns:
        A `ViTAdamW` (a `keras.optimizers.AdamW` that saves its exclusions in `.keras`
        files) with a `WarmupSchedule` learning rate.
    """
    return ViTAdamW(
        learning_rate=warmup_schedule(base_lr, total_steps, warmup_steps, decay, end_lr),
        weight_decay=weight_decay,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-8,
        global_clipnorm=global_clipnorm,
        no_decay_pattern=NO_WEIGHT_DECAY_PATTERN,
    )


def default_finetune_warmup(total_steps: int) -> int:
    """The release's 500 warmup steps, capped at a tenth of a shorter run."""
    return min(FINETUNE_MAX_WARMUP_STEPS, total_steps // 10)


def finetune_optimizer(base_lr, total_steps, warmup_steps=None):
    """The release's fine-tuning optimizer (paper appendix B.1.1; vit_jax/train.py).

    SGD with momentum 0.9, gradients clipped at global norm 1.0, no weight decay; linear
    warmup then cosine decay to 0.

    Args:
        base_lr: peak learning rate (release grid: 0.001, 0.003, 0.01, 0.03, 0.06).
        total_steps: optimizer steps (release: 500 Pets/Flowers, 10k CIFAR, 20k ImageNet).
        warmup_steps: None (default) -> min(500, total_steps // 10); else an int in
            [0, total_steps).

    Returns:
        A `keras.optimizers.SGD` with a cosine `WarmupSchedule`.
    """
    check_positive_int("total_steps", total_steps)
    if warmup_steps is None:
        warmup_steps = default_finetune_warmup(total_steps)
    return keras.optimizers.SGD(
        learning_rate=warmup_schedule(base_lr, total_steps, warmup_steps, "cosine", 0.0),
        momentum=0.9,
        nesterov=False,
        weight_decay=None,
        global_clipnorm=1.0,
    )


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
    count as good (Keras skips them).
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
    if not _concrete(labels):
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


def build_model(model_kwargs: dict):
    """`keras_vit.HybridViT(**model_kwargs)` when they name `resnet_stages`, else
    `keras_vit.ViT(**model_kwargs)` (the form config.json records a run's model in)."""
    from keras_vit.model.build_any import build

    return build(model_kwargs)


def _compile_kwargs(config, num_train_examples):
    return {
        "optimizer": config.optimizer(num_train_examples),
        "loss": loss(config.label_smoothing),
        "metrics": ["accuracy"],
        "jit_compile": _resolved_jit_compile(config),
    }


def _check_common(config) -> None:
    """The fields `TrainConfig` and `FinetuneConfig` share: dataset, jit_compile, seed."""
    if not isinstance(config.dataset, str) or not config.dataset:
        raise ValueError(
            f"`dataset` must be a non-empty string. Received: dataset={config.dataset!r}"
        )
    if config.jit_compile not in (True, False, "auto", None):
        raise ValueError(
            "`jit_compile` must be True, False or 'auto'. "
            f"Received: jit_compile={config.jit_compile!r}"
        )
    if not 0 <= check_int("seed", config.seed) < 2**32:
        raise ValueError(f"`seed` must be in [0, 2**32). Received: seed={config.seed!r}")


def _resolved_jit_compile(config) -> bool:
    """The recipe's `jit_compile`, "auto" chosen for this device, the global dtype policy
    and the recipe's width (`keras_vit.runtime.precision.choose_precision`)."""
    if config.jit_compile not in ("auto", None):
        return bool(config.jit_compile)
    from keras_vit.runtime import precision
    from keras_vit.runtime.precision_probe import shape_from_kwargs

    hidden_dim = getattr(config, "hidden_dim", None)
    shape = {}
    if hidden_dim is not None and hasattr(config, "model_kwargs"):
        shape = shape_from_kwargs(config.model_kwargs(1, 1))
        del shape["hidden_dim"]
    return precision.choose_precision(
        hidden_dim,
        mixed_precision=keras.config.dtype_policy().name,
        jit_compile="auto",
        **shape,
    ).jit_compile


@dataclasses.dataclass
class TrainConfig:
    """Defaults of `keras-vit train`: a small hybrid ViT trained from scratch on the embedded
    MNIST.

    Tuned on this project's 2-core CPU (docs/data_and_recipes.md has the measurements). The
    paper finds hybrids ahead of pure ViTs at small compute and data (section 4.2, figure 5),
    and AugReg that small data wants augmentation, regularisation and longer schedules: the
    default `stem="resnet"` is the BiT ResNet root of the release's hybrids (conv 7x7/2,
    GroupNorm, max-pool 3x3/2: `resnet_width` channels, stride 4) feeding 1x1 patches of its
    7x7 feature map to a 4-block, width-64 Transformer (49 tokens, as the patch-4 ViT), trained
    30 epochs of batches of 64 with AdamW (peak learning rate 3e-3), warmup + cosine decay,
    label smoothing and the mild digit crop of `keras_vit.data.default_augmentation("mnist")`,
    in float32 with XLA where the probe finds it the fastest at this width. Batches of 64
    take ~0.8x the time of batches of 32 at the same accuracy (both measured).
    `stem="patch"` is the pure ViT with `patch_size` pixel patches.

    Use:
        config = TrainConfig()
        info = keras_vit.data.describe(config.dataset)
        model = config.build(info.num_classes, info.channels)
        model.compile(**config.compile_kwargs(num_train))
        model.fit(train_ds, epochs=config.num_epochs(num_train), validation_data=val_ds)
    """

    dataset: str = _TRAIN_DEFAULTS["dataset"]
    image_size: int = _TRAIN_DEFAULTS["image_size"]
    stem: str = "resnet"
    resnet_width: int = 32
    resnet_groups: int = 8
    # The Transformer fields default to `keras_vit.spec.configs.RECIPE_VIT` (sizes live there).
    patch_size: int = RECIPE_VIT.patch_size
    hidden_dim: int = RECIPE_VIT.hidden_dim
    num_heads: int = RECIPE_VIT.num_heads
    mlp_dim: int = RECIPE_VIT.mlp_dim
    num_layers: int = RECIPE_VIT.num_layers
    pooling: str = "gap"
    position_embedding: str = "learned"
    dropout_rate: float = RECIPE_VIT.dropout_rate
    epochs: int = _TRAIN_DEFAULTS["epochs"]
    batch_size: int = _TRAIN_DEFAULTS["batch_size"]
    learning_rate: float = _TRAIN_DEFAULTS["learning_rate"]
    weight_decay: float = 0.05
    warmup_epochs: float = 1.0
    decay: str = "cosine"
    label_smoothing: float = 0.1
    global_clipnorm: float | None = 1.0
    jit_compile: bool | str = "auto"
    seed: int = _TRAIN_DEFAULTS["seed"]

    def __post_init__(self):
        """Checks every field, so that a bad recipe (given in Python, or a hand-edited
        config.json) fails before any work; ValueError naming the field and the rule."""
        check_choice("stem", self.stem, STEMS)
        check_choice("decay", self.decay, DECAYS)
        check_choice("pooling", self.pooling, CLASSIFIER_POOLINGS)
        check_choice("position_embedding", self.position_embedding, POSITION_EMBEDDINGS)
        to_pair("image_size", self.image_size)
        to_pair("patch_size", self.patch_size)
        for name in POSITIVE_INT_FIELDS:
            check_positive_int(name, getattr(self, name))
        check_heads(self.hidden_dim, self.num_heads)
        check_rate("dropout_rate", self.dropout_rate)
        check_rate("label_smoothing", self.label_smoothing)
        check_positive_number("learning_rate", self.learning_rate)
        check_non_negative_number("weight_decay", self.weight_decay)
        check_non_negative_number("warmup_epochs", self.warmup_epochs)
        if self.global_clipnorm is not None:
            check_positive_number("global_clipnorm", self.global_clipnorm)
        _check_common(self)

    def model_kwargs(self, num_classes: int, channels: int) -> dict:
        """Keyword arguments of `keras_vit.HybridViT` (stem "resnet": they hold
        `resnet_stages`) or `keras_vit.ViT` (stem "patch") for this recipe."""
        kwargs = {
            "patch_size": self.patch_size,
            "hidden_dim": self.hidden_dim,
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "num_layers": self.num_layers,
            "num_classes": num_classes,
            "image_size": self.image_size,
            "channels": channels,
            "pooling": self.pooling,
            "position_embedding": self.position_embedding,
            "dropout_rate": self.dropout_rate,
        }
        if self.stem == "resnet":
            kwargs.update(
                resnet_stages=[],
                resnet_width=self.resnet_width,
                resnet_groups=self.resnet_groups,
                patch_size=1,
            )
        return kwargs

    def build(self, num_classes: int, channels: int):
        """The recipe's model (uncompiled)."""
        return build_model(self.model_kwargs(num_classes, channels))

    def steps_per_epoch(self, num_train_examples: int) -> int:
        """Full batches per epoch (the training pipeline drops the remainder)."""
        return max(1, num_train_examples // self.batch_size)

    def num_epochs(self, num_train_examples: int) -> int:
        """Epochs to pass to `model.fit`."""
        return self.epochs

    def total_steps(self, num_train_examples: int) -> int:
        return self.steps_per_epoch(num_train_examples) * self.num_epochs(num_train_examples)

    def warmup_steps(self, num_train_examples: int) -> int:
        steps = int(round(self.warmup_epochs * self.steps_per_epoch(num_train_examples)))
        return min(steps, self.total_steps(num_train_examples) - 1)

    def optimizer(self, num_train_examples: int):
        """`pretrain_optimizer` sized for `num_train_examples` training images."""
        return pretrain_optimizer(
            self.learning_rate,
            self.total_steps(num_train_examples),
            self.warmup_steps(num_train_examples),
            weight_decay=self.weight_decay,
            decay=self.decay,
            global_clipnorm=self.global_clipnorm,
        )

    def compile_kwargs(self, num_train_examples: int) -> dict:
        """`model.compile(**...)`: optimizer, loss (integer labels), accuracy, jit_compile."""
        return _compile_kwargs(self, num_train_examples)


@dataclasses.dataclass
class FinetuneConfig:
    """Defaults of `keras-vit finetune`: the release's SGD recipe on the embedded digits.

    The paper's transfer step in miniature: a model pre-trained on MNIST at 28x28 is
    fine-tuned on the UCI digits at 40x40 (position table resized, zero-initialised head).

    The run is counted in optimizer steps, as the paper's fine-tuning (appendix B.1.1: 500
    steps for Pets/Flowers, 10k for CIFAR): `steps` steps split into `validations` "epochs"
    of `steps_per_epoch()` steps, each followed by one validation pass, whatever the size of
    the training set. Use a repeated training set: `model.fit(train_ds.repeat(),
    epochs=config.num_epochs(n), steps_per_epoch=config.steps_per_epoch(n))`.
    """

    dataset: str = _FINETUNE_DEFAULTS["dataset"]
    image_size: int = _FINETUNE_DEFAULTS["image_size"]
    batch_size: int = _FINETUNE_DEFAULTS["batch_size"]
    steps: int = _FINETUNE_DEFAULTS["steps"]
    validations: int = 5
    learning_rate: float = _FINETUNE_DEFAULTS["learning_rate"]
    warmup_steps: int | None = None
    label_smoothing: float = 0.0
    jit_compile: bool | str = "auto"
    seed: int = _FINETUNE_DEFAULTS["seed"]

    def __post_init__(self):
        """Checks every field (see `TrainConfig.__post_init__`); `image_size` None: the
        pre-trained model's."""
        if self.image_size is not None:
            to_pair("image_size", self.image_size)
        for name in ("batch_size", "steps", "validations"):
            check_positive_int(name, getattr(self, name))
        check_positive_number("learning_rate", self.learning_rate)
        if self.warmup_steps is not None:
            check_int("warmup_steps", self.warmup_steps)
            check_non_negative_number("warmup_steps", self.warmup_steps)
        check_rate("label_smoothing", self.label_smoothing)
        _check_common(self)

    def num_epochs(self, num_train_examples: int) -> int:
        """Validation passes of the run (`validations`, at most one per step)."""
        return max(1, min(self.validations, self.steps))

    def steps_per_epoch(self, num_train_examples: int) -> int:
        """Steps between two validations (`steps / validations`, rounded up)."""
        return math.ceil(self.steps / self.num_epochs(num_train_examples))

    def total_steps(self, num_train_examples: int) -> int:
        return self.steps_per_epoch(num_train_examples) * self.num_epochs(num_train_examples)

    def optimizer(self, num_train_examples: int):
        """`finetune_optimizer` sized for `num_train_examples` training images."""
        return finetune_optimizer(
            self.learning_rate, self.total_steps(num_train_examples), self.warmup_steps
        )

    def compile_kwargs(self, num_train_examples: int) -> dict:
        return _compile_kwargs(self, num_train_examples)
