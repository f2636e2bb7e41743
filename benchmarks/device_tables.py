"""The tables of docs/performance.md, one per device class, rendered from results files.

A table sits between two HTML comments, `<!--table cpu_bf16-->` ... `<!--/table-->`; its text
is `render(name)`: a row per workload of each results file that `TABLES[name]` lists (a
`bench.py targets` file: its `summaries`; a `bench.py gpu --json` file: its `points`; a
`bench.py run --json` payload: its `results`), each with the device that measured it and
keras_vit's, timm's and the best Keras peer's best img/s (median of the run's rotated rounds,
all points in one run: the ratios compare like with like). A class with no file says so and
gives the command that measures it. `figures --check` lists a stale table as it lists a stale
figure; `figures --update` rewrites it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from benchmarks.harness.common import markdown

RESULTS_DIR = Path(__file__).resolve().parent / "results"
TABLE = re.compile(r"<!--table (?P<name>[\w-]+)-->\n(?P<text>.*?)<!--/table-->", re.S)
KERAS_PEERS = ("keras_hub", "vit_keras")

# name: (the device class in words, its results files (under results/), the command of a
# new measurement, given where the class has no file yet)
TABLES = {
    "gpu": ("GPU", sorted(p.name for p in RESULTS_DIR.glob("gpu*.json")),
            "python -m benchmarks.bench gpu --json gpu.json"),
    "cpu_bf16": ("CPU with bfloat16 units (AMX or AVX512-BF16)",
                 ["targets_intel_amx.json", "targets_amd_epyc.json"],
                 "python -m benchmarks.bench targets --torch-python TORCH_ENV/bin/python "
                 "--out benchmarks/results/targets_HOST"),
    "cpu_no_bf16": ("CPU without bfloat16 units (AVX-512 or AVX2 only)",
                    ["runs/targets_intel_icelake_b16_infer_interleaved.json",
                     "runs/targets_intel_icelake_s16_interleaved.json",
                     "runs/targets_intel_icelake_ti16_interleaved.json"],
                    "python -m benchmarks.bench run --model Ti/16 --mode train --settings "
                    "float32+xla,float32 --frameworks keras_vit,timm,vit_keras,keras_hub "
                    "--timm-settings float32 --interleave all --json FILE.json"),
}  # fmt: skip
HEADER = ["workload", "device", "keras_vit best", "timm best", "best Keras peer",
          "keras_vit / timm", "keras_vit / peer", "results file"]  # fmt: skip


def best_of(rates: dict) -> tuple[str, float] | None:
    """(setting, img/s) of the fastest entry of {setting: img/s}; None for none."""
    return max(rates.items(), key=lambda item: item[1]) if rates else None


def targets_rows(payload: dict) -> list[dict]:
    """A row per workload of a `bench.py targets` file (its `summaries`)."""
    rows = []
    for summary in payload["summaries"]:
        best = summary["best"]
        peers = {f"{f} {b['setting']}": b["images_per_s"] for f, b in best.items()
                 if f in KERAS_PEERS}  # fmt: skip
        rows.append({"workload": summary["workload"],
                     "keras_vit": best_of({best["keras_vit"]["setting"]:
                                           best["keras_vit"]["images_per_s"]}),
                     "timm": best_of(summary["timm"]), "peer": best_of(peers)})  # fmt: skip
    return rows


def rates_of(records: list, *frameworks: str) -> dict:
    """{setting: img/s} of `records` of `frameworks` (of several: "keras_hub float32+xla")."""
    named = len(frameworks) > 1
    return {(f"{r['framework']} " if named else "") + r["setting"]: r["images_per_s"]
            for r in records if r["framework"] in frameworks}  # fmt: skip


def run_rows(payload: dict) -> list[dict]:
    """The rows of a `bench.py run --json` payload (its `results`), one per mode."""
    rows = []
    for mode in dict.fromkeys(r["mode"] for r in payload["results"]):
        records = [r for r in payload["results"] if r["mode"] == mode]
        rows.append({"workload": f"{payload['config']['variant']} {mode}",
                     "keras_vit": best_of(rates_of(records, "keras_vit")),
                     "timm": best_of(rates_of(records, "timm")),
                     "peer": best_of(rates_of(records, *KERAS_PEERS))})  # fmt: skip
    return rows


def gpu_rows(payload: dict) -> list[dict]:
    """The rows of a `bench.py gpu --json` file (its `points`), one per workload: keras_vit's
    best over its backends (`keras_vit_jax`, `keras_vit_torch`) and timm's over its settings."""
    models = [p for p in payload["points"] if p["kind"] == "model" and "skipped" not in p]
    rows = []
    for workload in dict.fromkeys(p["workload_name"] for p in models):
        rates = {p["peer"]: p["images_per_s"] for p in models if p["workload_name"] == workload}
        keras_vit, timm = ({k: v for k, v in rates.items() if k.startswith(side)}
                           for side in ("keras_vit", "timm"))  # fmt: skip
        rows.append({"workload": workload, "keras_vit": best_of(keras_vit),
                     "timm": best_of(timm), "peer": None})  # fmt: skip
    return rows


def device_of(payload: dict) -> str:
    """ "Intel(R) Xeon(R) Processor, 2 cores, amx_bf16 avx512_bf16" from the file's record."""
    if "points" in payload:  # a GPU race: the device's name
        return payload.get("device", "unknown device")
    machine = payload.get("machine_record") or payload.get("machine") or {}
    cpu = re.sub(r" @ [\d.]+GHz$", "", machine.get("cpu", "unknown CPU"))
    units = " ".join(machine.get("bfloat16_flags") or ["no bfloat16 units"])
    return f"{cpu}, {machine.get('cores', '?')} cores, {units}"


def rows_of(payload: dict) -> list[dict]:
    """The rows of a results file of `targets`, `gpu` or `run --json`, by what it holds."""
    if "summaries" in payload:
        return targets_rows(payload)
    return gpu_rows(payload) if "points" in payload else run_rows(payload)


def command_behind(payload: dict, file: str) -> str:
    """The command that wrote a results file: its `command`, else the one its `config` (a
    `run --json` payload) or its kind (a GPU race) gives."""
    from benchmarks.figures import command_of

    if "command" in payload:
        return payload["command"]
    if "points" in payload:
        return f"python -m benchmarks.bench gpu --json {Path(file).name}"
    return command_of(payload["config"])


def cells(row: dict, device: str, name: str) -> list[str]:
    """A table row: each best as "setting img/s", the ratios to 2 places ("-" where absent)."""
    text = lambda best: f"{best[0]} {best[1]:.2f}" if best else "-"  # noqa: E731
    ratio = lambda other: f"{row['keras_vit'][1] / other[1]:.2f}x" if other else "-"  # noqa: E731
    return [row["workload"], device, text(row["keras_vit"]), text(row["timm"]),
            text(row["peer"]), ratio(row["timm"]), ratio(row["peer"]), f"`{name}`"]  # fmt: skip


def render(name: str, results_dir: Path = RESULTS_DIR) -> str:
    """The Markdown of table `name` of `TABLES` from its results files (ends in a newline)."""
    if name not in TABLES:
        raise ValueError(f"unknown table {name!r}; the tables are {sorted(TABLES)}")
    device_class, files, command = TABLES[name]
    if not files:
        return (f"No {device_class} figure has been measured yet. On a {device_class} machine, "
                "from the repository root (then put the file under benchmarks/results/ and run "
                f"`figures --update`):\n\n```sh\n{command}\n```\n")  # fmt: skip
    rows, commands = [], []
    for file in files:
        payload = json.loads((Path(results_dir) / file).read_text())
        rows += [cells(row, device_of(payload), file) for row in rows_of(payload)]
        commands.append(f"- `{file}`: `{command_behind(payload, file)}`")
    return (
        markdown(HEADER, rows)
        + "\n\nThe command behind each file:\n\n"
        + "\n".join(commands)
        + "\n"
    )


def check_text(text: str, results_dir: Path = RESULTS_DIR) -> list[str]:
    """Problems with a document's tables: an unknown table, or text not its rendering."""
    problems = []
    for match in TABLE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        try:
            expected = render(match["name"], results_dir)
        except (OSError, ValueError) as error:
            problems.append(f"line {line}: table {match['name']}: {error}")
            continue
        if match["text"] != expected:
            problems.append(f"line {line}: table {match['name']} differs from its results files")
    return problems


def update_text(text: str, results_dir: Path = RESULTS_DIR) -> str:
    """The document with every table re-rendered from its results files."""
    return TABLE.sub(lambda m: f"<!--table {m['name']}-->\n{render(m['name'], results_dir)}"
                     "<!--/table-->", text)  # fmt: skip
