"""The paper's ways of judging a model: few-shot linear probes (`fewshot`), a VTAB-style
transfer suite (`transfer_suite`), and its cost: FLOPs, GEMM roofs and timed steps
(`benchmarking`).

Public API (see docs/evaluation.md): `fewshot_evaluate`, `FewshotResult`, `run_suite`,
`TaskResult`, `mean_accuracy`. The names are imported on first use (PEP 562 module
`__getattr__`).
"""

from __future__ import annotations

from keras_vit._lazy import lazy_exports

# public name -> the module that defines it
_EXPORTS = {
    "FewshotResult": "keras_vit.evaluate.fewshot",
    "fewshot_evaluate": "keras_vit.evaluate.fewshot",
    "TaskResult": "keras_vit.evaluate.transfer_suite",
    "mean_accuracy": "keras_vit.evaluate.transfer_suite",
    "run_suite": "keras_vit.evaluate.transfer_suite",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
