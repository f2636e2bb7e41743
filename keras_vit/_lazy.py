"""Public names imported on first use (PEP 562 module `__getattr__` and `__dir__`), shared by
the packages whose import must not start TensorFlow (`keras_vit`, `keras_vit.checkpoints`).

The first such name that starts TensorFlow (`keras_vit.ViT`, ...) starts it quietly: its C++
start-up block (oneDNN notice, CUDA driver probing such as `E0000 ... failed call to cuInit`
on machines without a GPU, CPU feature notes), which TensorFlow 2.21 writes through absl
before `TF_CPP_MIN_LOG_LEVEL` applies, is kept off stderr while TensorFlow is imported and its
devices are listed. Not when the user set `TF_CPP_MIN_LOG_LEVEL` (their choice stands) or
`KERAS_VIT_VERBOSE=1`, nor when TensorFlow was already imported. Errors still show: an
exception propagates once stderr is back.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys

VERBOSE_ENV = "KERAS_VIT_VERBOSE"


def verbose_from_env() -> bool:
    """True when KERAS_VIT_VERBOSE is set to 1/true/yes."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes")


@contextlib.contextmanager
def stderr_fd_silenced():
    """Sends OS-level stderr (fd 2, where C++ logs go) to /dev/null inside the block."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no file descriptor 2 (a detached process): nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def quiet_start_wanted() -> bool:
    """True when an import that may start TensorFlow should hide its start-up block: it is
    not imported yet, and neither TF_CPP_MIN_LOG_LEVEL nor KERAS_VIT_VERBOSE is set."""
    return (
        "tensorflow" not in sys.modules
        and "TF_CPP_MIN_LOG_LEVEL" not in os.environ
        and not verbose_from_env()
    )


def configured_backend() -> str:
    """Keras' backend as Keras will read it, without importing Keras: KERAS_BACKEND, else the
    "backend" of $KERAS_HOME/keras.json (default ~/.keras), else "tensorflow"."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json"), encoding="utf-8") as handle:
            backend = json.load(handle).get("backend")
    except (OSError, ValueError, AttributeError):
        backend = None
    return backend if isinstance(backend, str) else "tensorflow"


def backend_before_tensorflow() -> None:
    """Under Keras' PyTorch backend, imports Keras (and with it PyTorch) before anything
    imports TensorFlow: PyTorch imported after TensorFlow 2.21 crashes the process (a
    segmentation fault in triton's CUDA bindings, which torch._dynamo imports; torch 2.14.1
    CUDA wheels, seen on a CPU-only host), while the other order works. On other backends,
    and once TensorFlow is imported, nothing (light names stay light)."""
    if "tensorflow" not in sys.modules and configured_backend() == "torch":
        with contextlib.suppress(ImportError):  # no torch: Keras' own error comes later
            importlib.import_module("keras")


def import_quietly(module_name: str):
    """`importlib.import_module(module_name)`, hiding TensorFlow's start-up block when
    `quiet_start_wanted()` (the device listing, where the CUDA probing happens, included);
    Keras' backend first (`backend_before_tensorflow`)."""
    if not quiet_start_wanted():
        backend_before_tensorflow()
        return importlib.import_module(module_name)
    # C++ notes after the start-up (XLA's "XLA service ... initialized" at the first compiled
    # step) stay hidden too (errors still show): TensorFlow reads the level once, at its first
    # message, so it is set before the import, and taken back if TensorFlow did not start
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    try:
        with stderr_fd_silenced():
            backend_before_tensorflow()
            module = importlib.import_module(module_name)
            if "tensorflow" in sys.modules:
                sys.modules["tensorflow"].config.list_physical_devices()
    finally:
        if "tensorflow" not in sys.modules:
            os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
    return module


TENSORFLOW_INSTALL = "pip install tensorflow"


def is_tensorflow(module_name: str | None) -> bool:
    """Whether `module_name` (a missing module's name) is TensorFlow or one of its parts."""
    return bool(module_name) and module_name.split(".")[0] == "tensorflow"


def tensorflow_needed(what: str) -> ModuleNotFoundError:
    """The one-line error for a TensorFlow-only name (`tf.data` pipelines, `tf.distribute`,
    training runs, SavedModel export) used where TensorFlow is not installed, e.g. a JAX-only
    or PyTorch-only environment, where the models, checkpoints and Keras' own features work."""
    return ModuleNotFoundError(
        f"{what} needs TensorFlow: {TENSORFLOW_INSTALL} (keras_vit's models, checkpoints and "
        "Keras' fit/predict run on the JAX and PyTorch backends without it).",
        name="tensorflow",
    )


def lazy_exports(package: str, exports: dict, namespace: dict):
    """`(__getattr__, __dir__)` for `package` whose public names live in other modules.

    Args:
        package: the package's `__name__`.
        exports: `{public name: defining module}`; a module name "" means the sub-module of
            that name (`keras_vit.checkpoints`).
        namespace: the package's `globals()`; each name is stored there once imported, so
            later look-ups skip `__getattr__`.

    A name whose module needs TensorFlow, where TensorFlow is not installed, raises the
    one-line `tensorflow_needed` error (a `ModuleNotFoundError` naming the name and the
    install command).
    """

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name = exports[name]
        try:
            if module_name == "":
                value = import_quietly(f"{package}.{name}")
            else:
                value = getattr(import_quietly(module_name), name)
        except ModuleNotFoundError as error:
            if not is_tensorflow(error.name):
                raise
            raise tensorflow_needed(f"{package}.{name}") from None
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
