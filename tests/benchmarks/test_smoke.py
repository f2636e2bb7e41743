"""Smoke tests of the benchmark scripts and `keras-vit benchmark`: arguments, a tiny run.

No timing assertions: the figures depend on the machine. What is checked is that each
script parses its arguments, rejects bad ones, runs once end to end on a tiny model and
writes well-formed JSON; and that the analytic FLOP count matches the published counts.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.output_checks import onednn_bfloat16_kernels

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
TINY = "8,32,64,4,2"  # patch, hidden, mlp, heads, layers (the tests' tiny ViT)
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")


VERBS = ("run", "targets", "in-process", "scaling", "ablation", "profile", "results")  # bench.py


def run_script(name, *args, timeout=900, env=None):
    """Runs the module benchmarks.{harness,studies}.<name> (`name` its file, "race.py"), or
    `benchmarks.bench <name>` for a verb of `VERBS`, in a fresh interpreter from the
    repository root; returns the CompletedProcess."""
    if name in VERBS:
        command = ["-m", "benchmarks.bench", name]
    else:
        stem = name.removesuffix(".py")
        folder = next(f for f in ("harness", "studies") if (BENCHMARKS / f / name).exists())
        command = ["-m", f"benchmarks.{folder}.{stem}"]
    return subprocess.run(
        [sys.executable, *command, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**ENV, **(env or {})},
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def bench():
    """The benchmark helpers of keras_vit (imports TensorFlow once for this module)."""
    from keras_vit.evaluate import benchmarking as benchmark

    return benchmark


# Multiply-accumulates per image at 224 (vit_facts.md section 1, from the paper/releases).
PUBLISHED_GMACS = {
    "Ti/16": 1.26,
    "S/16": 4.61,
    "S/32": 1.15,
    "B/16": 17.58,
    "B/32": 4.41,
    "B/8": 78.2,
    "L/16": 61.6,
    "L/32": 15.4,
    "H/14": 167.4,
}


@pytest.mark.parametrize("variant", sorted(PUBLISHED_GMACS))
def test_analytic_macs_match_published_counts(bench, variant):
    macs = bench.analytic_macs(**bench.variant_arch(variant), image_size=224)
    assert macs / 1e9 == pytest.approx(PUBLISHED_GMACS[variant], rel=0.01)


def test_analytic_macs_at_384_and_hand_count(bench):
    assert bench.analytic_macs(**bench.variant_arch("B/16"), image_size=384) / 1e9 == (
        pytest.approx(55.5, rel=0.01)
    )
    # Tiny model by hand: 16 patches of 8x8x3 -> 32, 17 tokens, 2 blocks, 10 classes.
    tokens, d, m = 17, 32, 64
    by_hand = 16 * 192 * d + 2 * (4 * tokens * d * d + 2 * tokens * tokens * d + 2 * tokens * d * m)
    by_hand += d * 10
    assert bench.analytic_macs(**bench.variant_arch(TINY), image_size=32, num_classes=10) == by_hand
    assert bench.model_gflops(TINY, 32, "train", 10) == pytest.approx(6 * by_hand / 1e9)


def test_keras_vit_step_gflops_by_hand(bench):
    """The tiny model at 32 px, 10 classes: 16 patches, 17 tokens, hidden 32, MLP 64."""
    embed = 16 * (8 * 8 * 3) * 32  # 98,304
    block = 3 * 17 * 32 * 32 + 17 * 32 * 32 + 2 * 17 * 17 * 32 + 2 * 17 * 32 * 64  # 157,760
    # The last block: keys and values of all 17 tokens; query, output and MLP of one.
    last = 2 * 17 * 32 * 32 + 32 * 32 + 32 * 32 + 2 * 17 * 32 + 2 * 32 * 64  # 42,048
    forward = embed + block + last + 32 * 10
    assert forward == 298_432
    gflops = bench.keras_vit_step_gflops
    assert gflops(TINY, 32, "infer", 10) == pytest.approx(2 * 298_432 / 1e9)
    # Training: forward, input and weight gradients, less the image's gradient.
    assert gflops(TINY, 32, "train", 10) == pytest.approx(2 * (3 * 298_432 - embed) / 1e9)
    # B/16 at 224: the shortcut saves ~7% of the forward products (the last block is 1/12).
    ratio = gflops("B/16", 224, "infer") / bench.model_gflops("B/16", 224, "infer")
    assert 0.92 < ratio < 0.94
    with pytest.raises(ValueError, match="mode must be 'infer' or 'train'"):
        gflops("B/16", 224, "both")


def test_targets_roof_share_needed(scripts):
    """1.2x timm's 4.55 img/s of B/16 at 224 needs keras_vit's own 32.7 GFLOP an image at
    178.6 GFLOP/s: 96% of a 186 GFLOP/s roof."""
    targets = scripts["race"]
    share = targets.roof_share_needed(
        "B/16", "infer", ("float32", 4.55), {"TensorFlow": 184.0, "torch": 186.0}
    )
    own = scripts["common"].keras_vit_step_gflops("B/16", 224, "infer")
    assert own == pytest.approx(32.7, abs=0.05)
    assert share == pytest.approx(0.960, abs=0.002)
    assert targets.roof_share_needed("B/16", "infer", None, {"torch": 186.0}) is None
    assert targets.share_text(1.04) == "104% (past the roof)" and targets.share_text(0.5) == "50%"


@pytest.fixture(scope="module")
def scripts():
    """The benchmark scripts imported as modules (their parse_args run in this process)."""
    return {name: importlib.import_module(module) for name, module in SCRIPT_MODULES.items()}


SCRIPT_MODULES = {
    "race": "benchmarks.harness.race",
    "input_pipeline": "benchmarks.studies.input_pipeline",
    "step_profile": "benchmarks.harness.step_profile",
    "data_scaling": "benchmarks.studies.data_scaling",
    "precision_agreement": "benchmarks.studies.precision_agreement",
    "export_speed": "benchmarks.studies.export_speed",
    "common": "benchmarks.harness.common",
}


def parse(scripts, script, args):
    """`parse_args` of a bench.py verb (the races' one parser at the verb's preset; the
    profile) or of a study."""
    if script == "profile":
        return scripts["step_profile"].parse_args(args)
    if script in VERBS:
        return scripts["race"].parse_args(args, script)
    return scripts[script].parse_args(args)


@pytest.mark.parametrize(
    "script, bad_args",
    [
        ("run", ["--model", "X/99"]),
        ("run", ["--model", "Ti/16", "--image-size", "100"]),
        ("run", ["--frameworks", "flax"]),
        ("run", ["--timm-settings", "float16"]),
        ("run", ["--timm-settings", "float32+xla"]),
        ("run", ["--repeats", "0"]),
        ("run", ["--settings", "float32+jit"]),
        ("run", ["--settings", "bfloat16"]),
        ("precision_agreement", ["--hidden-dim", "30", "--num-heads", "4"]),
        ("precision_agreement", ["--epochs", "0"]),
        ("scaling", ["--image-sizes", "224,abc"]),
        ("scaling", ["--model", "8,32,64,5,2"]),
        ("input_pipeline", ["--repeats", "0"]),
        ("ablation", ["--model", "Ti/16", "--image-size", "100"]),
        ("ablation", ["--steps", "0"]),
        ("profile", ["--model", "X/99"]),
        ("profile", ["--top", "0"]),
        ("profile", ["--setting", "bfloat16"]),
        ("data_scaling", ["--sizes", "250,9000"]),
        ("data_scaling", ["--pretrain-steps", "0"]),
        ("data_scaling", ["--finetune-size", "42"]),
        ("export_speed", ["--repeats", "0"]),
        ("in-process", ["--frameworks", "vit_keras,keras_hub"]),
        ("in-process", ["--frameworks", "keras_vit,jax_vit"]),
        ("in-process", ["--frameworks", "timm"]),
        ("in-process", ["--frameworks", "keras_vit,keras_hub,timm"]),
        ("in-process", ["--rounds", "0"]),
        ("in-process", ["--settings", "float32+jit"]),
        ("export_speed", ["--model", "S/16", "--image-size", "100"]),
    ],
)
def test_scripts_reject_bad_arguments(scripts, script, bad_args, capsys):
    with pytest.raises(SystemExit) as raised:
        parse(scripts, script, bad_args)
    assert raised.value.code == 2
    assert "error:" in capsys.readouterr().err


SIZED_SCRIPTS = (
    "run",
    "ablation",
    "profile",
    "export_speed",
    "in-process",
    "input_pipeline",
)


@pytest.mark.parametrize("script", SIZED_SCRIPTS)
def test_scripts_time_a_variant_at_the_size_its_name_gives(scripts, script, capsys):
    """B/16-384 was timed at 224: the size in the name is now honoured, and an
    --image-size that differs is refused, both named."""

    def parse_script(args):
        return parse(scripts, script, args)

    assert parse_script(["--model", "B/16-384"]).image_size == 384
    assert parse_script(["--model", "ViT-B_16-384", "--image-size", "384"]).image_size == 384
    with pytest.raises(SystemExit) as raised:
        parse_script(["--model", "B/16-384", "--image-size", "224"])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert "names image size 384, --image-size 224 another" in err
    assert parse_script(["--model", "B/16"]).image_size == 224  # input_pipeline: with --model
    assert parse_script(["--model", TINY, "--image-size", "32"]).image_size == 32


@pytest.mark.parametrize("script", SIZED_SCRIPTS)
@pytest.mark.parametrize(
    "variant, message",
    [
        ("B/16-0", "--model 'B/16-0' names size 0 is not a positive multiple of the patch"),
        ("B/16-200", "--model 'B/16-200' names size 200 is not a positive multiple"),
    ],
)
def test_scripts_refuse_a_size_in_the_name_they_cannot_build(scripts, script, variant, message):
    done = run_script(
        script if script in VERBS else f"{script}.py", "--model", variant, timeout=120
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]


def test_timm_names_give_their_size(scripts):
    assert parse(scripts, "run", ["--model", "vit_base_patch16_384"]).image_size == 384


@pytest.mark.parametrize("variant, size", [("B/16-384", 384), ("B/16-224", 224),
                                           ("vit_base_patch16_224", 224)])  # fmt: skip
def test_scaling_refuses_a_variant_that_names_a_size(scripts, capsys, variant, size):
    """Even the default size: the records would name one size and hold others."""
    with pytest.raises(SystemExit):
        parse(scripts, "scaling", ["--model", variant])
    assert f"names image size {size}" in capsys.readouterr().err


def test_targets_times_a_sized_workload_at_its_size(scripts):
    race = scripts["race"]
    args = race.parse_args(["--workloads", "B/16-384:infer"], "targets")
    assert race.workload_args(args, "B/16-384").image_size == 384
    assert race.workload_args(args, "B/16").image_size == 224


def test_scripts_parse_good_arguments(scripts):
    args = parse(scripts, "run", ["--model", "S/16", "--frameworks", "keras_vit"])
    assert (args.variant, args.frameworks, args.sizes) == (
        "S/16",
        ["keras_vit"],
        (1024, 2048, 4096),
    )
    assert args.setting_list == [
        ("float32", True),
        ("mixed_bfloat16", True),
        ("mixed_bfloat16", False),
    ]
    old = parse(scripts, "run", ["--dtype-policy", "mixed_bfloat16", "--no-xla"])
    assert old.setting_list == [("mixed_bfloat16", False)]  # the deprecated spelling
    args = parse(scripts, "scaling", ["--image-sizes", "224,384", "--batch-sizes", "2"])
    assert scripts["race"].scaling_points(args) == [(224, 4), (384, 4), (224, 2)]
    assert scripts["input_pipeline"].parse_args([]).source == "mnist"


@pytest.mark.large  # ~45 s: every throughput point of a tiny run (.ci/run_large)
def test_throughput_tiny_run_writes_table_and_json(tmp_path):
    out = tmp_path / "throughput.json"
    figures_file = tmp_path / "throughput_settings.json"
    result = run_script(
        "run",
        *("--model", TINY, "--image-size", "16", "--batch-size", "2", "--mode", "train"),
        *("--steps", "1", "--repeats", "1", "--warmup", "1", "--gemm-sizes", "64"),
        *("--frameworks", "keras_vit", "--settings", "float32,mixed_bfloat16"),
        *("--json", str(out)),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| train | keras_vit | float32 " in result.stdout
    assert "| train | keras_vit | mixed_bfloat16 " in result.stdout
    payload = json.loads(out.read_text())
    records = payload["results"]
    assert [r["setting"] for r in records] == ["float32", "mixed_bfloat16"]
    assert all(r["images_per_s"] > 0 and r["peak_rss_mb"] > 0 for r in records)
    (gemm,) = payload["gemm_runs"]
    assert sorted(gemm["per_setting"]) == [
        "bfloat16 noxla",
        "bfloat16 xla",
        "float32 noxla",
        "float32 xla",
    ]
    best_gemm = max(v for per_size in gemm["per_setting"].values() for v in per_size.values())
    assert payload["roof_gflops"] == pytest.approx(best_gemm)
    for record in records:
        assert record["utilisation"] == pytest.approx(
            record["model_gflops_per_s"] / payload["roof_gflops"]
        )
        assert record["ours_over_this"] == pytest.approx(1.0)
    fastest = max(r["images_per_s"] for r in records)
    assert sum(r["is_best_of_framework"] for r in records) == 1
    assert payload["auto"]["choice"]["mixed_precision"] in ("float32", "mixed_bfloat16")
    assert "auto: precision " in result.stdout
    assert fastest > 0
    # `results import`: the figures file holds the same run, keyed as figures.py says
    done = run_script("results", "import", str(out), "--results", str(figures_file))
    assert done.returncode == 0, done.stderr[-3000:]
    values = json.loads(figures_file.read_text())["values"]
    run = "8-32-64-4-2_16_bs2_train_keras_vit_"
    for record, slug in zip(records, ("f32", "bf16"), strict=True):
        assert values[run + f"{slug}_img_s"]["value"] == record["images_per_s"]
        assert values[run + f"{slug}_peak_rss_mib"]["value"] == record["peak_rss_mb"]
    best = max(records, key=lambda r: r["images_per_s"])["setting"]
    assert values[run + "best_setting"] == best


@pytest.mark.large  # ~40 s (scores all 4950 held-out MNIST images twice)
def test_precision_agreement_tiny_run(tmp_path):
    out = tmp_path / "agreement.json"
    result = run_script(
        "precision_agreement.py",
        *("--hidden-dim", "16", "--mlp-dim", "16", "--num-layers", "1", "--epochs", "1"),
        *("--image-size", "8", "--shots-per-class", "5", "--batch-size", "25"),
        *("--json", str(out)),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(out.read_text())
    figures = payload["agreement"]
    assert figures["images"] == 5000 - 50  # every embedded MNIST image not trained on
    assert 0 <= figures["top1_agreement"] <= 1 and figures["max_abs_logit_difference"] >= 0
    assert len(payload["history_float32"]) == len(payload["history_chosen"]) == 1
    assert "top-1 agreement float32 vs" in result.stdout


@pytest.mark.large  # ~18 s on 2 cores, benchmark tooling only (.ci/run_large)
def test_ablation_tiny_run_checks_logits_then_times_both_models():
    result = run_script(
        "ablation",
        *("--model", TINY, "--image-size", "16", "--batch-size", "2", "--mode", "both"),
        *("--steps", "1", "--repeats", "1", "--warmup", "1", "--no-xla"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    difference = float(result.stdout.split("max logit difference ")[1].split()[0])
    assert difference < 1e-4
    for mode in ("infer", "train"):
        assert f"{mode} class_token_only / full_last_block = " in result.stdout


@pytest.mark.parametrize(
    "setting",
    # benchmark tooling only, ~12-17 s each (.ci/run_large)
    [pytest.param("float32+xla", marks=pytest.mark.large),
     pytest.param("mixed_bfloat16", marks=pytest.mark.large)],
)  # fmt: skip
def test_profile_step_tiny_run_breaks_the_step_down(tmp_path, setting):
    """XLA's compiled operations, or TensorFlow's own kernels without XLA (bfloat16 casts)."""
    result = run_script(
        "profile",
        *("--model", TINY, "--image-size", "16", "--batch-size", "2", "--steps", "1"),
        *("--setting", setting),
        env={"TMPDIR": str(tmp_path)},  # the profiler's trace folder goes here...
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(tmp_path.glob("keras_vit_profile_*")) == []  # ...and is removed again
    assert f"train, {setting}:" in result.stdout
    assert "| matrix products |" in result.stdout
    if setting == "mixed_bfloat16":
        assert "| casts |" in result.stdout
        # oneDNN fuses product and bias; Eigen's kernels (oneDNN off) run a plain MatMul
        fused = "_MklNativeFusedMatMul" if onednn_bfloat16_kernels() else "| MatMul |"
        assert fused in result.stdout
    if setting == "mixed_bfloat16":  # without XLA the attention core is its own kind
        assert "| attention core |" in result.stdout
    shares = [
        float(line.split("|")[3].strip().rstrip("%"))
        for line in result.stdout.splitlines()
        if line.startswith("| ") and line.count("|") == 5 and "% |" in line
    ]
    assert shares and sum(shares) == pytest.approx(100.0, abs=0.5)


ATTENTION = "vit_1/encoderblock_0_1/MultiHeadDotProductAttention_1_1/"


@pytest.mark.parametrize(
    ("node", "op_type", "core"),
    [  # node names as TensorFlow 2.21 names the kernels of keras_vit's attention layer
        (ATTENTION + "einsum/Einsum", "_MklEinsum", True),  # float32: q k^T
        ("gradient_tape/" + ATTENTION + "einsum_1/Einsum_1", "_MklEinsum", True),
        (ATTENTION + "Softmax", "_MklSoftmax", True),
        (
            ATTENTION + "ArithmeticOptimizer/FoldTransposeIntoMatMul_MatMul_1",
            "_MklBatchMatMulV2",
            True,
        ),
        ("gradient_tape/" + ATTENTION + "MatMul_1/MatMul_1", "_MklBatchMatMulV2", True),
        ("gradient_tape/" + ATTENTION + "Sum", "Sum", True),  # the softmax's gradient
        ("gradient_tape/" + ATTENTION + "mul_1/Mul", "Mul", True),
        (ATTENTION + "query_1/MatMul", "_MklBatchMatMulV2", False),  # float32 projections
        ("gradient_tape/" + ATTENTION + "out_1/MatMul/MatMul", "_MklBatchMatMulV2", False),
        (ATTENTION + "BiasAdd", "_MklNativeFusedMatMul", False),  # bfloat16: q/k/v in one
        ("gradient_tape/" + ATTENTION + "MatMul/MatMul", "_MklMatMul", False),
        (ATTENTION + "mul", "Mul", False),  # forward: the query's scaling
        ("vit_1/encoderblock_0_1/LayerNorm_0_1/Sum", "Sum", False),
    ],
)
def test_profile_step_finds_the_attention_core_by_node_name(scripts, node, op_type, core):
    assert scripts["step_profile"].is_attention_core(node, op_type) is core


@pytest.mark.large  # ~12 s, benchmark tooling only (.ci/run_large)
def test_scaling_tiny_run(tmp_path):
    out = tmp_path / "scaling.json"
    result = run_script(
        "scaling",
        *("--model", TINY, "--image-sizes", "16", "--batch-sizes", "1"),
        *("--base-image-size", "16", "--base-batch-size", "1", "--repeats", "1"),
        *("--no-xla", "--json", str(out)),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = json.loads(out.read_text())["results"]
    assert record["tokens"] == 5 and record["batch_size"] == 1
    assert record["step_s"] > 0 and record["peak_rss_mb"] > 0


@pytest.mark.large  # ~13 s, benchmark tooling only (.ci/run_large)
def test_input_pipeline_tiny_run(tmp_path):
    out = tmp_path / "pipeline.json"
    result = run_script(
        "input_pipeline.py",
        *("--model", TINY, "--image-size", "16", "--batch-size", "8", "--batches", "2"),
        *("--steps", "1", "--repeats", "1", "--no-xla", "--json", str(out)),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(out.read_text())
    assert payload["batch_size"] == 8 and payload["image_size"] == 16
    assert payload["ratio"] == pytest.approx(
        payload["pipeline_images_per_s"] / payload["train_images_per_s"]
    )


def test_cli_benchmark_tiny_run(tmp_path, capsys):
    from keras_vit.cli.main import main

    out = tmp_path / "cli.json"
    code = main(
        [
            "benchmark",
            *("--model", TINY, "--image-size", "16", "--batch-size", "2"),
            *("--mixed-precision", "mixed_bfloat16", "--no-jit-compile"),
            *("--steps", "1", "--repeats", "1", "--warmup", "1", "--gemm-sizes", "none"),
            *("--json", str(out)),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "| infer | keras_vit" in text and "| train | keras_vit" in text
    assert "Precision: precision mixed_bfloat16, XLA off" in text
    payload = json.loads(out.read_text())
    assert [r["mode"] for r in payload["results"]] == ["infer", "train"]
    assert payload["precision"]["mixed_precision"] == "mixed_bfloat16"
    assert [r["xla"] for r in payload["results"]] == [False, False]


@pytest.mark.parametrize(
    "bad_args",
    [["--model", "X/99"], ["--image-size", "100"], ["--repeats", "0"], ["--gemm-sizes", "a"]],
)
def test_cli_benchmark_bad_arguments_exit_2(bad_args, capsys):
    from keras_vit.cli.main import main

    assert main(["benchmark", *bad_args]) == 2
    assert "keras-vit benchmark: error:" in capsys.readouterr().err


@pytest.mark.large  # ~15 s, benchmark tooling only (.ci/run_large)
def test_serving_load_smoke(tmp_path):
    """benchmarks/studies/serving_load.py on 40 requests: the TF-only server answers the good ones
    as it does serially, rejects the bad ones naming the problem, and reports percentiles."""
    out = tmp_path / "serving.json"
    done = run_script(
        "serving_load.py",
        *("--requests", "40", "--threads", "2", "--pool", "8", "--bad-fraction", "0.3"),
        *("--json", str(out)),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["requests"] == 40 and result["bad_requests"] > 0
    assert all(result["checks"].values()), result
    assert result["latency_ms"]["p50"] <= result["latency_ms"]["p99"]
    assert all(
        "Invalid JPEG data" in m or "Unknown image file format" in m or "Input is empty" in m
        for m in result["bad_messages"]
    )
    assert run_script("serving_load.py", "--requests", "0").returncode == 2


@pytest.mark.large  # ~60 s: trains two models on three data sizes
def test_data_scaling_quick_run_writes_table_json_and_png(tmp_path):
    out, png = tmp_path / "data_scaling.json", tmp_path / "data_scaling.png"
    result = run_script("data_scaling.py", "--quick", "--json", str(out), "--png", str(png))
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(out.read_text())
    rows = payload["results"]
    assert sorted(r["model"] for r in rows) == ["ResNet", "ViT", "hybrid"]
    assert {r["size"] for r in rows} == {250}
    for row in rows:
        assert 0 <= row["fewshot"] <= 1 and 0 <= row["finetune"] <= 1 and row["params"] > 0
    assert "| hybrid fewshot |" in result.stdout and "| ViT finetune |" in result.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_data_scaling_replot_writes_figure_and_document_values(scripts, tmp_path):
    rows = [
        {"model": m, "size": s, "params": p, "step_ms": t, "fewshot": f, "finetune": g}
        for m, p, times in (("ViT", 10, (30.0, 10.0, 20.0)), ("ResNet", 7, (5.0, 6.0, 4.0)))
        for s, t, f, g in zip(
            (250, 500, 1000), times, (0.5, 0.6, 0.7), (0.8, 0.85, 0.9), strict=True
        )
    ]
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps({
        "args": {"sizes": [250, 500, 1000], "models": ["ViT", "ResNet"]},
        "results": rows, "wall_s": 600.0, "argv": ["--sizes", "250,500,1000"],
    }))  # fmt: skip
    png, results = tmp_path / "fig.png", tmp_path / "figures.json"
    argv = ["--replot", str(saved), "--png", str(png), "--results", str(results)]
    assert scripts["data_scaling"].main(argv) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    values = json.loads(results.read_text())["values"]
    assert values["ViT_fewshot_500"] == {"value": 0.6, "format": "{:.1%}"}
    assert values["ResNet_finetune_1000"]["value"] == 0.9
    assert values["ViT_step_ms"]["value"] == 20.0 and values["ResNet_step_ms"]["value"] == 5.0
    assert values["ViT_params"]["value"] == 10 and values["wall_min"]["value"] == 10.0


@pytest.mark.large  # two exports and a serving run: ~26 s (.ci/run_large)
def test_export_speed_tiny_run_serves_both_exports_from_tensorflow_only(tmp_path):
    out, figures_file = tmp_path / "export_speed.json", tmp_path / "figures.json"
    result = run_script(
        "export_speed.py",
        *("--model", TINY, "--image-size", "16", "--batch-size", "4"),
        *("--steps", "1", "--repeats", "2", "--warmup", "1"),
        *("--json", str(out), "--results", str(figures_file)),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(out.read_text())
    assert set(payload["img_s"]) == {
        "keras float32", "keras mixed_bfloat16", "export float32", "export mixed_bfloat16"
    }  # fmt: skip
    assert all(len(r) == 2 and min(r) > 0 for r in payload["img_s_repeats"].values())
    assert payload["max_abs_logit"] > 0.01  # the random head: logits are not all zero
    assert payload["f32_export_vs_keras_max_diff"] < 1e-5 * payload["max_abs_logit"] + 1e-6
    assert 0 < payload["bf16_vs_f32_export_max_diff_relative"] < 0.05  # bfloat16 rounding
    values = json.loads(figures_file.read_text())["values"]
    assert values["export_bf16_img_s"]["value"] == payload["img_s"]["export mixed_bfloat16"]


def test_in_process_ratio_is_the_median_of_per_round_ratios(scripts):
    """Worked by hand: peer/ours per round 12/10, 30/20, 11/10 -> median 1.2; each framework
    at its setting of lowest median (keras_vit float32+xla, 10 < 19 ms)."""
    module = scripts["race"]
    times = {
        ("keras_vit", "float32"): [19.0, 19.0, 19.0],
        ("keras_vit", "float32+xla"): [10.0, 20.0, 10.0],
        ("vit_keras", "float32"): [12.0, 30.0, 11.0],
        ("vit_keras", "float32+xla"): [40.0, 40.0, 40.0],
    }
    best = module.best_settings(times, ["keras_vit", "vit_keras"])
    assert best == {"keras_vit": "float32+xla", "vit_keras": "float32"}
    assert module.ours_over_peers(times, best) == {"vit_keras": pytest.approx(1.2)}


def test_in_process_rotates_the_first_point_every_round(scripts):
    calls = []
    steps = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    times = scripts["race"].time_rounds(steps, rounds=4, steps_per_point=1)
    assert calls == list("abcbcacababc")
    assert all(len(values) == 4 for values in times.values())


@pytest.mark.large  # ~14 s, benchmark tooling only (.ci/run_large)
def test_in_process_tiny_run_prints_every_point_and_writes_json(tmp_path):
    out = tmp_path / "peers.json"
    result = run_script(
        "in-process",
        *("--model", TINY, "--image-size", "16", "--batch-size", "2", "--mode", "train"),
        *("--frameworks", "keras_vit", "--settings", "float32,mixed_bfloat16"),
        *("--rounds", "2", "--steps", "1", "--warmup", "1", "--json", str(out)),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for setting in ("float32", "mixed_bfloat16"):
        assert f"| keras_vit | {setting}" in result.stdout
    payload = json.loads(out.read_text())
    assert set(payload["ms_per_step"]) == {"keras_vit:float32", "keras_vit:mixed_bfloat16"}
    assert all(len(v) == 2 and min(v) > 0 for v in payload["ms_per_step"].values())
    assert payload["keras_vit_over_peer"] == {} and payload["host"]["cores"] >= 1


@pytest.mark.large  # ~11 s, benchmark tooling only (.ci/run_large)
def test_in_process_times_timm_in_the_rotation_or_says_why_not(tmp_path):
    """timm joins the one-process rotation where torch and timm import (the optional lane);
    elsewhere (CI) the run goes on without it and says so."""
    import importlib.util

    has_timm = all(importlib.util.find_spec(name) for name in ("torch", "timm"))
    out = tmp_path / "peers.json"
    result = run_script(
        "in-process",
        *("--model", TINY, "--image-size", "16", "--batch-size", "2", "--mode", "train"),
        *("--frameworks", "keras_vit,timm", "--settings", "float32"),
        *("--rounds", "2", "--steps", "1", "--warmup", "1", "--json", str(out)),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(out.read_text())
    if has_timm:
        assert "| timm | float32" in result.stdout
        assert set(payload["ms_per_step"]) == {"keras_vit:float32", "timm:float32"}
        assert payload["keras_vit_over_peer"]["timm"] > 0
    else:
        assert "timm does not import here (ModuleNotFoundError: No module named" in result.stdout
        assert "): skipped" in result.stdout
        assert set(payload["ms_per_step"]) == {"keras_vit:float32"}
        assert payload["skipped"]["timm"].startswith("ModuleNotFoundError: No module named")


@pytest.mark.parametrize(
    "workloads, item, problem",
    [
        ("ti16", "ti16", "must be VARIANT:MODE with MODE infer or train"),
        ("Ti/16:fit", "Ti/16:fit", "must be VARIANT:MODE with MODE infer or train"),
        ("Ti/16:train,,B/16:infer", "", "must be VARIANT:MODE with MODE infer or train"),
        ("B/16:infer,Foo:train", "Foo:train", "--model 'Foo': "),
        ("Ti/16:train,Ti/16:train", "Ti/16:train", "is given twice"),
        ("B/16-0:infer", "B/16-0:infer", "--model 'B/16-0' names size 0 is not a positive"),
        ("B/16-200:infer", "B/16-200:infer", "--model 'B/16-200' names size 200 is not a"),
    ],
)
def test_targets_refuses_a_bad_workload_naming_it(workloads, item, problem):
    done = run_script("targets", "--workloads", workloads, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"{item!r} {problem}" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
