"""The PyTorch backend path: the same model code under KERAS_BACKEND=torch, in a fresh process
(Keras picks its backend once per process). Skipped where torch is not installed (the default
environment); the optional lane .ci/run_torch_backend runs it with `pytest -m torch_backend`.

Supported there (docs/performance_log.md, "Backends"): layers, models, every checkpoint format,
fit/evaluate/predict, `.keras`/`.weights.h5` files, mixed precision copies. Not there:
tf.data pipelines, tf.distribute strategies, SavedModel export (TensorFlow only)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.backends.subset import ROOT, run_subset

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
    assert torch_results["rope_vs_numpy"] < 1e-5
    assert torch_results["swiglu_vs_numpy"] < 1e-5
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
    """On PyTorch each attention layer picks the fused kernel when it is built, its
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


def _cli_on_torch(tmp_path, *flags) -> subprocess.CompletedProcess:
    """`keras-vit train` on the tiny digits run in a fresh KERAS_BACKEND=torch process, as a
    user starts it (the CLI imports TensorFlow for tf.data; nothing imports torch first)."""
    run = ["--epochs", "1", "--batch-size", "16", "--run-dir", str(tmp_path / "run"), *flags]
    argv = ["train", "--model", "tiny", "--dataset", "digits", "--shots-per-class", "10", *run]
    code = f"import sys\nfrom keras_vit.cli.main import main\nsys.exit(main({argv!r}))\n"
    env = {**os.environ, "KERAS_BACKEND": "torch", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": ROOT}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=1200
    )


def test_keras_vit_train_runs_on_torch_from_a_fresh_process(tmp_path):
    """TensorFlow imported before PyTorch crashed the process (a segmentation fault in
    triton's CUDA bindings, torch 2.14.1): the CLI now imports Keras' backend first."""
    pytest.importorskip("torch")
    done = _cli_on_torch(tmp_path, "--stem", "patch", "--no-jit-compile")
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert "Test accuracy" in done.stdout


@pytest.mark.large
def test_jit_compile_on_torch_trains_the_hybrid(tmp_path):
    """`--jit-compile` on PyTorch is Keras' torch.compile; the hybrid's root max-pool used to
    fail in inductor (`replication_pad2d_backward`). Minutes of compilation on 2 cores:
    `pytest -m "large and torch_backend"`."""
    pytest.importorskip("torch")
    done = _cli_on_torch(tmp_path, "--stem", "resnet", "--jit-compile")
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert "Test accuracy" in done.stdout and "jit_compile True" in done.stdout


@pytest.mark.slow
def test_dropout_and_stochastic_depth_rates_in_every_policy(tmp_path):
    pytest.importorskip("torch")
    from tests.helpers import dropout_rates

    result = run_subset(
        "torch", "tests.helpers.dropout_rates", tmp_path, env={"CUDA_VISIBLE_DEVICES": ""},
        timeout=300,
    )  # fmt: skip
    assert result["backend"] == "torch"
    for policy, rates in result["rates"].items():
        assert dropout_rates.binomial_misses(rates) == {}, policy


@pytest.mark.slow
def test_a_refused_image_size_leaves_the_model_usable(tmp_path):
    pytest.importorskip("torch")
    result = run_subset(
        "torch", "tests.helpers.refused_sizes", tmp_path, env={"CUDA_VISIBLE_DEVICES": ""},
        timeout=300,
    )  # fmt: skip
    for key, outcome in result.items():
        if key != "backend":
            assert outcome["usable"] is True, (key, outcome)
            assert outcome["error"].startswith("ValueError"), (key, outcome)
