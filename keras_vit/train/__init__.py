"""A training run: the paper's recipes (`training`), the plan of a run from its arguments
(`run_plan`), the run itself and its directory (`runs`, `run_lock`, `callbacks`,
`learning_curves`, `worker_restart`), and which split a run tests on (`selection`).

Public API (see docs/training.md and docs/data_and_recipes.md):

- recipes: `TrainConfig`, `FinetuneConfig`, `pretrain_optimizer`, `finetune_optimizer`,
  `warmup_schedule`, `WarmupSchedule`, `loss`, `SparseCrossentropyWithSmoothing`,
  `CheckedSparseCrossentropy`, `ViTAdamW` (defined in `keras_vit.runtime`);
- runs: `RunConfig`, `train`, `fit_run`, `evaluate`, `RunResult`, `load_result`,
  `read_config`, `read_run_config`, `is_complete`, `check_run_dir`, `RunDirError`,
  `ConfigError`, `AtomicBackupAndRestore`.

The names are imported on first use (PEP 562 module `__getattr__`), as the package root's are.
"""

from __future__ import annotations

from keras_vit._lazy import lazy_exports

# public name -> the module that defines it
_EXPORTS = {
    "CheckedSparseCrossentropy": "keras_vit.train.training",
    "FinetuneConfig": "keras_vit.train.training",
    "SparseCrossentropyWithSmoothing": "keras_vit.train.training",
    "TrainConfig": "keras_vit.train.training",
    "WarmupSchedule": "keras_vit.train.training",
    "finetune_optimizer": "keras_vit.train.training",
    "loss": "keras_vit.train.training",
    "pretrain_optimizer": "keras_vit.train.training",
    "warmup_schedule": "keras_vit.train.training",
    "ViTAdamW": "keras_vit.runtime.optimizers",
    "ConfigError": "keras_vit.train.run_plan",
    "RunConfig": "keras_vit.train.run_plan",
    "RunDirError": "keras_vit.train.runs",
    "RunResult": "keras_vit.train.runs",
    "check_run_dir": "keras_vit.train.runs",
    "evaluate": "keras_vit.train.runs",
    "fit_run": "keras_vit.train.runs",
    "is_complete": "keras_vit.train.runs",
    "load_result": "keras_vit.train.runs",
    "read_config": "keras_vit.train.runs",
    "read_run_config": "keras_vit.train.runs",
    "train": "keras_vit.train.runs",
    "AtomicBackupAndRestore": "keras_vit.train.callbacks",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
