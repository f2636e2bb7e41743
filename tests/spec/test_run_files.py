"""keras_vit.spec.run_files: the one home of a run directory's file names."""

import ast
import pathlib

import keras_vit
from keras_vit.spec import run_files

PACKAGE = pathlib.Path(keras_vit.__file__).parent
HOME = PACKAGE / "spec" / "run_files.py"
RUN_ONLY = {  # names no other file format uses (config.json is also Hugging Face's and timm's)
    run_files.METRICS_FILE,
    run_files.HISTORY_FILE,
    run_files.PLOT_FILE,
    run_files.BEST_RECORD,
    run_files.BEST_MODEL,
    run_files.LAST_MODEL,
    run_files.BEST_NPZ,
    run_files.LAST_NPZ,
    run_files.LOCK_FILE,
    run_files.SCRATCH_PREFIX,
}


def spelled_names(source: str) -> set[str]:
    """The run file names `source` spells as a whole string constant (docstrings and prose
    that mention a name are not counted)."""
    return {
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and node.value in RUN_ONLY
    }


def test_the_names_are_the_files_a_run_writes():
    assert (run_files.BEST_MODEL, run_files.LAST_MODEL) == ("best.keras", "last.keras")
    assert (run_files.BEST_NPZ, run_files.LAST_NPZ) == ("best.npz", "last.npz")
    assert run_files.CONFIG_FILE == "config.json" and run_files.METRICS_FILE == "metrics.json"


def test_the_scanner_finds_a_spelled_name_and_skips_prose():
    assert spelled_names('path = os.path.join(run_dir, "best.keras")') == {"best.keras"}
    assert spelled_names('"""Writes best.keras."""\nhelp = "see history.csv"') == set()


def test_no_other_module_spells_a_run_file_name():
    spelled = {
        path.relative_to(PACKAGE).as_posix(): names
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != HOME and (names := spelled_names(path.read_text(encoding="utf-8")))
    }
    assert spelled == {}
