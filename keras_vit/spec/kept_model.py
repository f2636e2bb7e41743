"""Which epoch's model a run keeps as best.keras (`--select`, `RunConfig.select`).

- "last": the model at the end of the schedule. The paper reports each run's final model
  (appendix B.1: fine-tuning runs a fixed schedule; no epoch is picked on held-out data).
- "best": the epoch with the best monitored value on the validation split (Keras'
  `ModelCheckpoint(save_best_only=True)`).

Kept apart from `keras_vit.train.callbacks` (which applies the rule) so that the command line can
list the choices without importing Keras.
"""

SELECTIONS = ("last", "best")
DEFAULT_SELECTION = "last"
