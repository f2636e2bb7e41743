"""Learning-rate schedules and the optimizers of the paper's recipes, plain Keras objects usable
with `model.fit`:

- `warmup_schedule` / `WarmupSchedule`: linear warmup then linear or cosine decay, as the
  release's `create_learning_rate_schedule` (vit_jax/utils.py).
- `pretrain_optimizer`: AdamW (beta1 0.9, beta2 0.999, decoupled weight decay on kernels),
  the paper's pre-training recipe (section 4.1 and appendix B.1); a `ViTAdamW`, whose
  exclusions a `.keras` file keeps.
- `finetune_optimizer`: SGD momentum 0.9, global-norm clipping 1.0, no weight decay, linear
  warmup then cosine decay to 0 (paper appendix B.1.1; the release's vit_jax/train.py).
"""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_vit._validation import (
    check_choice,
    check_positive_int,
)
from keras_vit.runtime.optimizers import NO_WEIGHT_DECAY_PATTERN, ViTAdamW

DECAYS = ("linear", "cosine")


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
