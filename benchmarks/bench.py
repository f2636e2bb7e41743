"""The benchmark harness' one entry: `python -m benchmarks.bench VERB ...` from the repository
root (`VERB --help`).

    run        peers side by side at every setting, one workload, a worker per point
    targets    the CPU targets' workloads, every point in its own process
    in-process the same points timed in one process, rotated rounds
    scaling    a training step as tokens and batch grow
    ablation   the class-token-only last block against a full one
    roof       the GEMM roof alone (TensorFlow and, where it imports, torch)
    profile    where a step's time goes (`--peer timm` for timm's step)
    products   every matrix product of a step, timed alone per engine
    results    `run`'s payloads as figures files (import, table)
    figures    the documents' figures against results/*.json (--check, --update)
    lora       LoRA ranks against full fine-tuning, MNIST -> digits (studies/lora_ranks.py)
    serving    CPU serving of every export format, batch 1 and 32 (studies/serving_cpu.py)
    gpu        the GPU race (keras_vit on Keras JAX and PyTorch, timm); no TensorFlow
    train-ratio the default `keras-vit train` on TensorFlow and JAX, alternated: JAX/TF wall time
    model-parallel  per-device memory of keras_vit's ModelParallel on JAX (XLA's analysis)
    suite      a suite of suites.toml: each line's command, or with --quick its quick variant

The races (run ... roof) are presets of one loop (harness/race.py) over one table of peers
(harness/peers.py). Nothing is imported before the verb is chosen (`gpu` stays free of
TensorFlow). Studies that are not speed races are modules of benchmarks/studies/
(`python -m benchmarks.studies.NAME`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

RACES = ("run", "targets", "in-process", "scaling", "ablation", "roof")
VERBS = {**dict.fromkeys(RACES, "harness.race"), "profile": "harness.step_profile",
         "products": "harness.products", "results": "figures", "figures": "figures",
         "gpu": "harness.gpu", "lora": "studies.lora_ranks",
         "serving": "studies.serving_cpu", "train-ratio": "harness.train_ratio",
         "model-parallel": "studies.model_parallel_memory"}  # fmt: skip


def suite_commands(name: str, quick: bool, only=None) -> list[tuple[str, list[str]]]:
    """[(workload, argv)] of suite `name` of suites.toml (each a bench.py verb or a studies/
    script); ValueError naming an unknown suite or workload, with the known ones."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    with open(os.path.join(HERE, "suites.toml"), "rb") as handle:
        suites = tomllib.load(handle)
    if name not in suites:
        raise ValueError(f"unknown suite {name!r}; suites.toml has {sorted(suites)}")
    lines = suites[name]
    unknown = sorted(set(only or ()) - set(lines))
    if unknown:
        raise ValueError(f"suite {name!r} has no workload {unknown[0]!r}; it has {sorted(lines)}")
    commands = []
    for workload, line in lines.items():
        words = shlex.split(line["quick" if quick else "command"])
        study = words.pop(0) if words[0].endswith(".py") else None  # a study, or a verb
        module = "benchmarks." + (study[: -len(".py")].replace("/", ".") if study else "bench")
        if not only or workload in only:
            commands.append((workload, [sys.executable, "-m", module, *words]))
    return commands


def suite_env() -> dict:
    """This environment with the repository root first on PYTHONPATH (each line's module)."""
    path = os.pathsep.join(filter(None, (ROOT, os.environ.get("PYTHONPATH"))))
    return dict(os.environ, PYTHONPATH=path)


def suite_main(argv) -> int:
    parser = argparse.ArgumentParser(prog="bench.py suite", description="runs a suite")
    parser.add_argument("name", help="a table of suites.toml (figures, targets, gpu)")
    parser.add_argument("--quick", action="store_true", help="each line's quick variant")
    parser.add_argument("--only", help="comma-separated workloads of the suite")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    try:
        commands = suite_commands(args.name, args.quick, args.only and args.only.split(","))
    except ValueError as error:
        parser.error(str(error))
    failed = []
    for workload, command in commands:
        print(f"{workload}: {shlex.join(command)}", flush=True)
        if not args.dry_run and subprocess.run(command, cwd=ROOT, env=suite_env()).returncode:
            failed.append(workload)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["suite"]:
        return suite_main(argv[1:])
    if not argv or argv[0] not in VERBS:
        print(f"usage: bench.py VERB ...\n{__doc__}", file=sys.stderr)
        return 2
    verb, argv = argv[0], argv[1:]
    module = importlib.import_module(f"benchmarks.{VERBS[verb]}")
    shared = VERBS[verb] in ("harness.race", "figures")  # a module of several verbs
    return module.main(argv, verb) if shared else module.main(argv)


if __name__ == "__main__":
    sys.exit(main())
