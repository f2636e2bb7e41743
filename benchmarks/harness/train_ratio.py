"""`bench.py train-ratio`: the default `keras-vit train` on TensorFlow and on JAX, alternated in
one run (TF, JAX, TF, JAX, ...), each from a cold start with a fresh precision-probe cache:
wall and CPU time of the whole command and the test accuracy of its kept model
(metrics.json), then the JAX/TensorFlow wall-time ratio of each round and their median.

On a shared host compare only within one run; the results file records the load average and
the spread of the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

BACKENDS = ("tensorflow", "jax")
DEFAULT_RESULTS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "results",
    "backend_train_ratio.json",
)


def train_command(run_dir: str, epochs: int | None) -> list[str]:
    """argv of one `keras-vit train` with the recipe's defaults (`epochs` None: its 30)."""
    command = [sys.executable, "-m", "keras_vit.cli.main", "train", "--run-dir", run_dir]
    command += ["--log-every", "epoch"]
    return command + (["--epochs", str(epochs)] if epochs else [])


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_one(backend: str, folder: str, epochs: int | None) -> dict:
    """One cold `keras-vit train` under KERAS_BACKEND=`backend`: wall_s, cpu_s, accuracy."""
    run_dir = os.path.join(folder, "run")
    env = dict(os.environ, KERAS_BACKEND=backend, KERAS_VIT_CACHE_DIR=os.path.join(folder, "cache"))
    cpu, start = _children_cpu_s(), time.perf_counter()
    done = subprocess.run(train_command(run_dir, epochs), env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - start, _children_cpu_s() - cpu
    if done.returncode:
        raise RuntimeError(f"{backend} train failed ({done.returncode}):\n{done.stderr[-3000:]}")
    with open(os.path.join(run_dir, "metrics.json")) as handle:
        accuracy = json.load(handle)["test"]["accuracy"]
    return {"backend": backend, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "accuracy": accuracy, "load_average_1min": os.getloadavg()[0]}  # fmt: skip


def summarise(runs: list[dict]) -> dict:
    """Per backend the median wall/CPU time and accuracy; per round (one run of each backend,
    in order) the JAX/TensorFlow wall ratio; the median ratio with its range.

    Raises:
        ValueError: a backend missing from a round.
    """
    rounds = [runs[index : index + len(BACKENDS)] for index in range(0, len(runs), 2)]
    ratios = []
    for pair in rounds:
        by_backend = {run["backend"]: run for run in pair}
        if set(by_backend) != set(BACKENDS):
            got = sorted(by_backend)
            raise ValueError(f"a round needs one run of each of {BACKENDS}; got {got}")
        ratios.append(by_backend["jax"]["wall_s"] / by_backend["tensorflow"]["wall_s"])
    summary = {"ratio": statistics.median(ratios), "ratio_min": min(ratios),
               "ratio_max": max(ratios), "rounds": len(rounds)}  # fmt: skip
    for backend in BACKENDS:
        mine = [run for run in runs if run["backend"] == backend]
        for key in ("wall_s", "cpu_s", "accuracy"):
            summary[f"{backend}_{key}"] = statistics.median(run[key] for run in mine)
    return summary


FORMATS = {
    "ratio": "{:.2f}",
    "ratio_min": "{:.2f}",
    "ratio_max": "{:.2f}",
    "rounds": "{}",
    **{f"{backend}_{key}": "{:.0f}" for backend in BACKENDS for key in ("wall_s", "cpu_s")},
    **{f"{backend}_accuracy": "{:.2%}" for backend in BACKENDS},
}


def _write(args, argv, runs) -> None:
    from benchmarks import figures

    summary = summarise(runs)
    values = {key: {"value": value, "format": FORMATS[key]} for key, value in summary.items()}
    values["epochs"] = args.epochs or 30
    command = " ".join(["python -m benchmarks.bench train-ratio", *(argv or sys.argv[1:])])
    figures.write_results(
        args.results,
        values,
        command=command,
        about=__doc__.split("\n\n")[0].replace("\n", " "),
        notes=args.notes,
        extra={"runs": runs},
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench.py train-ratio", description=__doc__)
    parser.add_argument("--rounds", type=int, default=2, help="TF+JAX pairs (default 2)")
    parser.add_argument("--epochs", type=int, help="epochs per run (default: the recipe's 30)")
    parser.add_argument("--results", default=DEFAULT_RESULTS, help="results file to write")
    parser.add_argument("--notes", default="", help="words for the results file's notes")
    args = parser.parse_args(argv)

    runs = []
    with tempfile.TemporaryDirectory(prefix="train_ratio_") as root:
        for index in range(args.rounds * len(BACKENDS)):
            backend = BACKENDS[index % len(BACKENDS)]
            runs.append(time_one(backend, os.path.join(root, str(index)), args.epochs))
            print(json.dumps(runs[-1]), flush=True)
            if index % len(BACKENDS) == len(BACKENDS) - 1:  # a round complete: the file so far
                _write(args, argv, runs)
    print(json.dumps(summarise(runs), indent=1))
    return 0
