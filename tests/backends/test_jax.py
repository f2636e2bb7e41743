"""The JAX backend subset: the same model code under KERAS_BACKEND=jax, in a fresh process
(Keras picks its backend once per process). Run alone with `pytest -m jax`."""

from __future__ import annotations

import pytest

from tests.backends.subset import run_subset

pytestmark = pytest.mark.jax


@pytest.fixture(scope="module")
def jax_results(tmp_path_factory):
    pytest.importorskip("jax")
    folder = tmp_path_factory.mktemp("jax")
    return run_subset(
        "jax", "tests.helpers.jax_subset", folder, env={"JAX_PLATFORMS": "cpu"}, timeout=600
    )


def test_runs_on_jax(jax_results):
    assert jax_results["backend"] == "jax"


def test_predict_and_every_format_match_the_references(jax_results):
    assert jax_results["logits_std"] > 1e-2
    assert jax_results["npz_vs_numpy"] < 1e-4
    assert jax_results["timm_vs_numpy"] < 1e-4
    assert jax_results["hf_vs_npz"] < 1e-5
    assert jax_results["keras_vs_model"] == 0.0
    assert jax_results["rope_vs_numpy"] < 1e-5


def test_dynamic_image_size_fit_and_finetune(jax_results):
    assert jax_results["dynamic_vs_rebuilt"] < 1e-5
    losses = jax_results["fit_losses"]
    assert len(losses) == 2 and all(loss == loss for loss in losses)  # finite, not NaN
    assert losses[1] < losses[0]
    assert jax_results["finetune_output"] == [None, 3]
    assert jax_results["finetune_logits_zero"]
