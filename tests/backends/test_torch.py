"""The PyTorch backend path: the same model code under KERAS_BACKEND=torch, in a fresh process
(Keras picks its backend once per process). Skipped where torch is not installed (the default
environment); the optional lane .ci/run_torch_backend runs it with `pytest -m torch_backend`.

Supported there (docs/performance.md, "Backends"): layers, models, every checkpoint format,
fit/evaluate/predict, `.keras`/`.weights.h5` files, mixed precision copies. Not there:
tf.data pipelines, tf.distribute strategies, SavedModel export (TensorFlow only)."""

from __future__ import annotations

import pytest

from tests.backends.subset import run_subset

pytestmark = pytest.mark.torch_backend


@pytest.fixture(scope="module")
def torch_results(tmp_path_factory):
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("torch")
    return run_subset(
        "torch", "tests.helpers.torch_subset", folder, env={"CUDA_VISIBLE_DEVICES": ""}, timeout=900
    )


def test_runs_on_torch(torch_results):
    assert torch_results["backend"] == "torch"
    assert torch_results["weights_are_torch"]


def test_predict_and_every_format_match_the_references(torch_results):
    assert torch_results["logits_std"] > 1e-2
    assert torch_results["npz_vs_numpy"] < 1e-4
    assert torch_results["timm_vs_numpy"] < 1e-4
    assert torch_results["hf_vs_npz"] < 1e-5
    assert torch_results["keras_vs_model"] == 0.0
    assert torch_results["weights_h5_vs_model"] == 0.0


def test_dynamic_image_size_fit_and_finetune(torch_results):
    assert torch_results["dynamic_vs_rebuilt"] < 1e-5
    losses = torch_results["fit_losses"]
    assert len(losses) == 2 and all(loss == loss for loss in losses)  # finite, not NaN
    assert losses[1] < losses[0]
    assert torch_results["finetune_output"] == [None, 3]
    assert torch_results["finetune_logits_zero"]
    before, after = torch_results["evaluate_loss_before_after"]
    assert after < before


def test_a_bfloat16_copy_computes_in_bfloat16_close_to_float32(torch_results):
    assert torch_results["extras_logits_std"] > 1e-2  # randomised head, not all zero
    assert torch_results["bf16_block_dtype"] == "bfloat16"
    assert torch_results["bf16_logits_dtype"] == "float32"
    assert 0 < torch_results["bf16_vs_float32"] < 0.05  # bfloat16 ran, and stayed close


def test_attention_reaches_sdpa_and_matches_timms_forward(tmp_path):
    """Issue 45: on PyTorch each attention layer picks the fused kernel when it is built, its
    call reaches `torch.nn.functional.scaled_dot_product_attention` once a block, and the
    logits of a timm file (random weights, non-square 24x20 input) equal timm's own forward,
    as the explicit kernel's do."""
    pytest.importorskip("torch")
    pytest.importorskip("timm")
    results = run_subset(
        "torch",
        "tests.helpers.torch_timm_fused",
        tmp_path,
        env={"CUDA_VISIBLE_DEVICES": ""},
        timeout=600,
    )
    assert results["backend"] == "torch" and results["logits_std"] > 1e-2
    assert results["kernels"] == ["fused"] and results["attention_layers"] == 2
    assert results["sdpa_calls_fused"] == 2 and results["sdpa_calls_explicit"] == 0
    assert results["fused_vs_timm"] < 1e-5 and results["explicit_vs_timm"] < 1e-5
