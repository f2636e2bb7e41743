"""JAX's persistent compilation cache for the command line on Keras' JAX backend.

A compiled XLA program (the training and evaluation steps of a run above all) is written to a
folder next to the precision probe's cache (`keras_vit.runtime.precision_probe.cache_folder`:
`$KERAS_VIT_CACHE_DIR`, else `$XDG_CACHE_HOME/keras_vit`, else `~/.cache/keras_vit`), in
`jax_compilation_cache/`, never in a run directory; a later command that compiles the same
program on the same host and JAX version reads it instead of compiling. JAX keys each entry by
the program, the compile options, the device and the jaxlib version, so a stale entry is never
used; the folder can be deleted at any time. Programs with a host callback are not cached by
JAX (the training loss leaves its callback out for data checked upstream,
`keras_vit.train.losses.labels_checked_upstream`).

`KERAS_VIT_JAX_COMPILE_CACHE=off` (or 0/false/no) leaves JAX's own setting alone (by default
no persistent cache, unless the user set `JAX_COMPILATION_CACHE_DIR`, which always wins).
"""

from __future__ import annotations

import logging
import os

from keras_vit.runtime import precision_probe

logger = logging.getLogger(__name__)

ENV = "KERAS_VIT_JAX_COMPILE_CACHE"
OFF_VALUES = ("0", "off", "false", "no")
SUBDIR = "jax_compilation_cache"
MIN_COMPILE_TIME_S = 0.5
"""Programs that compiled faster than this are not written (JAX's default: 1 s). The default
model's evaluation step compiles in ~0.6 s on a 2-core CPU; single operations (weight
initialisers) in well under 0.1 s."""


def cache_dir() -> str:
    """The folder of the cache (see the module docstring)."""
    return os.path.join(precision_probe.cache_folder(), SUBDIR)


def wanted(environ=None) -> bool:
    """False when `KERAS_VIT_JAX_COMPILE_CACHE` is one of `OFF_VALUES` (any case)."""
    environ = os.environ if environ is None else environ
    return environ.get(ENV, "").strip().lower() not in OFF_VALUES


def enable(environ=None) -> str | None:
    """Turns JAX's persistent compilation cache on in `cache_dir()` when Keras runs on JAX,
    `wanted()` says so and the user set no `JAX_COMPILATION_CACHE_DIR` of their own.

    Returns:
        The folder in use (the user's own one included), or None when off (another backend,
        or turned off).
    """
    import keras

    environ = os.environ if environ is None else environ
    if keras.backend.backend() != "jax" or not wanted(environ):
        return None
    import jax

    folder = environ.get("JAX_COMPILATION_CACHE_DIR") or cache_dir()
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_S)
    logger.debug("JAX compilation cache: %s (%s=off turns it off)", folder, ENV)
    return folder
