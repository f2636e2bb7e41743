"""A training run: the paper's recipes (`training`), the plan of a run from its arguments
(`run_plan`), the run itself (`runs`: `train`, `fit_run`), its directory and the files in it
(`run_directory`, `run_lock`, `callbacks`, `learning_curves`, `worker_restart`), the data
checks and epoch-ordered streams of a run (`fit_data`, `epoch_streams`), and which split a run
tests on (`selection`).

Public API (see docs/training.md and docs/data_and_recipes.md):

- recipes: `TrainConfig`, `FinetuneConfig`, `pretrain_optimizer`, `finetune_optimizer`,
  `warmup_schedule`, `WarmupSchedule`, `loss`, `SparseCrossentropyWithSmoothing`,
  `CheckedSparseCrossentropy`, `ViTAdamW` (defined in `keras_vit.runtime`);
- runs: `RunConfig`, `plan_run`, `train`, `fit_run`, `evaluate`, `evaluate_saved`,
  `RunResult`, `load_result`, `read_config`, `read_run_config`, `is_complete`,
  `check_run_dir`, `RunDirError`, `ConfigError`, `AtomicBackupAndRestore`.

The public names below are imported on first use (PEP 562), so that `import keras_vit.train`
does not start TensorFlow: `keras_vit.train.train(keras_vit.train.RunConfig(...), run_dir)`.
"""

from __future__ import annotations

from keras_vit._lazy import lazy_exports

# public name -> the module that defines it
_EXPORTS = {
    "RunDirError": "keras_vit.train.run_directory",
    "RunResult": "keras_vit.train.run_directory",
    "check_run_dir": "keras_vit.train.run_directory",
    "is_complete": "keras_vit.train.run_directory",
    "load_result": "keras_vit.train.run_directory",
    "read_config": "keras_vit.train.run_directory",
    "read_run_config": "keras_vit.train.run_directory",
    "ConfigError": "keras_vit.train.run_config",
    "RunConfig": "keras_vit.train.run_config",
    "RunPlan": "keras_vit.train.run_plan",
    "plan_run": "keras_vit.train.run_plan",
    "evaluate": "keras_vit.train.runs",
    "evaluate_saved": "keras_vit.train.runs",
    "fit_run": "keras_vit.train.runs",
    "train": "keras_vit.train.runs",
    "FinetuneConfig": "keras_vit.train.training",
    "TrainConfig": "keras_vit.train.training",
    "WarmupSchedule": "keras_vit.train.schedules",
    "finetune_optimizer": "keras_vit.train.schedules",
    "pretrain_optimizer": "keras_vit.train.schedules",
    "warmup_schedule": "keras_vit.train.schedules",
    "CheckedSparseCrossentropy": "keras_vit.train.losses",
    "SparseCrossentropyWithSmoothing": "keras_vit.train.losses",
    "loss": "keras_vit.train.losses",
    "ViTAdamW": "keras_vit.runtime.optimizers",
    "AtomicBackupAndRestore": "keras_vit.train.callbacks",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
