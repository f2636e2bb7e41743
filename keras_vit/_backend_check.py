"""The Keras backend keras_vit is asked to run on, checked before anything else is imported.

Keras 3 reads its backend from `KERAS_BACKEND` (else the "backend" of `keras.json`) and, given
a name it does not know (`Jax`) or one whose package is missing (`torch` without PyTorch),
fails deep inside its own import with a 30-50-line traceback. keras_vit runs on three of
Keras' backends, `tensorflow`, `jax` and `torch`; `check_backend()` names the problem and the
install command in one line instead, without importing Keras, TensorFlow, JAX or PyTorch (it
only looks the packages up: `importlib.util.find_spec`).

`import keras_vit` raises `BackendError` (an `ImportError`); the `keras-vit` command prints
the same line on stderr and exits with code 2.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import sys

from keras_vit._lazy import configured_backend

# backend name -> (the packages it needs beyond keras_vit's own requirements, the name a user
# knows it by, the extra that installs them); TensorFlow is one of those requirements
BACKENDS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "tensorflow": ((), "TensorFlow", ""),
    "jax": (("jax", "jaxlib"), "JAX", "jax"),
    "torch": (("torch",), "PyTorch", "torch"),
}

CLI_EXIT_CODE = 2


class BackendError(ImportError):
    """The configured Keras backend is not one keras_vit runs on, or its package is missing."""


def install_command(backend: str) -> str:
    """The pip command that brings `backend`'s package with keras_vit, e.g.
    `pip install ".[jax]"` (run from the keras_vit checkout, as the README's Quick start)."""
    extra = BACKENDS[backend][2]
    return f'pip install ".[{extra}]"' if extra else 'pip install "."'


def backend_source() -> str:
    """Where `configured_backend()` read its value: "KERAS_BACKEND" or the keras.json path."""
    if os.environ.get("KERAS_BACKEND"):
        return "KERAS_BACKEND"
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return f"the 'backend' of {os.path.join(home, 'keras.json')}"


def backend_problem(backend: str | None = None) -> str | None:
    """One line saying why `backend` (default: the configured one) cannot run keras_vit, or
    None when it can: an unknown name (with the closest known one, e.g. 'Jax' -> 'jax') or a
    backend whose package is not installed (with the install command)."""
    backend = configured_backend() if backend is None else backend
    where = backend_source()
    known = ", ".join(BACKENDS)
    if backend not in BACKENDS:
        close = difflib.get_close_matches(backend.lower(), list(BACKENDS), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return (
            f"{where}={backend!r} is not a backend keras_vit runs on{hint}; use one of {known} "
            f"(names are lower-case), e.g. KERAS_BACKEND=jax after {install_command('jax')}"
        )
    packages, label, _ = BACKENDS[backend]
    missing = [name for name in packages if importlib.util.find_spec(name) is None]
    if missing:
        return (
            f"{where}={backend!r} needs {label}, which is not installed ({missing[0]!r} not "
            f"found); install it with: {install_command(backend)} (from the keras_vit checkout)"
        )
    return None


def check_backend() -> None:
    """Raises `BackendError` with `backend_problem()`'s line when there is one."""
    problem = backend_problem()
    if problem is not None:
        raise BackendError(problem)


def started_as_cli() -> bool:
    """True in a process started as the `keras-vit` command (its console script, or
    `python -m keras_vit.cli.main`)."""
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    if script.removesuffix(".exe").removesuffix("-script.py") == "keras-vit":
        return True
    argv = list(getattr(sys, "orig_argv", []))
    return any(
        a == "-m" and b.startswith("keras_vit.cli") for a, b in zip(argv, argv[1:], strict=False)
    )


def check_backend_on_import() -> None:
    """`check_backend()` for `import keras_vit`: in the `keras-vit` command the line goes to
    stderr and the process exits with code 2 (no traceback); elsewhere `BackendError`."""
    problem = backend_problem()
    if problem is None:
        return
    if started_as_cli():
        # the command's one error line, written here because `import keras_vit` runs this
        # before the CLI (and its logging) exists
        sys.stderr.write(f"keras-vit: error: {problem}\n")
        raise SystemExit(CLI_EXIT_CODE)
    raise BackendError(problem)
