"""keras_vit's AdamW: `ViTAdamW`, the optimizer of the training recipes (paper Section 4.1:
Adam with weight decay for pre-training, `keras_vit.train.schedules.pretrain_optimizer`), and the
variables it does not decay (`NO_WEIGHT_DECAY_PATTERN`). Its own module so that the
precision probe (`keras_vit.runtime.precision_probe`) can step a block with the run's optimizer
without importing the recipes."""

from __future__ import annotations

import keras
from keras import ops

NO_WEIGHT_DECAY_PATTERN = r"(^|/)(bias|gamma|beta|cls|pos_embedding)(/replica_\d+)?(:\d+)?$"
"""Variable names AdamW does not decay: biases, LayerNorm, class token, position table.
(The TensorFlow backend matches the tf.Variable name, e.g. "embedding/conv/bias:0".)"""


@keras.saving.register_keras_serializable(package="keras_vit")
class ViTAdamW(keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` whose weight-decay exclusions are part of its config.

    Keras' `exclude_from_weight_decay` is optimizer state that `get_config` leaves out, so a
    plain AdamW saved in a `.keras` file reloads decaying every variable. This subclass
    takes the exclusions as an argument and saves them, so a model reloaded to continue
    training decays what it decayed before (`pretrain_optimizer` returns one).

    On the TensorFlow backend outside a `tf.distribute` strategy, the update of every
    variable (decay and Adam step) runs as one XLA-compiled program instead of ~20 kernels
    per variable: the same arithmetic in the same order as `keras.optimizers.AdamW`, and the
    cheaper step where the model's own step is not compiled by XLA (bfloat16 training on
    CPUs). Under a strategy, with `amsgrad`, or on other backends it is Keras' own update.

    Args:
        no_decay_pattern: a regular expression; variables whose name it matches (Keras'
            `exclude_from_weight_decay(var_names=...)`) are not decayed. Default:
            `NO_WEIGHT_DECAY_PATTERN` (biases, LayerNorm, class token, position table).
        fused: one XLA program for the whole update where it applies (default True);
            False for Keras' per-variable update everywhere.
        **kwargs: those of `keras.optimizers.AdamW`.
    """

    def __init__(self, *args, no_decay_pattern=NO_WEIGHT_DECAY_PATTERN, fused=True, **kwargs):
        super().__init__(*args, **kwargs)
        self.no_decay_pattern = no_decay_pattern
        self.fused = bool(fused)
        self._fused_update = None  # keras_vit.kernels.tensorflow.AdamWUpdate, made on first use
        if no_decay_pattern:
            self.exclude_from_weight_decay(var_names=[no_decay_pattern])

    def get_config(self):
        return {
            **super().get_config(),
            "no_decay_pattern": self.no_decay_pattern,
            "fused": self.fused,
        }

    def _fused_update_applies(self, variables):
        if not self.fused or self.amsgrad or keras.backend.backend() != "tensorflow":
            return False
        import tensorflow as tf

        return not tf.distribute.has_strategy() and all(v.dtype == "float32" for v in variables)

    def _apply_weight_decay(self, variables):
        if not self._fused_update_applies(variables):
            super()._apply_weight_decay(variables)
        # else: the decay is the first part of the fused update (_backend_update_step)

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        if not self._fused_update_applies(trainable_variables):
            super()._backend_update_step(grads, trainable_variables, learning_rate)
            return
        if self._fused_update is None:
            from keras_vit.kernels.tensorflow import AdamWUpdate

            self._fused_update = AdamWUpdate()
        slots = [self._get_variable_index(v) for v in trainable_variables]
        decays = tuple(
            self.weight_decay is not None and self._use_weight_decay(v) for v in trainable_variables
        )
        self._fused_update(
            [v.value for v in trainable_variables],
            [self._momentums[i].value for i in slots],
            [self._velocities[i].value for i in slots],
            grads,
            decays,
            self._fused_hyperparameters(learning_rate),
        )

    def _fused_hyperparameters(self, learning_rate):
        def as_f32(value):
            return ops.cast(value, "float32")

        return ops.stack(
            [
                as_f32(learning_rate),
                as_f32(self.iterations + 1),
                as_f32(self.beta_1),
                as_f32(self.beta_2),
                as_f32(1 - self.beta_1),
                as_f32(1 - self.beta_2),
                as_f32(self.epsilon),
                as_f32(self.weight_decay or 0.0),
            ]
        )
