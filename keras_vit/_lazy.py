"""Public names imported on first use (PEP 562 module `__getattr__` and `__dir__`), shared by
the packages whose import must not start TensorFlow (`keras_vit`, `keras_vit.checkpoints`)."""

from __future__ import annotations

import importlib


def lazy_exports(package: str, exports: dict, namespace: dict):
    """`(__getattr__, __dir__)` for `package` whose public names live in other modules.

    Args:
        package: the package's `__name__`.
        exports: `{public name: defining module}`; a module name "" means the sub-module of
            that name (`keras_vit.checkpoints`).
        namespace: the package's `globals()`; each name is stored there once imported, so
            later look-ups skip `__getattr__`.
    """

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name = exports[name]
        if module_name == "":
            value = importlib.import_module(f"{package}.{name}")
        else:
            value = getattr(importlib.import_module(module_name), name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
