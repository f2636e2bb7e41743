"""Registers keras_vit's layers with Keras' serialization as soon as both are imported.

`keras.models.load_model` resolves a custom layer by its registered name
(`"keras_vit>TransformerBlock"`, from `@keras.saving.register_keras_serializable`), so a
`.keras` file loads in a fresh process only once `keras_vit.layers` has run. Keras itself
imports only the modules of keras, keras_hub, keras_cv and keras_nlp by name
(`keras/src/saving/serialization_lib.py`, `_retrieve_class_or_fn`).

`import keras_vit` should not start TensorFlow (the `keras-vit` command answers `--help`
without it), and Keras cannot deserialize anything before it is imported itself. So
`register_layers_with_keras` imports `keras_vit.layers` now when Keras is already imported,
and otherwise right after Keras' own import has finished, through a one-shot finder on
`sys.meta_path` that wraps the loader of the top-level `keras` module. Either way, once both
packages are imported, every keras_vit layer is registered, whatever the order of imports.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

REGISTERING_MODULES = (
    "keras_vit.layers",
    "keras_vit.runtime.optimizers",
    "keras_vit.train.training",
    "keras_vit.train.schedules",
    "keras_vit.train.losses",
)
"""The modules whose import registers keras_vit's serializable classes: the layers, and
the optimizer, learning-rate schedule and loss that a `.keras` file of a training run holds."""


def _import_layers() -> None:
    for name in REGISTERING_MODULES:
        module = importlib.import_module(name)
        for public in getattr(module, "__all__", ()):  # a lazy package imports on access
            getattr(module, public)


class _ThenImportLayers(importlib.abc.Loader):
    """Runs Keras' own loader, then imports keras_vit's layers; gives the module back its
    original loader afterwards."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        _remove_hooks()
        module.__loader__ = module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        _import_layers()


class _AfterKerasImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: asked for `keras`, it asks the other finders for the spec and
    wraps that spec's loader. It stays in place until Keras is actually executed (a probe
    such as `importlib.util.find_spec("keras")`, which TensorFlow makes while it imports,
    loads nothing); the wrapped loader removes it."""

    def __init__(self):
        self._asking = False

    def find_spec(self, name, path=None, target=None):
        if name != "keras" or self._asking:
            return None
        self._asking = True  # the other finders' answer, not ours again
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._asking = False
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _ThenImportLayers(spec.loader)
        return spec


def _remove_hooks() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "_AfterKerasImport"]


def register_layers_with_keras() -> None:
    """Imports `keras_vit.layers` now if Keras is imported, else as soon as it is."""
    if "keras" in sys.modules:
        _remove_hooks()
        _import_layers()
    elif not any(type(f).__name__ == "_AfterKerasImport" for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterKerasImport())
