"""Measured figures in README.md and docs/ come from the JSON files the benchmarks write.

A figure in a document sits between two HTML comments (invisible once rendered):
`<!--fig train_mnist.held_out_accuracy-->94.3%<!--/fig-->` names the value
`held_out_accuracy` of `benchmarks/results/train_mnist.json`, and the text must be that
value as its `format` renders it (`"{:.1%}".format(0.943)`). Each results file also says
when, where and how its figures were measured (`measured`, `command`). A benchmark writes
its file with `write_results`; `python benchmarks/figures.py --check` lists every stale
figure (exit 1), `--update` rewrites the documents from the JSON.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
DOCUMENTS = ("README.md", "docs/*.md")
FIGURE = re.compile(r"<!--fig (?P<file>[\w-]+)\.(?P<key>[\w-]+)-->(?P<text>.*?)<!--/fig-->")


def render(entry) -> str:
    """The text of one value: `{"value": v, "format": "{:.1%}"}`, or a plain number/str."""
    if isinstance(entry, dict):
        return entry.get("format", "{}").format(entry["value"])
    return str(entry)


def load_results(name: str, results_dir: Path = RESULTS_DIR) -> dict:
    return json.loads((Path(results_dir) / f"{name}.json").read_text())


def document_paths(root: Path = ROOT) -> list[Path]:
    return [path for pattern in DOCUMENTS for path in sorted(root.glob(pattern))]


def check_text(text: str, results_dir: Path = RESULTS_DIR) -> list[str]:
    """Problems with the figures of one document: unknown file or key, or text that is not
    the rendered value."""
    problems, cache = [], {}
    for match in FIGURE.finditer(text):
        name, key, shown = match["file"], match["key"], match["text"]
        line = text.count("\n", 0, match.start()) + 1
        try:
            results = cache.setdefault(name, load_results(name, results_dir))
        except FileNotFoundError:
            problems.append(f"line {line}: no results file {name}.json")
            continue
        values = results.get("values", {})
        if key not in values:
            problems.append(f"line {line}: {name}.json has no value {key!r}")
            continue
        expected = render(values[key])
        if shown != expected:
            problems.append(f"line {line}: {name}.{key} shows {shown!r}, the JSON {expected!r}")
    return problems


def update_text(text: str, results_dir: Path = RESULTS_DIR) -> str:
    """The document with every figure re-rendered from the JSON."""
    cache = {}

    def replace(match):
        results = cache.setdefault(match["file"], load_results(match["file"], results_dir))
        value = render(results["values"][match["key"]])
        return f"<!--fig {match['file']}.{match['key']}-->{value}<!--/fig-->"

    return FIGURE.sub(replace, text)


def machine_description() -> str:
    """'Linux x86_64, 2 CPUs (model name)' for the `measured` record."""
    try:
        with open("/proc/cpuinfo") as handle:
            names = [line.split(":", 1)[1].strip() for line in handle if "model name" in line]
    except OSError:
        names = []
    cpu = names[0] if names else platform.processor() or platform.machine()
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs ({cpu})"


def write_results(path, values, *, command, about, notes="", measured=None, extra=None):
    """Writes a results file atomically: the values with their formats and when, where and
    how they were measured (default: today, this machine, the 1-minute load now); `extra`
    adds top-level entries (e.g. the per-run `runs` of `bench.py run --results`)."""
    if measured is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        measured = {"date": datetime.date.today().isoformat(), "machine": machine_description(),
                    "load_average_1min_at_end": None if load is None else round(load, 2),
                    "notes": notes}  # fmt: skip
    payload = {"about": about, "command": command, "measured": measured, **(extra or {})}
    payload["values"] = values
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(handle, "w") as out:
        json.dump(payload, out, indent=2)
        out.write("\n")
    os.replace(tmp, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--check", action="store_true", help="list stale figures, exit 1 if any")
    group.add_argument("--update", action="store_true", help="rewrite documents from the JSON")
    args = parser.parse_args(argv)
    stale = 0
    for path in document_paths():
        text = path.read_text()
        if args.update:
            new = update_text(text)
            if new != text:
                path.write_text(new)
                print(f"updated {path.relative_to(ROOT)}")
        else:
            for problem in check_text(text):
                print(f"{path.relative_to(ROOT)}: {problem}")
                stale += 1
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
