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
    assert jax_results["swiglu_vs_numpy"] < 1e-5


def test_fit_opens_no_iterator_of_its_own_over_a_built_stream(jax_results):
    assert jax_results["fit_reads_stream"]  # Keras' trainer reads one batch for its build
    assert not jax_results["fit_reads_stream_after_build"]


def test_dynamic_image_size_fit_and_finetune(jax_results):
    assert jax_results["dynamic_vs_rebuilt"] < 1e-5
    losses = jax_results["fit_losses"]
    assert len(losses) == 2 and all(loss == loss for loss in losses)  # finite, not NaN
    assert losses[1] < losses[0]
    assert jax_results["finetune_output"] == [None, 3]
    assert jax_results["finetune_logits_zero"]


@pytest.mark.slow
def test_dropout_and_stochastic_depth_rates_in_every_policy(tmp_path):
    from tests.helpers import dropout_rates

    result = run_subset(
        "jax", "tests.helpers.dropout_rates", tmp_path, env={"JAX_PLATFORMS": "cpu"}, timeout=300
    )
    assert result["backend"] == "jax"
    for policy, rates in result["rates"].items():
        assert dropout_rates.binomial_misses(rates) == {}, policy


@pytest.mark.slow
def test_a_refused_image_size_leaves_the_model_usable(tmp_path):
    result = run_subset(
        "jax", "tests.helpers.refused_sizes", tmp_path, env={"JAX_PLATFORMS": "cpu"}, timeout=300
    )
    for kind, rule in (("fixed", "takes images of shape (32, 32, 3)"), ("dynamic", "divisible")):
        for call in ("predict", "evaluate"):
            outcome = result[f"{kind}/{call}"]
            assert outcome["usable"] is True, (kind, call, outcome)
            assert outcome["error"].startswith("ValueError") and rule in outcome["error"]


@pytest.mark.slow
def test_data_parallel_batches_that_do_not_split(tmp_path):
    """9 images at batch 4 on 2 devices: predict pads the last batch (the same logits as
    batches that split), fit and evaluate refuse before the first step (weights unchanged),
    naming the batch and the device count."""
    env = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    result = run_subset("jax", "tests.helpers.uneven_batches", tmp_path, env=env, timeout=300)
    assert result["devices"] == 2
    assert result["predict_shape"] == [9, 3]
    assert result["predict_vs_even_batches"] < 1e-6
    for key in ("fit", "evaluate"):
        assert result[key].startswith(f"ValueError: {key} on 9 samples"), result[key]
        assert "makes a batch of 1" in result[key] and "the 2 devices" in result[key]
    assert result["fit_moved_weights"] is False
    assert "batch_size 3" in result["predict_odd_batch_size"]
    assert result["fit_even"] == "ok" and result["predict_after"] > 0
