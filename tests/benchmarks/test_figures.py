"""The measured figures of README.md and docs/ equal the JSON files the benchmarks write
(benchmarks/figures.py), so a document cannot quote a figure no results file holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


from benchmarks import figures  # noqa: E402


def test_every_document_figure_equals_its_json():
    documents = figures.document_paths()
    assert ROOT / "README.md" in documents and ROOT / "docs" / "training.md" in documents
    problems = [
        f"{path.relative_to(ROOT)}: {problem}"
        for path in documents
        for problem in figures.check_text(path.read_text())
    ]
    fix = "run `python -m benchmarks.bench figures --update`:\n"
    assert problems == [], fix + "\n".join(problems)


def test_quick_start_quotes_its_figures_from_json():
    readme = (ROOT / "README.md").read_text()
    quick_start = readme[readme.index("## Quick start") : readme.index("## Dependencies")]
    keys = {(m["file"], m["key"]) for m in figures.FIGURE.finditer(quick_start)}
    assert {
        ("keras_vit_train", "wall_s"),
        ("keras_vit_train", "held_out_accuracy"),
        ("quick_start", "install_minutes"),
    } <= keys


@pytest.mark.parametrize("path", sorted((BENCHMARKS / "results").glob("*.json")), ids=str)
def test_results_files_say_when_where_and_how(path):
    results = json.loads(path.read_text())
    assert results["command"] and results["about"]
    assert results["measured"]["date"] and results["measured"]["machine"]
    assert results["values"]


def _results_dir(tmp_path, values):
    (tmp_path / "bench.json").write_text(json.dumps({"values": values}))
    return tmp_path


def test_check_reports_stale_unknown_and_missing_figures(tmp_path):
    results = _results_dir(tmp_path, {"acc": {"value": 0.9351, "format": "{:.2%}"}, "n": 3})
    good = "a <!--fig bench.acc-->93.51%<!--/fig--> b <!--fig bench.n-->3<!--/fig-->"
    assert figures.check_text(good, results) == []
    stale = "x\n<!--fig bench.acc-->94.30%<!--/fig-->"
    assert figures.check_text(stale, results) == [
        "line 2: bench.acc shows '94.30%', the JSON '93.51%'"
    ]
    assert "no value 'top5'" in figures.check_text("<!--fig bench.top5-->1<!--/fig-->", results)[0]
    assert "no results file nope.json" in figures.check_text("<!--fig nope.a-->1<!--/fig-->")[0]
    assert figures.update_text(stale, results) == "x\n<!--fig bench.acc-->93.51%<!--/fig-->"


def test_benchmark_writes_a_file_the_check_accepts(tmp_path, monkeypatch):
    """train_mnist.py --results: write_results + figure_values, read back by the check."""
    from benchmarks.studies import train_mnist

    measured = {"test_accuracy": 0.9421, "wall_s": 158.4, "cpu_s": 170.2, "cores": 2}
    figures.write_results(
        tmp_path / "train_mnist.json",
        train_mnist.figure_values(measured),
        command="python -m benchmarks.studies.train_mnist --results x",
        about="test",
    )
    written = json.loads((tmp_path / "train_mnist.json").read_text())
    assert written["measured"]["machine"] and written["measured"]["date"]
    text = (
        "<!--fig train_mnist.held_out_accuracy-->94.21%<!--/fig--> in "
        "<!--fig train_mnist.wall_s-->158<!--/fig--> s"
    )
    assert figures.check_text(text, tmp_path) == []
