"""The device tables of docs/performance.md (benchmarks/device_tables.py): each equals its
rendering, and every figure in them equals the one read straight from its results file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks import device_tables, figures

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
DOC = (ROOT / "docs" / "performance.md").read_text()
CLASSES = ("gpu", "cpu_bf16", "cpu_no_bf16")


def doc_tables() -> dict:
    """{name: text} of the tables in docs/performance.md."""
    return {m["name"]: m["text"] for m in device_tables.TABLE.finditer(DOC)}


def table_rows(text: str) -> list[list[str]]:
    """The body rows of a Markdown table, cells stripped."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def expected_bests(payload: dict, workload: str) -> dict:
    """{column: (setting, img/s)} for a workload, read from the file without the renderer:
    the fastest keras_vit and timm setting, and the fastest Keras peer setting."""
    if "summaries" in payload:
        summary = next(s for s in payload["summaries"] if s["workload"] == workload)
        ours = max(summary["keras_vit"].items(), key=lambda kv: kv[1])
        timm = max(summary["timm"].items(), key=lambda kv: kv[1])
        peer = max(summary["keras_peers"].items(), key=lambda kv: kv[1])
        return {"keras_vit": ours, "timm": timm, "peer": peer}
    variant, mode = workload.split()
    assert payload["config"]["variant"] == variant
    records = [r for r in payload["results"] if r["mode"] == mode]
    best = {}
    for record in records:
        column = {"keras_vit": "keras_vit", "timm": "timm"}.get(record["framework"])
        if column is None and record["framework"] in ("keras_hub", "vit_keras"):
            column, label = "peer", f"{record['framework']} {record['setting']}"
        else:
            label = record["setting"]
        if column and (column not in best or record["images_per_s"] > best[column][1]):
            best[column] = (label, record["images_per_s"])
    return best


def test_performance_md_has_one_table_per_device_class_each_its_rendering():
    tables = doc_tables()
    assert sorted(tables) == sorted(CLASSES)
    for name in CLASSES:
        assert tables[name] == device_tables.render(name), name
    assert len(DOC.splitlines()) <= 300
    headings = [line for line in DOC.splitlines() if line.startswith("#")]
    assert not any(re.search(r"\d{4}-\d\d|session|host", h, re.I) for h in headings), headings


@pytest.mark.parametrize("name", ["cpu_bf16", "cpu_no_bf16"])
def test_every_figure_of_a_cpu_table_equals_its_results_file(name):
    rows = table_rows(doc_tables()[name])
    assert rows, f"table {name} has no row"
    for workload, device, ours, timm, peer, over_timm, over_peer, file in rows:
        payload = json.loads((RESULTS / file.strip("`")).read_text())
        best = expected_bests(payload, workload)
        assert ours == f"{best['keras_vit'][0]} {best['keras_vit'][1]:.2f}"
        assert timm == f"{best['timm'][0]} {best['timm'][1]:.2f}"
        assert peer == f"{best['peer'][0]} {best['peer'][1]:.2f}"
        assert over_timm == f"{best['keras_vit'][1] / best['timm'][1]:.2f}x"
        assert over_peer == f"{best['keras_vit'][1] / best['peer'][1]:.2f}x"
        machine = payload.get("machine_record") or payload["machine"]
        assert device.startswith(machine["cpu"].split(" @")[0]), device
        units = machine["bfloat16_flags"]
        assert bool(units) == (name == "cpu_bf16") and all(u in device for u in units)


def test_a_class_with_no_results_file_says_so_and_gives_the_command(monkeypatch):
    monkeypatch.setitem(device_tables.TABLES, "gpu", ("GPU", [], "python -m benchmarks.bench gpu"))
    text = device_tables.render("gpu")
    assert text.startswith("No GPU figure has been measured yet.")
    assert "```sh\npython -m benchmarks.bench gpu\n```" in text
    if not sorted(RESULTS.glob("gpu*.json")):  # the page says the same while none exists
        assert doc_tables()["gpu"].startswith("No GPU figure has been measured yet.")


def test_a_gpu_results_file_gives_a_row_per_workload(tmp_path, monkeypatch):
    point = {"kind": "model", "workload_name": "b16_train_224"}
    payload = {"device": "NVIDIA H100 80GB HBM3", "points": [
        {"kind": "gemm", "engine": "jax", "best_tflops": 700.0},
        {**point, "peer": "keras_vit_jax", "images_per_s": 900.0},
        {**point, "peer": "keras_vit_torch", "images_per_s": 500.0},
        {**point, "peer": "timm_bf16", "images_per_s": 800.0},
        {**point, "peer": "timm_compile", "skipped": "budget spent"},
    ]}  # fmt: skip
    (tmp_path / "gpu.json").write_text(json.dumps(payload))
    monkeypatch.setitem(device_tables.TABLES, "gpu", ("GPU", ["gpu.json"], "unused"))
    rows = table_rows(device_tables.render("gpu", tmp_path))
    assert rows == [["b16_train_224", "NVIDIA H100 80GB HBM3", "keras_vit_jax 900.00",
                     "timm_bf16 800.00", "-", "1.12x", "-", "`gpu.json`"]]  # fmt: skip


def test_a_stale_table_or_a_missing_results_file_is_reported_and_updated():
    table = doc_tables()["cpu_bf16"]
    first = table_rows(table)[0][2]  # "mixed_bfloat16 15.66"
    stale = DOC.replace(table, table.replace(first, first[:-1] + "9", 1))
    assert any("table cpu_bf16 differs" in p for p in device_tables.check_text(stale))
    assert device_tables.update_text(stale) == DOC
    missing = "see benchmarks/results/runs/not_there.json and results/targets_quick.json"
    assert figures.missing_paths(missing) == [
        "line 1: no results file benchmarks/results/runs/not_there.json"
    ]
    with pytest.raises(ValueError, match="unknown table 'tpu'"):
        device_tables.render("tpu")
