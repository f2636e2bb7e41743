"""Every example in examples/ runs end to end in quick mode and writes what it promises.

Each example runs in its own process (as a user runs it: `python examples/<name>.py --quick
--out DIR`), with a timeout, and the test checks its real outputs: files, checkpoint keys and
shapes (official layout, vit_facts.md section 3), the accuracy line, PNG sizes, the TF
Serving request/response JSON. The child's CPU time is bounded too: quick modes must stay
under a minute on a quiet 2-core machine, and CPU time (unlike wall time) does not depend on
how busy a shared machine is.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_vit  # noqa: F401  (registers the layers for loading cnn_hybrid.keras)
from tests.output_checks import assert_head_not_zero

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
# Only a guard against a hung example, not a speed target (speed lives in benchmarks/).
HANG_TIMEOUT_S = 900
CHANCE = 0.1  # ten balanced digit classes
EXAMPLE_NAMES = [
    "train_from_scratch",
    "finetune_pretrained",
    "distributed_training",
    "serve_with_tf_serving",
    "visualize_attention",
    "hybrid_and_custom_backbone",
]


def run_example(name: str, out: Path, *args: str, returncode: int = 0) -> str:
    """Runs `python examples/<name>.py --quick --out <out> *args`; returns stdout + stderr."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    env.pop("TF_CONFIG", None)
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), "--quick", "--out", str(out), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT_S,
    )
    assert completed.returncode == returncode, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed.stdout if returncode == 0 else completed.stderr


def last_value(pattern: str, stdout: str) -> str:
    matches = re.findall(pattern, stdout, flags=re.MULTILINE)
    assert matches, f"no line matching {pattern!r} in:\n{stdout}"
    return matches[-1]


def read_npz(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the PNG header (IHDR), read directly from the file."""
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_docstring_states_the_command(name):
    """Each example starts with a docstring naming its exact quick command; main(argv) exists."""
    source = (EXAMPLES / f"{name}.py").read_text()
    assert source.startswith('"""')
    docstring = source.split('"""')[1]
    assert f"python examples/{name}.py --quick" in docstring
    assert re.search(r"^def main\(argv=None\)", source, flags=re.MULTILINE)


@pytest.mark.slow
def test_train_from_scratch(tmp_path):
    stdout = run_example("train_from_scratch", tmp_path)
    accuracy = float(last_value(r"^test accuracy: ([0-9.]+)$", stdout))
    assert 2 * CHANCE < accuracy <= 1.0
    assert (tmp_path / "model.keras").is_file()
    arrays = read_npz(tmp_path / "model.npz")
    # Official layout of the quick ViT: 28x28x1 images, 7x7 patches -> 16 tokens + class token,
    # hidden 32, 2 blocks, 10 classes.
    assert arrays["embedding/kernel"].shape == (7, 7, 1, 32)
    assert arrays["cls"].shape == (1, 1, 32)
    assert arrays["Transformer/posembed_input/pos_embedding"].shape == (1, 17, 32)
    assert arrays["head/kernel"].shape == (32, 10)
    assert "Transformer/encoderblock_1/MlpBlock_3/Dense_1/kernel" in arrays
    assert "Transformer/encoderblock_2/LayerNorm_0/scale" not in arrays


@pytest.mark.large  # ~50 s on 2 cores
def test_finetune_pretrained(tmp_path):
    stdout = run_example("finetune_pretrained", tmp_path)
    accuracy = float(last_value(r"^fine-tuned test accuracy: ([0-9.]+)$", stdout))
    assert 2 * CHANCE < accuracy <= 1.0
    pretrained = read_npz(tmp_path / "pretrained.npz")
    finetuned = read_npz(tmp_path / "finetuned.npz")
    table = "Transformer/posembed_input/pos_embedding"
    # 16x16 with 4x4 patches: 1 + 4*4 rows; fine-tuned at 24x24: 1 + 6*6 rows.
    assert pretrained[table].shape == (1, 17, 32)
    assert finetuned[table].shape == (1, 37, 32)
    # Same architecture and official key set as the checkpoint (no pre_logits added).
    assert set(finetuned) == set(pretrained)
    assert finetuned["head/kernel"].shape == (32, 10)


@pytest.mark.slow
def test_distributed_training_mirrored_mixed_precision(tmp_path):
    run_dir = tmp_path / "run"
    stdout = run_example(
        "distributed_training", run_dir, "--strategy", "mirrored", "--mixed-precision"
    )
    assert "MirroredStrategy: 2 replicas x 32 images per step" in stdout
    assert "precision mixed_bfloat16" in stdout
    assert "logits dtype: float32" in stdout
    accuracy = float(last_value(r"^test accuracy: ([0-9.]+)$", stdout))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["num_replicas"] == 2
    assert metrics["steps"] == 4000 // 64  # one epoch of the embedded MNIST train split
    assert metrics["held_out"]["accuracy"] == pytest.approx(accuracy, abs=1e-4)
    assert accuracy > CHANCE
    for name in ("config.json", "history.csv", "best.keras", "last.npz"):
        assert (run_dir / name).is_file(), name
    assert not (run_dir / "backup").exists()  # a completed run removes its resume state


def test_distributed_training_tpu_without_tpu_fails_clearly(tmp_path):
    """`--strategy tpu` on a machine without a TPU: one line naming the problem, exit 2."""
    stderr = run_example(
        "distributed_training", tmp_path / "run", "--strategy", "tpu", returncode=2
    )
    assert "No TPU found for strategy 'tpu'" in stderr
    assert "Traceback" not in stderr
    assert not (tmp_path / "run").exists()  # nothing written before the strategy exists


@pytest.mark.slow
def test_serve_with_tf_serving(tmp_path):
    stdout = run_example("serve_with_tf_serving", tmp_path)
    version = tmp_path / "serving" / "vit" / "1"
    assert (version / "saved_model.pb").is_file()
    assert "docker run" in stdout and "tensorflow/serving" in stdout
    assert f'source="{tmp_path / "serving" / "vit"}"' in stdout
    assert "serving_default (pixel lists) gives the same classes: True" in stdout

    request = json.loads((tmp_path / "request.json").read_text())
    assert request["signature_name"] == "serving_bytes"
    assert len(request["instances"]) == 8
    for instance in request["instances"]:
        png = base64.b64decode(instance["image_bytes"]["b64"])
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == (28, 28)

    predictions = json.loads((tmp_path / "response.json").read_text())["predictions"]
    assert len(predictions) == 8
    for prediction in predictions:
        probabilities = np.asarray(prediction["probabilities"])
        assert probabilities.shape == (10,)
        assert probabilities.sum() == pytest.approx(1.0, abs=1e-5)
        best = sorted(range(10), key=lambda i: -probabilities[i])[:3]
        assert prediction["top_k_indices"] == best
        assert prediction["top_k_classes"] == [str(i) for i in best]  # MNIST class names
    served = [p["top_k_indices"][0] for p in predictions]
    labels = json.loads(last_value(r"^labels (\[.*\])$", stdout))
    accuracy = float(last_value(r"^serving_bytes accuracy: ([0-9.]+)$", stdout))
    assert accuracy == pytest.approx(np.mean(np.equal(served, labels)), abs=1e-4)


@pytest.mark.slow
def test_visualize_attention(tmp_path):
    stdout = run_example("visualize_attention", tmp_path, "--grid")
    assert "rollout grid 4x6" in stdout  # 32x48 input, 8x8 patches
    width, height = png_size(tmp_path / "attention_rollout.png")
    # scikit-image's chelsea photo is 451 x 300; the overlay is >= 640 wide at its aspect.
    assert width == 640
    assert abs(height - 640 * 300 / 451) <= 1
    grid_width, grid_height = png_size(tmp_path / "attention_layers.png")
    assert grid_width > grid_height  # two block panels side by side


@pytest.mark.large  # ~50 s on 2 cores
def test_hybrid_and_custom_backbone(tmp_path):
    stdout = run_example("hybrid_and_custom_backbone", tmp_path)
    # R50+ViT-B/16 at 224 with 1000 classes: 98,659,112 parameters in the release.
    assert last_value(r"^R50\+ViT-B/16: ([0-9,]+) parameters", stdout) == "98,659,112"
    # MobileNetV2 cut at stride 16 on 64x64 images: a 4x4 map -> 16 tokens.
    assert "feature map 4x4x" in stdout and "-> 16 tokens" in stdout
    assert "logits (1, 10)" in stdout
    # The head was trained, so the logits compared after reloading depend on the weights.
    assert float(last_value(r"max \|logit\| ([0-9.]+) after", stdout)) > 1e-3
    saved = keras.saving.load_model(tmp_path / "cnn_hybrid.keras", safe_mode=True)
    assert_head_not_zero(saved)
    assert "reloaded model gives the same logits: True" in stdout
