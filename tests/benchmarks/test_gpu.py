"""`bench.py gpu --smoke`: the GPU race runs on CPU where TensorFlow cannot be imported.

The GPU machines have PyTorch, JAX and timm but no TensorFlow, so the run is checked with a
`tensorflow` package on PYTHONPATH that records the attempt and raises ImportError.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY_TRAIN_FLOPS = 6 * (  # 4 patches of 8x8x3 -> 32, 5 tokens, 2 blocks, MLP 64, 1000 classes
    4 * 192 * 32 + 2 * (4 * 5 * 32 * 32 + 2 * 5 * 5 * 32 + 2 * 5 * 32 * 64) + 32 * 1000
)


def blocked_tensorflow(tmp_path):
    """A PYTHONPATH entry whose `tensorflow` writes `tried` when imported, then fails."""
    package = tmp_path / "blocker" / "tensorflow"
    package.mkdir(parents=True)
    tried = tmp_path / "tried"
    package.joinpath("__init__.py").write_text(
        f"open({str(tried)!r}, 'a').write('imported\\n')\n"
        "raise ImportError('TensorFlow is not installed on the GPU machines')\n"
    )
    return package.parent, tried


def run_gpu(tmp_path, *args):
    blocker, tried = blocked_tensorflow(tmp_path)
    env = dict(os.environ, KERAS_BACKEND="jax", CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join((str(blocker), str(ROOT)))
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench", "gpu", *args],
        capture_output=True, text=True, timeout=600, env=env, cwd=ROOT,
    )  # fmt: skip
    return done, tried


@pytest.mark.large  # ~17 s, benchmark tooling only (.ci/run_large)
def test_gpu_smoke_runs_without_tensorflow(tmp_path):
    out = tmp_path / "gpu.json"
    done, tried = run_gpu(tmp_path, "--smoke", "--workloads", "tiny_train_16", "--json", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert not tried.exists(), "something imported tensorflow"
    payload = json.loads(out.read_text())
    points = {(p["kind"], p.get("peer", p.get("engine"))): p for p in payload["points"]}
    jax_point = points["model", "keras_vit_jax"]
    assert jax_point["images_per_s"] > 0 and jax_point["peak_memory_gib"] > 0
    assert jax_point["tensorflow_imported"] is False
    assert jax_point["model_tflops_per_s"] == pytest.approx(
        TINY_TRAIN_FLOPS * jax_point["images_per_s"] / 1e12, rel=1e-6
    )
    gemm = points["gemm", "jax"]["best_tflops"]
    assert gemm == max(points["gemm", "jax"]["tflops"].values()) > 0
    assert payload["measured_gemm_tflops"] == gemm
    assert jax_point["mfu_gemm"] == pytest.approx(jax_point["model_tflops_per_s"] / gemm)
    assert payload["device"] == "CPU" and jax_point["mfu_datasheet"] is None
    has_torch = all(__import__("importlib").util.find_spec(m) for m in ("torch", "timm"))
    for peer in ("keras_vit_torch", "timm_eager", "timm_compile"):
        point = points["model", peer]
        if not has_torch:
            assert point["skipped"].endswith("is not installed here"), point
            assert f"tiny_train_16 {peer}: skipped: " in done.stdout
        else:
            assert point["images_per_s"] > 0
    assert "| tiny_train_16 | keras_vit_jax |" in done.stdout


def test_gpu_data_sheet_peak_and_bad_arguments(capsys):
    from benchmarks.harness import gpu

    assert gpu.peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert gpu.peak_tflops("NVIDIA H200") == 989.0
    assert gpu.peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert gpu.peak_tflops("CPU") is None and gpu.peak_tflops("CPU", 2.0) == 2.0
    for bad, message in (
        (["--workloads", "b16_train_999"], "unknown workload 'b16_train_999'"),
        (["--peers", "flax"], "unknown peer 'flax'"),
        (["--budget-s", "0"], "must be > 0"),
        (["--peak-tflops", "-1"], "--peak-tflops -1.0: must be > 0"),
    ):
        with pytest.raises(SystemExit):
            gpu.parse_args(bad)
        assert message in capsys.readouterr().err
    specs = gpu.point_specs(gpu.parse_args([]))
    assert [s["engine"] for s in specs[:2]] == ["jax", "torch"]
    assert len(specs) == 2 + len(gpu.WORKLOADS) * len(gpu.POINTS)
    assert {s["workload"] for s in specs[2:]} == set(gpu.WORKLOADS.values())
    peers = [s["peer"] for s in specs[2:]]  # the eager Keras PyTorch points last
    assert peers[-len(gpu.WORKLOADS) :] == ["keras_vit_torch"] * len(gpu.WORKLOADS)
    assert peers[:3] == ["keras_vit_jax", "timm_compile", "timm_eager"]
