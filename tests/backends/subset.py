"""Runs a backend subset (tests/helpers/<name>_subset.py) in a fresh process under
KERAS_BACKEND=`backend` (Keras picks its backend once per process) and returns its RESULT."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_subset(backend: str, module: str, folder, *, env: dict, timeout: int) -> dict:
    """The JSON of the last "RESULT " line `python -m module folder` prints under `backend`
    (with `env` added); fails the test with the tail of its stderr when there is none."""
    environment = {
        **os.environ,
        "KERAS_BACKEND": backend,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        **env,
    }
    completed = subprocess.run(
        [sys.executable, "-m", module, str(folder)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
        cwd=ROOT,
    )
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    assert completed.returncode == 0 and lines, completed.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])
