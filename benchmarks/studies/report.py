"""The studies' shared report code: their flags, refusals, output files and child processes.

A study (a script of this folder) reports on stdout, its raw figures as JSON (`--json`) and,
where the documents quote it, a results file (`--results`, `figures.write_results`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.figures import fig, write_results  # noqa: E402, F401
from benchmarks.harness import common  # noqa: E402
from benchmarks.harness.common import (  # noqa: E402, F401
    at_least,
    checked_image_size,
    child_result,
    run_rounds,
)


def parser(doc: str, results: str | None = None, json_help="write the raw results here"):
    """A study's parser: `doc`'s first paragraph, `--json` (unless `json_help` is None) and
    `--results` where `results` names the file of the documents' figures."""
    made = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    if json_help:
        made.add_argument("--json", help=json_help)
    if results:
        where = f"benchmarks/results/{results}; then `python -m benchmarks.bench figures --update`"
        made.add_argument("--results", help=f"write the documents' figures here ({where})")
    return made


def save_json(path, payload, append: bool = False) -> None:
    """`payload` as JSON at `path` (atomically), or appended as one line; nothing without one."""
    if path and append:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(payload) + "\n")
    elif path:
        common.write_json(path, payload)


def write_figures(path, values, script, about, argv=None, notes="") -> None:
    """The documents' figures to `path` (none without one), with the command (`argv`: this
    process' by default)."""
    if not path:
        return
    argv = sys.argv[1:] if argv is None else argv
    module = os.path.splitext(os.path.basename(script))[0]
    command = f"python -m benchmarks.studies.{module} {' '.join(argv)}"
    write_results(path, values, command=command.strip(), about=about, notes=notes)
    print(f"wrote {path}")


def child_json(argv, prefix="RESULT ", **run) -> dict:
    """`common.child_result`; SystemExit with the child's output if it fails."""
    try:
        return child_result(argv, prefix, **run)
    except RuntimeError as error:
        raise SystemExit(f"the child process failed ({error}):\n{error.output}") from None
