"""The config.json a training run writes beside its files (`keras_vit.train.runs`), as the modules
that read a run's `.npz` see it: the model arguments the run built its model with.

The release's `.npz` layout records no GroupNorm groups, and the default `keras-vit train`
model is a hybrid with 8; the run's config.json says which, so a run's `.npz` is read as the
model it holds. This module imports nothing else of keras_vit, so that the checkpoint readers
(`keras_vit.checkpoints`) and `keras_vit.model.from_source` above them can both use it.
"""

from __future__ import annotations

import json
import os

from keras_vit.spec.run_files import CONFIG_FILE as RUN_CONFIG_FILE


def kwargs_from_run_config(npz_path) -> dict | None:
    """The model arguments (`resolved.model_kwargs`) in the config.json of the run folder a
    `.npz` is in (a link to the file counts where it points), or None (no such file, or not
    a run's)."""
    config_path = os.path.join(os.path.dirname(os.path.realpath(npz_path)), RUN_CONFIG_FILE)
    try:
        with open(config_path, encoding="utf-8") as f:
            kwargs = json.load(f)["resolved"]["model_kwargs"]
    except (OSError, KeyError, ValueError, TypeError):
        return None
    return kwargs if isinstance(kwargs, dict) else None
