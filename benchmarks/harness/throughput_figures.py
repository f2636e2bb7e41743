"""throughput.py's measurements as figures (benchmarks/figures.py) and the tables that quote them.

One run of `throughput.py` (a variant, resolution, batch size and mode) becomes the values
`RUN_FRAMEWORK_SETTING_METRIC` of a results file, RUN being `b16_224_bs16_infer` (variant,
image size, batch size, mode) and SETTING `f32_xla`, `bf16_xla`, `bf16`, `f16_xla`, `f16`:

    img_s            median images/second over the timed repeats    "{:.2f}"
    range            slowest-fastest repeat                         "3.50-4.17"
    peak_rss_mib     peak resident memory of the point's process    "{:.0f}"
    model_gflops     analytic model FLOP rate                       "{:.1f}"
    of_roof          that rate over the run's best GEMM             "{:.0%}"
    ours_over_this   keras_vit at the same setting / this           "{:.2f}x"

and per framework `RUN_FRAMEWORK_best_setting`, `_best_img_s`, `_best_of_roof`,
`_best_ours_over_this` (keras_vit's best over this framework's best), per run `RUN_roof_gflops`,
`RUN_load_before` / `RUN_load_after` (1-, 5-, 15-minute load averages), `RUN_ours_over_best_peer`
(keras_vit's best over the fastest peer's best), `RUN_auto_setting` and `RUN_auto_of_fastest`
(what `keras_vit.runtime.distribute.choose_precision` picks, and its share of the fastest setting).

A results file holds many runs: writing one replaces that run's values and keeps the others;
`runs` says when, where and how each was measured. `throughput.py --results FILE` writes its
run; runs saved earlier with `--json` are imported with

    python benchmarks/bench.py results import b16_infer.json --results FILE

and `python benchmarks/bench.py results table FILE RUN` prints a Markdown table whose
cells are `<!--fig ...-->` markers, for a document that `figures.py --check` then guards.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import sys
from pathlib import Path

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.join(_HERE, ".."), os.path.join(_HERE, "..", "harness")]

import figures  # noqa: E402

POLICY_SLUGS = {"float32": "f32", "mixed_bfloat16": "bf16", "mixed_float16": "f16"}
FRAMEWORK_LABELS = {"keras_vit": "keras_vit", "keras_hub": "keras-hub", "vit_keras": "vit-keras"}
ABOUT = (
    "benchmarks/bench.py run: img/s, peak memory, model GFLOP/s and share of the GEMM roof "
    "for every framework x precision/compiler setting, one run per RUN prefix (see "
    "benchmarks/bench.py results for the keys); `runs` gives each run's date, machine, "
    "load and command"
)


def run_id(config: dict, mode: str) -> str:
    """`b16_224_bs16_infer` for ViT-B/16 at 224 pixels, batch 16, inference (a custom
    `--variant 8,32,64,4,2` becomes `8-32-64-4-2`); a run of keras_vit and only some peers
    (`--frameworks keras_vit,keras_hub`) gets their names: `s16_224_bs16_train_keras_hub`."""
    variant = re.sub(r"\W+", "-", config["variant"].replace("/", "").lower())
    rid = f"{variant}_{config['image_size']}_bs{config['batch_size']}_{mode}"
    frameworks = config.get("frameworks", list(FRAMEWORK_LABELS))
    peers = [f for f in frameworks if f != "keras_vit"]
    if "keras_vit" in frameworks and 0 < len(peers) < len(FRAMEWORK_LABELS) - 1:
        rid += "_" + "_".join(peers)
    return rid


def setting_slug(policy: str, xla: bool) -> str:
    """("mixed_bfloat16", True) -> "bf16_xla"."""
    return POLICY_SLUGS[policy] + ("_xla" if xla else "")


def record_setting(record: dict, config: dict) -> tuple[str, bool]:
    """(policy, xla) of a record; records of throughput.py before `--settings` (issue 8) have
    neither field: then the run's `dtype_policy` (default float32) and XLA unless `no_xla`."""
    policy = record.get("policy") or config.get("dtype_policy") or "float32"
    return policy, bool(record.get("xla", not config.get("no_xla", False)))


def _figure(value, fmt):
    return None if value is None else {"value": value, "format": fmt}


def point_values(record: dict) -> dict:
    """The figures of one (framework, setting) record of throughput.py's `results`."""
    rates = record["images_per_s_all"]
    return {
        "img_s": _figure(record["images_per_s"], "{:.2f}"),
        "range": f"{min(rates):.2f}-{max(rates):.2f}",
        "peak_rss_mib": _figure(record.get("peak_rss_mb"), "{:.0f}"),
        "model_gflops": _figure(record.get("model_gflops_per_s"), "{:.1f}"),
        "of_roof": _figure(record.get("utilisation"), "{:.0%}"),
        "ours_over_this": _figure(record.get("ours_over_this"), "{:.2f}x"),
    }


def mode_values(payload: dict, mode: str) -> dict:
    """Every figure of one mode of a throughput.py payload (its `--json` file), keyed without
    the run prefix."""
    records = [r for r in payload["results"] if r["mode"] == mode]
    if not records:
        raise ValueError(f"the payload has no {mode!r} results")
    values = {}
    best = {}
    for record in records:
        framework = record["framework"]
        policy, xla = record_setting(record, payload["config"])
        slug = setting_slug(policy, xla)
        for metric, figure in point_values(record).items():
            if figure is not None:
                values[f"{framework}_{slug}_{metric}"] = figure
        if framework not in best or record["images_per_s"] > best[framework]["images_per_s"]:
            best[framework] = record
    for framework, record in best.items():
        policy, xla = record_setting(record, payload["config"])
        values[f"{framework}_best_setting"] = f"{policy}+xla" if xla else policy
        values[f"{framework}_best_img_s"] = _figure(record["images_per_s"], "{:.2f}")
        if record.get("utilisation") is not None:
            values[f"{framework}_best_of_roof"] = _figure(record["utilisation"], "{:.0%}")
        if record.get("best_ours_over_this") is not None:
            values[f"{framework}_best_ours_over_this"] = _figure(
                record["best_ours_over_this"], "{:.2f}x"
            )
    peers = [r for f, r in best.items() if f != "keras_vit"]
    if "keras_vit" in best and peers:
        fastest_peer = max(r["images_per_s"] for r in peers)
        ratio = best["keras_vit"]["images_per_s"] / fastest_peer
        values["ours_over_best_peer"] = _figure(ratio, "{:.2f}x")
    if payload.get("roof_gflops"):
        values["roof_gflops"] = _figure(payload["roof_gflops"], "{:.1f}")
    machine = payload.get("machine", {})
    for when in ("before", "after"):
        loads = machine.get(f"load_average_{when}")
        if loads:
            values[f"load_{when}"] = " / ".join(f"{load:.2f}" for load in loads)
    auto = payload.get("auto", {}).get("modes", {}).get(mode)
    if auto:
        values["auto_setting"] = auto["setting"]
        values["auto_of_fastest"] = _figure(auto["of_fastest"], "{:.0%}")
    return values


def command_of(config: dict) -> str:
    """The throughput.py command line that a payload's `config` describes."""
    argv = ["python", "benchmarks/bench.py", "run", "--variant", config["variant"]]
    for name in ("image_size", "batch_size", "mode", "settings", "frameworks"):
        value = config.get(name)
        if isinstance(value, list):
            value = ",".join(value)
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    for name in ("steps", "repeats", "warmup", "gemm_sizes", "interleave"):
        if config.get(name) is not None:
            argv += [f"--{name.replace('_', '-')}", str(config[name])]
    if config.get("one_at_a_time"):
        argv.append("--one-at-a-time")
    return shlex.join(argv)


def run_record(payload: dict, *, date: str, command: str, notes: str = "") -> dict:
    """When, where and how one run was measured (the `runs` entry of a results file)."""
    machine = payload.get("machine", {})
    cpus = machine.get("cpus")
    return {
        "date": date,
        "machine": f"{machine.get('platform', 'unknown platform')}, {cpus} CPUs",
        "load_average_before": machine.get("load_average_before"),
        "load_average_after": machine.get("load_average_after"),
        "command": command,
        "notes": notes,
    }


def update_results(path, payload: dict, *, date: str, command: str, notes: str = "") -> list:
    """Writes the run(s) of `payload` into the results file `path` (created if missing):
    replaces the values of the same runs, keeps every other run. Returns the run ids."""
    path = Path(path)
    existing = json.loads(path.read_text()) if path.exists() else {}
    values = dict(existing.get("values", {}))
    runs = dict(existing.get("runs", {}))
    modes = sorted({r["mode"] for r in payload["results"]})
    if not modes:
        raise ValueError("the payload has no results (every worker failed?)")
    ids = []
    for mode in modes:
        rid = run_id(payload["config"], mode)
        values = {k: v for k, v in values.items() if not k.startswith(rid + "_")}
        values.update({f"{rid}_{k}": v for k, v in mode_values(payload, mode).items()})
        runs[rid] = run_record(payload, date=date, command=command, notes=notes)
        ids.append(rid)
    latest = max(runs.values(), key=lambda r: r["date"])
    figures.write_results(
        path,
        dict(sorted(values.items())),
        command="benchmarks/bench.py run --results FILE, one run per prefix (see `runs`)",
        about=ABOUT,
        measured={
            "date": latest["date"],
            "machine": latest["machine"],
            "load_average_1min_at_end": (latest["load_average_after"] or [None])[0],
            "notes": "the latest run's; every run's own date, load and command are in `runs`",
        },
        extra={"runs": dict(sorted(runs.items()))},
    )
    return ids


def import_json(json_path, results_path) -> list:
    """Imports a payload that `throughput.py --json` wrote earlier; its date is the file's
    modification date (the payload has none)."""
    json_path = Path(json_path)
    payload = json.loads(json_path.read_text())
    date = datetime.date.fromtimestamp(json_path.stat().st_mtime).isoformat()
    return update_results(
        results_path,
        payload,
        date=date,
        command=command_of(payload["config"]),
        notes=f"imported from {json_path.name} (throughput.py --json), dated by its mtime",
    )


def markdown_table(results_path, rid: str) -> str:
    """A Markdown table of one run: a row per framework, img/s per setting, then the best
    setting's share of the roof and keras_vit's best over it. Every cell is a figure marker,
    already rendered."""
    results_path = Path(results_path)
    values = json.loads(results_path.read_text())["values"]
    name = results_path.stem
    if not any(k.startswith(rid + "_") for k in values):
        raise ValueError(f"{results_path.name} has no run {rid!r}")
    frameworks = [f for f in FRAMEWORK_LABELS if f"{rid}_{f}_best_setting" in values]
    slugs = [
        slug
        for slug in ("f32_xla", "f32", "bf16_xla", "bf16", "f16_xla", "f16")
        if any(f"{rid}_{f}_{slug}_img_s" in values for f in frameworks)
    ]
    header = ["framework", *[f"{s} img/s" for s in slugs]]
    header += ["best setting", "best, of roof", "ours best/this best"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for framework in frameworks:
        cells = [FRAMEWORK_LABELS[framework]]
        for slug in slugs:
            key = f"{rid}_{framework}_{slug}_img_s"
            cells.append(_cell(name, key, values) if key in values else "-")
        for key in ("best_setting", "best_of_roof", "best_ours_over_this"):
            full = f"{rid}_{framework}_{key}"
            cells.append(_cell(name, full, values) if full in values else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(name, key, values):
    return f"<!--fig {name}.{key}-->{figures.render(values[key])}<!--/fig-->"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    imports = commands.add_parser("import", help="import throughput.py --json files")
    imports.add_argument("json_files", nargs="+", help="files throughput.py --json wrote")
    imports.add_argument("--results", required=True, help="the results file to write/update")
    table = commands.add_parser("table", help="print one run's Markdown table of markers")
    table.add_argument("results", help="a results file")
    table.add_argument("run", help="a run id, e.g. b16_224_bs16_infer")
    args = parser.parse_args(argv)
    if args.command == "import":
        for json_file in args.json_files:
            ids = import_json(json_file, args.results)
            print(f"{json_file}: runs {', '.join(ids)} -> {args.results}")
    else:
        print(markdown_table(args.results, args.run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
