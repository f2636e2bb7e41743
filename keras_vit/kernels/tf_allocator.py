"""TensorFlow's CPU memory allocator: keras_vit asks for its pooling (BFC) allocator.

By default TensorFlow allocates CPU tensors with the C library's `malloc`, which serves
large blocks with fresh `mmap`s and returns them on free. An XLA-compiled training step
allocates its temporaries as one large buffer per call, so every step touched hundreds of MB
of new pages: a Ti/16 float32 + XLA step at batch 16 took ~161,000 page faults and ~0.4 s of
kernel time out of 1.1 s on a 2-core AMD EPYC (docs/performance_log.md). TensorFlow's own
best-fit-with-coalescing allocator (`TF_CPU_ALLOCATOR_USE_BFC=true`, the allocator it uses
on GPUs) keeps the freed blocks for the next step: ~10 faults a step, 0.9 s.

TensorFlow reads the variable when it makes its CPU allocator, at the first CPU tensor, so
`import keras_vit` sets it (this module's `prefer_bfc_cpu_allocator`) before keras_vit
imports TensorFlow. A value the user set, `TF_CPU_ALLOCATOR_USE_BFC=false` included, is kept;
a process that made tensors before importing keras_vit keeps the allocator it has.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

ENV = "TF_CPU_ALLOCATOR_USE_BFC"


def prefer_bfc_cpu_allocator(environ: MutableMapping[str, str] | None = None) -> bool:
    """Sets `TF_CPU_ALLOCATOR_USE_BFC=true` in `environ` (default `os.environ`) unless it is
    set already; returns whether it set it."""
    environ = os.environ if environ is None else environ
    if ENV in environ:
        return False
    environ[ENV] = "true"
    return True
