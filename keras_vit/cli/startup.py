"""Quiet start-up of a `keras-vit` command: TensorFlow is imported only when a command runs,
and its C++/absl start-up block (oneDNN notice, CUDA driver probing, CPU feature notes) is
hidden unless `--verbose` or `KERAS_VIT_VERBOSE=1`.

TensorFlow 2.21 writes that block through absl's C++ logging before `absl::InitializeLog()`,
which `TF_CPP_MIN_LOG_LEVEL` does not reach, so the quiet mode sends file descriptor 2 to
/dev/null while TensorFlow is imported and its devices are listed (where the CUDA probing
happens), and restores it right after. Errors raised there still reach the user: the
exception propagates once stderr is back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings

# shared with the quiet start of `import keras_vit` users (`keras_vit._lazy`)
from keras_vit._lazy import backend_before_tensorflow, stderr_fd_silenced


def start_tensorflow(verbose: bool) -> None:
    """Imports TensorFlow (after Keras' backend: `backend_before_tensorflow`) and lists its
    devices, quietly unless `verbose`.

    Quiet mode also raises the Python loggers of TensorFlow and absl (used by TensorFlow
    Datasets) to ERROR and JAX's to WARNING, and keeps TF_CPP_MIN_LOG_LEVEL at 2 for later C++
    messages, XLA's "XLA service ... initialized" notes among them (the user's own value
    wins).
    """
    if verbose:
        backend_before_tensorflow()
        import tensorflow as tf

        tf.config.list_physical_devices()
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with stderr_fd_silenced(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation notes printed while TF imports
        backend_before_tensorflow()
        import tensorflow as tf

        tf.config.list_physical_devices()
    for name in ("tensorflow", "absl"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # JAX's start-up notes at INFO ("Unable to initialize backend 'tpu'" on every host
    # without one); its warnings stay
    logging.getLogger("jax").setLevel(logging.WARNING)
    with contextlib.suppress(ImportError):
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.ERROR)


def use_jax_compile_cache() -> None:
    """On Keras' JAX backend, JAX's persistent compilation cache in keras_vit's user cache
    folder (`keras_vit.runtime.jax_compile_cache`; `KERAS_VIT_JAX_COMPILE_CACHE=off` turns it
    off): a second command on the same host reads its compiled steps instead of compiling."""
    from keras_vit.runtime import jax_compile_cache

    jax_compile_cache.enable()
