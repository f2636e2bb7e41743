"""The benchmark harness' one entry: `python benchmarks/bench.py VERB ...` (`VERB --help`).

    run        peers side by side at every setting, one workload (harness/throughput.py)
    targets    the CPU targets' suite of workloads, every point in its own process
    in-process keras_vit and the peers in one process, rotated rounds
    scaling    a training step as tokens and batch grow
    ablation   the class-token-only last block against a full one
    profile    where a step's time goes (`--peer timm` for timm's step)
    products   every matrix product of a step, timed alone per engine
    roof       the GEMM roof alone (TensorFlow and, where it imports, torch)
    results    throughput runs as figures files (import, table)
    figures    the documents' figures against results/*.json (--check, --update)
    gpu        the GPU race (keras_vit on Keras JAX and PyTorch, timm); no TensorFlow

Nothing is imported before the verb is chosen, so `gpu` stays free of TensorFlow. The
peers are one table (harness/peers.py); studies that are not speed races are scripts in
benchmarks/studies/.
"""

from __future__ import annotations

import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "harness")]

VERBS = {
    "run": "throughput",
    "targets": "targets",
    "in-process": "in_process",
    "scaling": "scaling",
    "ablation": "ablation",
    "profile": "profile_step",
    "products": "products",
    "roof": "common",
    "results": "throughput_figures",
    "figures": "figures",
    "gpu": "gpu",
}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in VERBS:
        print(f"usage: bench.py VERB ...\n{__doc__}", file=sys.stderr)
        return 2
    verb, argv = argv[0], argv[1:]
    if verb == "profile" and argv[:2] == ["--peer", "timm"]:
        verb, argv = "profile_timm_step", argv[2:]
    module = importlib.import_module(VERBS.get(verb, verb))
    return (module.roof_main if verb == "roof" else module.main)(argv)


if __name__ == "__main__":
    sys.exit(main())
