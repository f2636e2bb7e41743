"""Keras models and `.keras` files as checkpoints: a built model's contents and the `.keras`
reader (`model_io`). Imports `base/` only."""
