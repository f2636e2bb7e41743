"""The checkpoint error class, in a module of its own so that the low-level readers
(`npz_io`, `safetensors_io`) and their checks (`limits`) share it without importing each
other; every module imports it from here. `keras_vit.checkpoints.CheckpointError` is this
class."""


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read, or that does not fit the model."""
