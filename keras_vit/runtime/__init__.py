"""How a model runs on this host: the dtype policy and compiler (`precision`; "auto" chosen by
`precision_auto`, from the measured `precision_probe`), the optimizer (`optimizers`) and the
distribution strategy (`distribute`). Backend-specific kernels live in `keras_vit.kernels`.

Public API (see docs/training.md): `resolve_strategy`, `STRATEGY_NAMES`,
`StrategyUnavailableError`, `MultiWorkerMirroredStrategy`, `per_replica_batch_size`,
`is_chief`, `check_variables_in_scope`, `read_tf_config`; `choose_precision`,
`PrecisionChoice`, `set_mixed_precision`, `with_dtype_policy`, `resolve_jit_compile`;
`ViTAdamW`; `jax_cluster` (several JAX processes: `jax_cluster.start()`,
`jax_cluster.is_chief()`); `model_parallel` (sharded kernels on JAX: `vit_model_parallel`,
`vit_layout_map`, `ModelParallelError`). The names are imported on first use (PEP 562 module
`__getattr__`).
"""

from __future__ import annotations

from keras_vit._lazy import lazy_exports

# public name -> the module that defines it
_EXPORTS = {
    "MultiWorkerMirroredStrategy": "keras_vit.runtime.distribute",
    "check_variables_in_scope": "keras_vit.runtime.distribute",
    "read_tf_config": "keras_vit.runtime.distribute",
    "STRATEGY_NAMES": "keras_vit.runtime.distribute",
    "StrategyUnavailableError": "keras_vit.runtime.distribute",
    "is_chief": "keras_vit.runtime.distribute",
    "per_replica_batch_size": "keras_vit.runtime.distribute",
    "resolve_strategy": "keras_vit.runtime.distribute",
    "PrecisionChoice": "keras_vit.runtime.precision",
    "choose_precision": "keras_vit.runtime.precision_auto",
    "resolve_jit_compile": "keras_vit.runtime.precision",
    "set_mixed_precision": "keras_vit.runtime.precision",
    "with_dtype_policy": "keras_vit.runtime.precision",
    "ViTAdamW": "keras_vit.runtime.optimizers",
    "jax_cluster": "",
    "model_parallel": "",
    "ModelParallelError": "keras_vit.runtime.model_parallel",
    "vit_layout_map": "keras_vit.runtime.model_parallel",
    "vit_model_parallel": "keras_vit.runtime.model_parallel",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
