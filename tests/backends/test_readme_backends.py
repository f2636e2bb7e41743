"""README.md's "Backends" table is true at this commit: each row's probe
(tests/helpers/backend_claims.py) works where the table says "yes" and fails where it says
"no", on each backend lane: TensorFlow in this process, JAX in a KERAS_BACKEND=jax process
(`pytest -m jax`, the CI's JAX lane), PyTorch in a KERAS_BACKEND=torch process (`pytest -m
torch_backend`, skipped where torch is not installed). A change that makes a "no" work (or
breaks a "yes") fails here until the table says so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.backends.subset import run_subset
from tests.helpers import backend_claims
from tests.test_readme import python_blocks

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def backend_table(markdown: str) -> dict[str, dict[str, str]]:
    """{row key (the first cell up to its colon): {backend: cell}} of the table in the
    "## Backends" section."""
    section = markdown[markdown.index("\n## Backends\n") :].split("\n## ", 2)[1]
    rows = [line.strip() for line in section.splitlines() if line.strip().startswith("|")]
    header = [cell.strip(" `") for cell in rows[0].strip("|").split("|")]
    table = {}
    for line in rows[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        table[cells[0].split(":", 1)[0].strip()] = dict(zip(header[1:], cells[1:], strict=True))
    return table


def claimed(cell: str) -> bool:
    """True for a "yes" cell, False for one that starts with "no"."""
    word = cell.split(":")[0].split(",")[0].strip().lower()
    assert word in ("yes", "no"), f"a Backends cell must start with yes or no: {cell!r}"
    return word == "yes"


def check_column(results: dict, backend: str) -> None:
    table = backend_table(README.read_text())
    assert set(table) == set(backend_claims.PROBES), "every row has a probe, every probe a row"
    assert results["backend"] == backend
    wrong = []
    for row, cells in table.items():
        result = results[row]
        if claimed(cells[backend]) != result["ok"]:
            works = "works" if result["ok"] else f"fails ({result['detail']})"
            wrong.append(f"{row}: README says {cells[backend]!r} on {backend}, but it {works}")
    assert not wrong, "\n".join(wrong)


def test_the_table_has_a_column_per_backend_lane():
    table = backend_table(README.read_text())
    assert table and all(set(cells) == {"tensorflow", "jax", "torch"} for cells in table.values())
    assert claimed("yes") and not claimed("no: needs TensorFlow, and says so")
    with pytest.raises(AssertionError):
        claimed("partly")


@pytest.mark.slow  # a tiny train, evaluate, predict and export: ~30 s on 2 cores
def test_the_tensorflow_column_is_true(tmp_path):
    check_column(backend_claims.main(str(tmp_path)), "tensorflow")


@pytest.mark.large  # train, evaluate, predict, export on JAX: ~55 s (.ci/run_jax)
@pytest.mark.jax
@pytest.mark.slow
def test_the_jax_column_is_true(tmp_path):
    pytest.importorskip("jax")
    env = {"JAX_PLATFORMS": "cpu", "KERAS_VIT_PRECISION_PROBE": "off"}
    results = run_subset("jax", "tests.helpers.backend_claims", tmp_path, env=env, timeout=600)
    check_column(results, "jax")


@pytest.mark.torch_backend
@pytest.mark.slow
def test_the_torch_column_is_true(tmp_path):
    pytest.importorskip("torch")
    env = {"KERAS_VIT_PRECISION_PROBE": "off"}
    results = run_subset("torch", "tests.helpers.backend_claims", tmp_path, env=env, timeout=600)
    check_column(results, "torch")


@pytest.mark.jax
@pytest.mark.large  # the story twice, each export in a TensorFlow child process: minutes;
# runs on the JAX lane (.ci/run_jax: -m "jax and large") and with -m large (run_large)
def test_the_python_story_runs_on_jax_twice_in_one_folder(tmp_path):
    """The README's "From Python" story, unchanged, under KERAS_BACKEND=jax, run twice in the
    same folder as a user reruns it: both runs succeed without a traceback, and the second
    export adds version 2 next to version 1 (SavedModels written by a TensorFlow process)."""
    pytest.importorskip("jax")
    story = python_blocks(README.read_text())[0]
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": str(ROOT),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "KERAS_VIT_PRECISION_PROBE": "off",
    }
    for attempt in (1, 2):
        done = subprocess.run(
            [sys.executable, "-c", story],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, f"run {attempt}:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
        assert "Traceback" not in done.stderr, done.stderr[-3000:]
    versions = tmp_path / "serving" / "mnist_vit"
    assert sorted(p.name for p in versions.iterdir()) == ["1", "2"]
    assert all((versions / v / "saved_model.pb").is_file() for v in ("1", "2"))
