"""The JAX backend subset: the same model code under KERAS_BACKEND=jax, in a fresh process
(Keras picks its backend once per process). Run alone with `pytest -m jax`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.jax

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def jax_results(tmp_path_factory):
    pytest.importorskip("jax")
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "JAX_PLATFORMS": "cpu",
    }
    folder = tmp_path_factory.mktemp("jax")
    completed = subprocess.run(
        [sys.executable, "-m", "tests.helpers.jax_subset", str(folder)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    assert completed.returncode == 0 and lines, completed.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


def test_runs_on_jax(jax_results):
    assert jax_results["backend"] == "jax"


def test_predict_and_every_format_match_the_references(jax_results):
    assert jax_results["logits_std"] > 1e-2
    assert jax_results["npz_vs_numpy"] < 1e-4
    assert jax_results["timm_vs_numpy"] < 1e-4
    assert jax_results["hf_vs_npz"] < 1e-5
    assert jax_results["keras_vs_model"] == 0.0


def test_dynamic_image_size_fit_and_finetune(jax_results):
    assert jax_results["dynamic_vs_rebuilt"] < 1e-5
    losses = jax_results["fit_losses"]
    assert len(losses) == 2 and all(loss == loss for loss in losses)  # finite, not NaN
    assert losses[1] < losses[0]
    assert jax_results["finetune_output"] == [None, 3]
    assert jax_results["finetune_logits_zero"]
