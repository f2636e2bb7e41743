"""The module paths keras_vit had before its modules moved into folders by role.

Until release 0.x the package was flat (`keras_vit.configs`, `keras_vit.runs`,
`keras_vit.training`, ...). The modules now live in `spec/`, `model/`, `runtime/`, `train/`
and `evaluate/`; code written against the flat paths keeps working: `import keras_vit.runs`,
`from keras_vit import training` and `from keras_vit.configs import resolve_model` give the
moved module itself (the same object, so patching either name patches both).

`.keras` files never named these paths: Keras finds keras_vit's classes by their registered
names (`"keras_vit>TransformerBlock"`), so files saved before the move load after it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    **{
        f"keras_vit.{name}": f"keras_vit.spec.{name}"
        for name in (
            "configs",
            "layer_names",
            "run_config_file",
            "kept_model",
            "resize_methods",
            "image_formats",
        )
    },
    **{
        f"keras_vit.{name}": f"keras_vit.model.{new_name}"
        for name, new_name in (
            ("builder", "builder"),
            ("models", "vit"),
            ("hybrid", "hybrid"),
            ("build_any", "from_kwargs"),
            ("model_source", "from_source"),
            ("finetune", "finetune"),
        )
    },
    **{
        f"keras_vit.{name}": f"keras_vit.runtime.{name}"
        for name in (
            "precision",
            "precision_probe",
            "optimizers",
            "distribute",
        )
    },
    **{
        f"keras_vit.{name}": f"keras_vit.train.{name}"
        for name in (
            "training",
            "run_plan",
            "runs",
            "run_lock",
            "callbacks",
            "learning_curves",
            "worker_restart",
        )
    },
    "keras_vit.test_selection": "keras_vit.train.selection",
    **{
        f"keras_vit.{name}": f"keras_vit.evaluate.{name}"
        for name in (
            "fewshot",
            "transfer_suite",
            "benchmarking",
        )
    },
}
"""Former module path -> where the module lives now."""


class _ToMovedModule(importlib.abc.Loader):
    """Gives the moved module itself for its former name."""

    def __init__(self, target: str):
        self._target = target

    def create_module(self, spec):
        module = importlib.import_module(self._target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module):
        """Runs nothing (the module ran under its own name); gives it back its own spec,
        which the import system replaced with the former name's."""
        module.__spec__ = self._own_spec


class _FormerPaths(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name not in MOVED:
            return None
        return importlib.util.spec_from_loader(name, _ToMovedModule(MOVED[name]))


def install() -> None:
    """Puts the finder of the former paths on `sys.meta_path` (once)."""
    if not any(type(f).__name__ == "_FormerPaths" for f in sys.meta_path):
        sys.meta_path.append(_FormerPaths())
