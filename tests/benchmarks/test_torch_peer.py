"""timm as a peer of benchmarks/bench.py run: its flags, worker names and records (no torch
needed), and, where torch and timm are installed, that timm's model is the same
architecture as keras_vit's (parameter count) and each setting's step runs; the timm side
of the step profile (benchmarks/bench.py profile --peer timm): its operator kinds, flags, and where
torch is installed a tiny profiled step."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks" / "harness"
TINY = "8,32,64,4,2"


@pytest.fixture(scope="module")
def modules():
    from benchmarks.harness import peers as torch_peer
    from benchmarks.harness import race, step_profile

    return race, torch_peer, step_profile


def test_timm_settings_parse_and_label_both_ways(modules):
    _, torch_peer, _ = modules
    for label in torch_peer.SETTING_PARTS:
        assert torch_peer.timm_label(*torch_peer.parse_timm_setting(label)) == label
    assert torch_peer.parse_timm_setting("bfloat16_autocast") == ("mixed_bfloat16", "eager")
    with pytest.raises(ValueError, match="'bfloat16'"):
        torch_peer.parse_timm_setting("bfloat16")


def test_timm_points_run_in_the_torch_interpreter_beside_both_roofs(modules):
    throughput, *_ = modules
    args = throughput.parse_args(
        ["--model", TINY, "--image-size", "16", "--frameworks", "keras_vit,timm"]
        + ["--torch-python", "/opt/torch/bin/python", "--settings", "float32+xla"]
    )
    groups = throughput.rotation_groups(args, "train")
    assert groups == [
        ["keras_vit:train:float32:xla", "gemm", "gemm_torch"],
        [
            "timm:train:float32:eager",
            "timm:train:mixed_bfloat16:eager",
            "timm:train:float32:compile",
            "gemm",
            "gemm_torch",
        ],
    ]
    assert throughput.worker_argv(args, "timm:train:float32:eager")[0] == "/opt/torch/bin/python"
    assert throughput.worker_argv(args, "gemm_torch")[0] == "/opt/torch/bin/python"
    assert throughput.worker_argv(args, "gemm")[0] == sys.executable
    plain = throughput.parse_args(["--frameworks", "keras_vit", "--gemm-sizes", "64"])
    assert plain.torch_python == sys.executable
    assert throughput.rotation_groups(plain, "infer") == [
        [
            "keras_vit:infer:float32:xla",
            "keras_vit:infer:mixed_bfloat16:xla",
            "keras_vit:infer:mixed_bfloat16:noxla",
            "gemm",
        ]
    ]


def test_records_of_timm_points_are_labelled_by_their_setting(modules):
    throughput, *_ = modules
    ready = {"params": 10, "warmup_s": 1.0}
    record = throughput.record_of("timm:train:mixed_bfloat16:eager", "train", [2.0, 4.0], ready, 5)
    assert (record["setting"], record["xla"], record["compiler"]) == (
        "bfloat16_autocast",
        False,
        "eager",
    )
    assert record["images_per_s"] == 3.0 and record["peak_rss_mb"] == 5
    ours = throughput.record_of("keras_vit:train:float32:xla", "train", [1.0], ready, 5)
    assert ours["setting"] == "float32+xla"


@pytest.fixture(scope="module")
def torch_side(modules):
    pytest.importorskip("torch")
    pytest.importorskip("timm")
    return modules[1]


def test_timm_model_has_keras_vits_parameter_count(torch_side):
    import keras_vit
    from keras_vit.evaluate.benchmarking import variant_arch

    arch = variant_arch(TINY)
    timm_model = torch_side.build_model(arch, 32, num_classes=10)
    ours = keras_vit.ViT(**arch, image_size=32, num_classes=10)
    assert sum(p.numel() for p in timm_model.parameters()) == ours.count_params()


@pytest.mark.parametrize("setting", ["float32", "bfloat16_autocast"])
@pytest.mark.parametrize("mode", ["train", "infer"])
def test_each_eager_setting_steps(torch_side, setting, mode):
    from keras_vit.evaluate.benchmarking import variant_arch

    model = torch_side.build_model(variant_arch(TINY), 16, num_classes=10)
    step = torch_side.make_step(model, mode, 2, 16, *torch_side.parse_timm_setting(setting), 10)
    first = step()
    assert first == first  # finite
    if mode == "train":
        for _ in range(5):
            last = step()
        assert last < first  # the optimizer steps


def test_torch_gemm_roof(torch_side):
    best, figures = torch_side.gemm_roof((64,))
    assert sorted(figures) == ["torch bfloat16", "torch float32"]
    assert best == max(v for per in figures.values() for v in per.values()) > 0


@pytest.mark.parametrize(
    ("operator", "kind"),
    [
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention core"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention core"),
        ("aten::_softmax", "attention core"),  # the unfused path: bmm, softmax, bmm
        ("aten::bmm", "attention core"),
        ("aten::addmm", "matrix products"),
        ("aten::mm", "matrix products"),
        ("aten::convolution_backward", "matrix products"),
        ("aten::copy_", "layout copies"),
        ("aten::native_layer_norm", "elementwise / reductions"),
        ("aten::gelu_backward", "elementwise / reductions"),
        ("aten::_foreach_addcdiv_", "elementwise / reductions"),
        ("aten::mmx", "elementwise / reductions"),  # kinds match whole names
    ],
)
def test_timm_profile_kinds(modules, operator, kind):
    assert modules[2].kind_of(operator) == kind


@pytest.mark.parametrize(
    "bad_args", [["--model", "X/99"], ["--steps", "0"], ["--setting", "float32+compile"]]
)
def test_timm_profile_rejects_bad_arguments(modules, bad_args, capsys):
    with pytest.raises(SystemExit) as raised:
        modules[2].parse_args(["--peer", "timm", *bad_args])
    assert raised.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_timm_profile_tiny_run_breaks_the_step_down(torch_side, modules, capsys):
    modules[2].main(["--peer", "timm", "--model", TINY, "--image-size", "16", "--batch-size", "2"])
    out = capsys.readouterr().out
    assert "timm 8,32,64,4,2 @16, batch 2, train, float32" in out
    assert "| attention core |" in out and "| matrix products |" in out
    shares = [
        float(line.split("|")[3].strip().rstrip("%"))
        for line in out.splitlines()
        if line.startswith("| ") and line.count("|") == 5 and "% |" in line
    ]
    assert shares and sum(shares) == pytest.approx(100.0, abs=0.5)
