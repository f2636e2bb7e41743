"""The benchmark harness' one entry: `python benchmarks/bench.py VERB ...`.

Verbs (each `--help`): run (a suite of peer races), profile, roof, products, figures, gpu.
Nothing is imported before the verb is chosen, so `gpu` stays free of TensorFlow.
"""

from __future__ import annotations

import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

VERBS = {
    "gpu": "harness.gpu",
}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in VERBS:
        print(f"usage: bench.py {{{','.join(VERBS)}}} ...\n{__doc__}", file=sys.stderr)
        return 2
    return importlib.import_module(VERBS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
