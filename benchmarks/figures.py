"""Measured figures in README.md and docs/ come from the JSON files the benchmarks write.

A figure sits between two HTML comments: `<!--fig train_mnist.held_out_accuracy-->94.3%<!--/fig-->`
is the value `held_out_accuracy` of `benchmarks/results/train_mnist.json` as its `format` renders
it. `figures --check` lists stale figures (exit 1), `--update` rewrites the documents; `results`
turns `bench.py run` payloads into such values (`import`) and prints a run's table (`table`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import re
import shlex
import sys
from pathlib import Path

from benchmarks import device_tables
from benchmarks.harness import common

ROOT = Path(__file__).resolve().parents[1]

RESULTS_DIR = ROOT / "benchmarks" / "results"
DOCUMENTS = ("README.md", "docs/*.md", "benchmarks/README.md")
FIGURE = re.compile(r"<!--fig (?P<file>[\w-]+)\.(?P<key>[\w-]+)-->(?P<text>.*?)<!--/fig-->")
RESULTS_PATH = re.compile(r"(?<![\w/])(?:benchmarks/)?results/(?:runs/)?[a-z][\w.-]*\.(?:json|md)")


def render(entry) -> str:
    """The text of one value: `{"value": v, "format": "{:.1%}"}`, or a plain number/str."""
    if isinstance(entry, dict):
        return entry.get("format", "{}").format(entry["value"])
    return str(entry)


def load_results(name: str, results_dir: Path = RESULTS_DIR) -> dict:
    return json.loads((Path(results_dir) / f"{name}.json").read_text())


def document_paths(root: Path = ROOT) -> list[Path]:
    return [path for pattern in DOCUMENTS for path in sorted(root.glob(pattern))]


def missing_paths(text: str, results_dir: Path = RESULTS_DIR) -> list[str]:
    """The results files (`benchmarks/results/...json`/`.md`) a document names that do not exist."""
    missing = []
    for match in RESULTS_PATH.finditer(text):
        relative = match[0].removeprefix("benchmarks/").removeprefix("results/")
        if not (Path(results_dir) / relative).exists():
            line = text.count("\n", 0, match.start()) + 1
            missing.append(f"line {line}: no results file {match[0]}")
    return missing


def check_text(text: str, results_dir: Path = RESULTS_DIR) -> list[str]:
    """Problems with one document's figures: unknown file or key, text not the rendered value;
    its device tables not their rendering (`device_tables`); results files it names missing."""
    problems, cache = device_tables.check_text(text, results_dir), {}
    for match in FIGURE.finditer(text):
        name, key, shown = match["file"], match["key"], match["text"]
        line = text.count("\n", 0, match.start()) + 1
        try:
            values = cache.setdefault(name, load_results(name, results_dir)).get("values", {})
        except FileNotFoundError:
            problems.append(f"line {line}: no results file {name}.json")
            continue
        if key not in values:
            problems.append(f"line {line}: {name}.json has no value {key!r}")
        elif shown != render(values[key]):
            expected = render(values[key])
            problems.append(f"line {line}: {name}.{key} shows {shown!r}, the JSON {expected!r}")
    return problems + missing_paths(text, results_dir)


def update_text(text: str, results_dir: Path = RESULTS_DIR) -> str:
    """The document with every figure and device table re-rendered from the JSON."""
    cache = {}

    def replace(match):
        results = cache.setdefault(match["file"], load_results(match["file"], results_dir))
        value = render(results["values"][match["key"]])
        return f"<!--fig {match['file']}.{match['key']}-->{value}<!--/fig-->"

    return device_tables.update_text(FIGURE.sub(replace, text), results_dir)


def write_results(path, values, *, command, about, notes="", measured=None, extra=None):
    """Writes a results file atomically: the values with their formats, when, where and how
    measured (default: today, this machine, the 1-minute load now), `extra` entries."""
    if measured is None:
        host, load = common.host_record(), common.load_average()
        machine = f"{platform.system()} {platform.machine()}, {host['cores']} CPUs ({host['cpu']})"
        measured = {"date": datetime.date.today().isoformat(), "machine": machine,
                    "load_average_1min_at_end": load and load[0], "notes": notes}  # fmt: skip
    payload = {"about": about, "command": command, "measured": measured, **(extra or {})}
    common.write_json(path, {**payload, "values": values})


# ---- `bench.py run` payloads as values: RUN_FRAMEWORK_SETTING_METRIC, per run ------------

POLICY_SLUGS = {"float32": "f32", "mixed_bfloat16": "bf16", "mixed_float16": "f16"}
FRAMEWORK_LABELS = {"keras_vit": "keras_vit", "keras_hub": "keras-hub", "vit_keras": "vit-keras"}
FORMATS = {"img_s": "{:.2f}", "peak_rss_mib": "{:.0f}", "model_gflops": "{:.1f}",
           "of_roof": "{:.0%}", "ours_over_this": "{:.2f}x"}  # fmt: skip
FIELDS = {"img_s": "images_per_s", "peak_rss_mib": "peak_rss_mb", "of_roof": "utilisation",
          "model_gflops": "model_gflops_per_s", "ours_over_this": "ours_over_this"}  # fmt: skip
ABOUT = ("benchmarks/bench.py run: img/s, peak memory, model GFLOP/s and share of the GEMM roof "
         "for every framework x precision/compiler setting, one run per RUN prefix (see "
         "benchmarks/bench.py results for the keys); `runs` gives each run's date, machine, "
         "load and command")  # fmt: skip


def run_id(config: dict, mode: str) -> str:
    """`b16_224_bs16_infer` (ViT-B/16, 224 px, batch 16; `--model 8,32,64,4,2`: `8-32-64-4-2`);
    keras_vit against only some peers adds their names: `s16_224_bs16_train_keras_hub`."""
    variant = re.sub(r"\W+", "-", config["variant"].replace("/", "").lower())
    rid = f"{variant}_{config['image_size']}_bs{config['batch_size']}_{mode}"
    frameworks = config.get("frameworks", list(FRAMEWORK_LABELS))
    peers = [f for f in frameworks if f != "keras_vit"]
    if "keras_vit" in frameworks and 0 < len(peers) < len(FRAMEWORK_LABELS) - 1:
        rid += "_" + "_".join(peers)
    return rid


def record_slug(record: dict, config: dict) -> tuple[str, str]:
    """(slug, setting) of a record: ("bf16_xla", "mixed_bfloat16+xla"); records from before
    `--settings` take the run's `dtype_policy` (float32) and XLA unless `no_xla`."""
    policy = record.get("policy") or config.get("dtype_policy") or "float32"
    xla = bool(record.get("xla", not config.get("no_xla", False)))
    return POLICY_SLUGS[policy] + ("_xla" if xla else ""), policy + ("+xla" if xla else "")


def fig(value, form: str = "{}") -> dict | None:
    """One value of a results file: `value` and the format the documents render it with."""
    return None if value is None else {"value": value, "format": form}


def mode_values(payload: dict, mode: str) -> dict:
    """Every figure of one mode of a `run --json` payload, keyed without the run prefix."""
    records = [r for r in payload["results"] if r["mode"] == mode]
    if not records:
        raise ValueError(f"the payload has no {mode!r} results")
    values, best = {}, {}
    for record in records:
        framework, (slug, _) = record["framework"], record_slug(record, payload["config"])
        rates = record["images_per_s_all"]
        values[f"{framework}_{slug}_range"] = f"{min(rates):.2f}-{max(rates):.2f}"
        for metric, fmt in FORMATS.items():
            if record.get(FIELDS[metric]) is not None:
                values[f"{framework}_{slug}_{metric}"] = fig(record[FIELDS[metric]], fmt)
        if framework not in best or record["images_per_s"] > best[framework]["images_per_s"]:
            best[framework] = record
    for framework, record in best.items():
        values[f"{framework}_best_setting"] = record_slug(record, payload["config"])[1]
        for metric, field in (("img_s", "images_per_s"), ("of_roof", "utilisation"),
                              ("ours_over_this", "best_ours_over_this")):  # fmt: skip
            if record.get(field) is not None:
                values[f"{framework}_best_{metric}"] = fig(record[field], FORMATS[metric])
    peers = [r["images_per_s"] for f, r in best.items() if f != "keras_vit"]
    if "keras_vit" in best and peers:
        ratio = best["keras_vit"]["images_per_s"] / max(peers)
        values["ours_over_best_peer"] = fig(ratio, "{:.2f}x")
    if payload.get("roof_gflops"):
        values["roof_gflops"] = fig(payload["roof_gflops"], "{:.1f}")
    for when in ("before", "after"):
        loads = payload.get("machine", {}).get(f"load_average_{when}")
        if loads:
            values[f"load_{when}"] = " / ".join(f"{load:.2f}" for load in loads)
    auto = payload.get("auto", {}).get("modes", {}).get(mode)
    if auto:
        values["auto_setting"] = auto["setting"]
        values["auto_of_fastest"] = fig(auto["of_fastest"], "{:.0%}")
    return values


def command_of(config: dict) -> str:
    """The `bench.py run` command line that a payload's `config` describes."""
    argv = ["python", "-m", "benchmarks.bench", "run", "--model", config["variant"]]
    for name in ("image_size", "batch_size", "mode", "settings", "frameworks", "steps",
                 "repeats", "warmup", "gemm_sizes", "interleave"):  # fmt: skip
        value = config.get(name)
        if value is not None:
            value = ",".join(value) if isinstance(value, list) else value
            argv += [f"--{name.replace('_', '-')}", str(value)]
    if "timm" in config.get("frameworks", ()) and config.get("timm_settings"):
        argv += ["--timm-settings", config["timm_settings"]]
    return shlex.join(argv + ["--one-at-a-time"] * bool(config.get("one_at_a_time")))


def update_results(path, payload: dict, *, date: str, command: str, notes: str = "") -> list:
    """Writes the run(s) of `payload` into the results file `path` (created if missing),
    replacing the same runs' values and keeping every other run's. Returns the run ids."""
    path = Path(path)
    existing = json.loads(path.read_text()) if path.exists() else {}
    values, runs = dict(existing.get("values", {})), dict(existing.get("runs", {}))
    modes = sorted({r["mode"] for r in payload["results"]})
    if not modes:
        raise ValueError("the payload has no results (every worker failed?)")
    machine = payload.get("machine", {})
    ids = [run_id(payload["config"], mode) for mode in modes]
    for rid, mode in zip(ids, modes, strict=True):
        values = {k: v for k, v in values.items() if not k.startswith(rid + "_")}
        values.update({f"{rid}_{k}": v for k, v in mode_values(payload, mode).items()})
        runs[rid] = {
            "date": date,
            "machine": f"{machine.get('platform', 'unknown platform')}, {machine.get('cpus')} CPUs",
            "load_average_before": machine.get("load_average_before"),
            "load_average_after": machine.get("load_average_after"),
            "command": command, "notes": notes,
        }  # fmt: skip
    latest = max(runs.values(), key=lambda r: r["date"])
    measured = {
        "date": latest["date"], "machine": latest["machine"],
        "load_average_1min_at_end": (latest["load_average_after"] or [None])[0],
        "notes": "the latest run's; every run's own date, load and command are in `runs`",
    }  # fmt: skip
    write_results(
        path, dict(sorted(values.items())), about=ABOUT, measured=measured,
        command="benchmarks/bench.py run --results FILE, one run per prefix (see `runs`)",
        extra={"runs": dict(sorted(runs.items()))},
    )  # fmt: skip
    return ids


def import_json(json_path, results_path) -> list:
    """Imports a payload that `run --json` wrote, dated by the file's modification time."""
    json_path = Path(json_path)
    payload = json.loads(json_path.read_text())
    date = datetime.date.fromtimestamp(json_path.stat().st_mtime).isoformat()
    notes = f"imported from {json_path.name} (bench.py run --json), dated by its mtime"
    command = command_of(payload["config"])
    return update_results(results_path, payload, date=date, command=command, notes=notes)


def markdown_table(results_path, rid: str) -> str:
    """One run's Markdown table: a row per framework, img/s per setting, the best setting's
    share of the roof and keras_vit's best over it; every cell a figure marker."""
    results_path = Path(results_path)
    values, name = json.loads(results_path.read_text())["values"], results_path.stem
    if not any(k.startswith(rid + "_") for k in values):
        raise ValueError(f"{results_path.name} has no run {rid!r}")
    frameworks = [f for f in FRAMEWORK_LABELS if f"{rid}_{f}_best_setting" in values]
    slugs = [s + x for s in ("f32", "bf16", "f16") for x in ("_xla", "")]
    slugs = [s for s in slugs if any(f"{rid}_{f}_{s}_img_s" in values for f in frameworks)]
    header = ["framework", *[f"{s} img/s" for s in slugs], "best setting", "best, of roof",
              "ours best/this best"]  # fmt: skip
    rows = []
    for framework in frameworks:
        keys = [f"{slug}_img_s" for slug in slugs]
        keys = [f"{rid}_{framework}_{key}" for key in (*keys, "best_setting", "best_of_roof",
                                                       "best_ours_over_this")]  # fmt: skip
        cells = [f"<!--fig {name}.{key}-->{render(values[key])}<!--/fig-->" if key in values
                 else "-" for key in keys]  # fmt: skip
        rows.append([FRAMEWORK_LABELS[framework], *cells])
    return common.markdown(header, rows)


def results_main(argv) -> int:
    """`bench.py results import F.json... --results FILE` / `results table FILE RUN`."""
    parser = argparse.ArgumentParser(prog="bench.py results", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    imports = commands.add_parser("import", help="import `run --json` files")
    imports.add_argument("json_files", nargs="+", help="files `run --json` wrote")
    imports.add_argument("--results", required=True, help="the results file to write/update")
    table = commands.add_parser("table", help="print one run's Markdown table of markers")
    table.add_argument("results", help="a results file")
    table.add_argument("run", help="a run id, e.g. b16_224_bs16_infer")
    args = parser.parse_args(argv)
    try:
        if args.command == "table":
            print(markdown_table(args.results, args.run))
        for json_file in args.json_files if args.command == "import" else ():
            ids = import_json(json_file, args.results)
            print(f"{json_file}: runs {', '.join(ids)} -> {args.results}")
    except (OSError, ValueError) as error:  # no such file, not JSON, no such run
        parser.error(str(error))
    return 0


def main(argv=None, verb="figures") -> int:
    if verb == "results":
        return results_main(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--check", action="store_true", help="list stale figures, exit 1 if any")
    group.add_argument("--update", action="store_true", help="rewrite documents from the JSON")
    args = parser.parse_args(argv)
    stale = 0
    for path in document_paths():
        text = path.read_text()
        if args.update and update_text(text) != text:
            path.write_text(update_text(text))
            print(f"updated {path.relative_to(ROOT)}")
        for problem in [] if args.update else check_text(text):
            print(f"{path.relative_to(ROOT)}: {problem}")
            stale += 1
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
