"""An unknown KERAS_BACKEND value or a backend whose package is missing is one line naming the
value and the install command: from `keras-vit` (exit 2, no traceback) and from
`import keras_vit` (an ImportError), before Keras or TensorFlow is imported."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_vit import _backend_check

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).with_name("keras-vit")
HAS_TORCH = importlib.util.find_spec("torch") is not None

# KERAS_BACKEND value -> pieces of its one line
CASES = {
    "Jax": ["'Jax'", "did you mean 'jax'?", 'pip install ".[jax]"'],
    "tensorflowx": ["'tensorflowx'", "did you mean 'tensorflow'?"],
    "numpy": ["'numpy'", "tensorflow, jax, torch"],
}
if not HAS_TORCH:  # the default lane: torch is not installed
    CASES["torch"] = ["'torch'", "PyTorch", 'pip install ".[torch]"']

IMPORT_PROBE = """
import json, sys
try:
    import keras_vit
    outcome = "imported"
except ImportError as error:
    outcome = [type(error).__name__, str(error)]
print(json.dumps([outcome, "keras" in sys.modules, "tensorflow" in sys.modules]))
"""


def _env(tmp_path, backend: str) -> dict:
    return dict(
        os.environ,
        KERAS_BACKEND=backend,
        KERAS_HOME=str(tmp_path),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )


def _assert_one_line(text: str, pieces: list[str]) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    for piece in pieces:
        assert piece in lines[0], (piece, text)
    return lines[0]


@pytest.mark.skipif(not SCRIPT.exists(), reason="no keras-vit console script beside python")
@pytest.mark.parametrize("backend", sorted(CASES))
def test_the_command_answers_in_one_line_with_exit_code_2(tmp_path, backend):
    for command in ([str(SCRIPT), "train"], [sys.executable, "-m", "keras_vit.cli.main"]):
        done = subprocess.run(
            command, capture_output=True, text=True, env=_env(tmp_path, backend), timeout=60
        )
        assert done.returncode == 2, (command, done.stderr)
        line = _assert_one_line(done.stderr, CASES[backend])
        assert line.startswith("keras-vit: error: KERAS_BACKEND="), line
        assert done.stdout == ""


@pytest.mark.parametrize("backend", sorted(CASES))
def test_import_raises_an_import_error_before_keras_or_tensorflow(tmp_path, backend):
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE],
        capture_output=True,
        text=True,
        env=_env(tmp_path, backend),
        timeout=60,
        check=True,
    )
    outcome, keras, tensorflow = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome[0] == "BackendError", outcome
    _assert_one_line(outcome[1], CASES[backend])
    assert not keras and not tensorflow


def test_keras_json_is_named_when_it_holds_the_value(tmp_path, monkeypatch):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    (tmp_path / "keras.json").write_text('{"backend": "JAX"}')
    problem = _backend_check.backend_problem()
    assert str(tmp_path / "keras.json") in problem and "'JAX'" in problem
    assert "did you mean 'jax'?" in problem


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_an_installed_backend_passes(backend):
    assert _backend_check.backend_problem(backend) is None


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=12).filter(lambda s: s not in _backend_check.BACKENDS))
def test_any_other_value_is_refused_by_name(value):
    problem = _backend_check.backend_problem(value)
    assert problem is not None and repr(value) in problem
    assert "\n" not in problem.replace(repr(value), "")
