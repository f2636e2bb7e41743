"""benchmarks/studies/serving_cpu.py and lora_ranks.py (`bench.py serving`, `bench.py lora`):
their arguments, the serving rounds (timed against a fake clock whose call durations are
known), and the figures they write for the documents."""

from __future__ import annotations

import importlib
import types

import pytest


@pytest.fixture(scope="module")
def serving():
    return importlib.import_module("benchmarks.studies.serving_cpu")


@pytest.fixture(scope="module")
def lora():
    return importlib.import_module("benchmarks.studies.lora_ranks")


@pytest.mark.parametrize(
    "study, argv, message",
    [("serving", ["--batches", "1", "0"], "--batches must be positive"),
     ("serving", ["--iterations", "0"], "--iterations 0"),
     ("serving", ["--models", "L/16"], "invalid choice: 'L/16'"),
     ("serving", ["--skip", "onnx:int4"], "--skip takes RUNTIME:PRECISION"),
     ("lora", ["--ranks", "4", "0"], "--ranks must be positive ints"),
     ("lora", ["--steps", "0"], "--steps 0"),
     ("lora", ["--timing-rounds", "0"], "--timing-rounds 0")],
)  # fmt: skip
def test_bad_arguments_are_refused_naming_them(serving, lora, study, argv, message, capsys):
    module = serving if study == "serving" else lora
    with pytest.raises(SystemExit) as raised:
        module.parse_args(argv)
    assert raised.value.code == 2
    assert message in capsys.readouterr().err


def test_a_missing_peer_file_is_refused_before_any_export(serving):
    with pytest.raises(SystemExit) as raised:
        serving.main(["--peer-onnx", "no_such_file.onnx"])
    assert "--peer-onnx 'no_such_file.onnx': no such file" in str(raised.value)


def test_bench_has_the_two_verbs():
    from benchmarks import bench

    assert bench.VERBS["serving"] == "studies.serving_cpu"
    assert bench.VERBS["lora"] == "studies.lora_ranks"


class FakeClock:
    """`time.perf_counter` stand-in: each runner call advances it by the runner's duration."""

    def __init__(self):
        self.now, self.calls = 0.0, []

    def runner(self, name, seconds):
        def run(batch):
            self.calls.append(name)
            self.now += seconds

        return run


def test_rounds_rotate_and_stop_at_each_points_budget(serving, monkeypatch):
    import numpy as np

    clock = FakeClock()
    monkeypatch.setattr(serving.time, "perf_counter", lambda: clock.now)
    points = {"fast": clock.runner("fast", 0.01), "slow": clock.runner("slow", 2.0),
              "mid": clock.runner("mid", 0.5)}  # fmt: skip
    inputs = {name: np.zeros((4, 2, 2, 1), np.float32) for name in points}
    args = types.SimpleNamespace(warmup=1, iterations=6, point_budget_s=3.0, min_iterations=2)
    rows = serving.time_points(points, inputs, args)
    # 3 s a point: 6 calls of 10 ms and of 0.5 s, but only the minimum 2 of 2 s
    assert {name: row["iterations"] for name, row in rows.items()} == {
        "fast": 6, "slow": 2, "mid": 6}  # fmt: skip
    assert rows["fast"]["img_s"] == pytest.approx(4 / 0.01)
    assert rows["slow"]["img_s"] == pytest.approx(4 / 2.0)
    assert rows["mid"]["p50_ms"] == pytest.approx(500.0)
    assert rows["mid"]["p99_ms"] == pytest.approx(500.0)
    timed = clock.calls[3:]  # after one warm-up call each
    assert timed[:6] == ["fast", "slow", "mid", "slow", "mid", "fast"]  # the order rotates


def test_serving_figures_name_model_runtime_precision_and_batch(serving):
    rows = [{"model": "B/16", "runtime": "onnx", "precision": "int8", "batch": 32,
             "iterations": 3, "img_s": 12.345, "p50_ms": 2591.9, "p99_ms": 2700.04}]  # fmt: skip
    exports = [
        {"model": "B/16", "runtime": "onnx", "precision": "int8", "max_difference": 0.00123},
        {"model": "default", "runtime": "openvino", "precision": "int8", "skipped": "why"},
        {
            "model": "B/16",
            "runtime": "openvino",
            "precision": "int8",
            "max_difference": 0.04,
            "probe_top1_agreement": 5 / 6,
        },
    ]
    values = serving.figure_values(rows, exports, None)
    rendered = {key: entry["format"].format(entry["value"]) for key, entry in values.items()}
    assert rendered == {
        "b16_onnx_int8_b32_img_s": "12.3", "b16_onnx_int8_b32_p50_ms": "2591.9",
        "b16_onnx_int8_b32_p99_ms": "2700.0", "b16_onnx_int8_b32_iterations": "3",
        "b16_onnx_int8_max_difference": "1.2e-03", "default_openvino_int8_max_difference": "why",
        "b16_openvino_int8_max_difference": "4.0e-02",
        "b16_openvino_int8_probe_top1_agreement": "83%",
    }  # fmt: skip


def test_skipped_points_are_recorded_not_exported(serving, monkeypatch):
    monkeypatch.setattr(serving, "litert_dynamic_range", pytest.fail)
    done = serving.export_all(None, "unused", ("litert",), ("int8",), skip=("litert:int8",))
    assert done[("litert", "int8")]["skipped"].startswith("not run")


def test_lora_figures_give_each_variants_share_of_full_fine_tuning(lora):
    def row(variant, rank, params):
        return {"variant": variant, "lora_rank": rank, "trainable_params": params,
                "peak_rss_mib": 1400.4, "rss_growth_during_fit_mib": 240.6,
                "step_ms_median": 120.04, "test_accuracy": 0.8474}  # fmt: skip

    values = lora.figure_values([row("full", None, 200_000), row("8", 8, 30_000)])
    assert values["r8_trainable_share"]["value"] == pytest.approx(0.15)
    assert values["r8_trainable_share"]["format"].format(0.15) == "15.0%"
    assert values["full_trainable_params"]["format"].format(200_000) == "200,000"
    assert values["full_test_accuracy"]["format"].format(0.8474) == "84.7%"
    assert set(values) == {
        f"{slug}_{key}" for slug in ("full", "r8")
        for key in ("trainable_params", "trainable_share", "peak_rss_mib",
                    "rss_growth_during_fit_mib", "step_ms_median", "test_accuracy")
    }  # fmt: skip


def _row(runtime, precision, batch, img_s):
    return {"model": "B/16", "runtime": runtime, "precision": precision, "batch": batch,
            "iterations": 3, "warmup": 1, "img_s": img_s, "p50_ms": 1.0, "p99_ms": 2.0}  # fmt: skip


def _export(runtime, precision, **figures):
    return {"model": "B/16", "runtime": runtime, "precision": precision, **figures}


def test_merge_keeps_the_files_other_points_and_names_each_points_run(serving, tmp_path):
    """`--merge`: a run of some points joins a results file of one run (which becomes run 1);
    a point the new run measured replaces the file's, a point it skipped keeps the file's, and
    the timed peer of run 1 stays (no "not measured" note for it)."""
    import json

    path = tmp_path / "serving.json"
    first = ["--models", "B/16", "--runtimes", "onnx", "--precisions", "float32",
             "--peer-onnx", "peer.onnx", "--results", str(path)]  # fmt: skip
    timed = [_row("onnx", "float32", 1, 0.8), _row("timm_onnx", "float32", 1, 0.6)]
    made = [_export("onnx", "float32", max_difference=3e-6)]
    serving.write(serving.parse_args(first), ["first"], timed, made, [], 0.0, done=True)
    argv = ["--models", "B/16", "--runtimes", "saved_model", "onnx", "--skip", "onnx:float32",
            "--merge", "--results", str(path)]  # fmt: skip
    loads = [{"when": "B/16 start", "load_average": [2.5, 2.0, 1.5]}]
    timed = [_row("saved_model", "float32", 1, 0.9), _row("onnx", "int8", 1, 0.4)]
    made = [_export("saved_model", "float32", max_difference=1e-6),
            _export("onnx", "float32", skipped="not run: left out of this run (--skip)"),
            _export("onnx", "int8", max_difference=2e-3)]  # fmt: skip
    serving.write(serving.parse_args(argv), argv, timed, made, loads, 0.0, done=True)
    merged = json.loads(path.read_text())
    assert [(run["run"], run["command"].split()[-1]) for run in merged["runs"]] == [
        (1, "first"), (2, str(path))]  # fmt: skip
    assert merged["runs"][1]["load_averages"] == loads
    assert [(row["runtime"], row["precision"], row["run"]) for row in merged["rows"]] == [
        ("saved_model", "float32", 2), ("onnx", "float32", 1), ("onnx", "int8", 2),
        ("timm_onnx", "float32", 1)]  # fmt: skip
    assert [(made["runtime"], made["precision"], made["run"]) for made in merged["exports"]] == [
        ("saved_model", "float32", 2), ("onnx", "float32", 1), ("onnx", "int8", 2)]  # fmt: skip
    values = merged["values"]
    assert values["b16_onnx_float32_max_difference"]["value"] == 3e-6
    assert values["b16_onnx_int8_b1_img_s"]["value"] == 0.4
    assert values["b16_timm_onnx_float32_b1_img_s"]["value"] == 0.6
    assert "b16_timm_onnx_note" not in values
    assert merged["measured"]["notes"].startswith("2 runs on this host merged")
    assert " && " in merged["command"]
    with pytest.raises(SystemExit):  # --merge needs the file to merge into
        serving.parse_args(["--merge"])


def test_a_file_written_before_runs_were_named_becomes_run_1(serving):
    legacy = {"command": "python -m benchmarks.bench serving --models B/16",
              "measured": {"date": "2026-01-02", "notes": "load 9"}, "wall_s": 12.0,
              "load_averages": [{"when": "B/16 start", "load_average": [9.0, 8.0, 7.0]}],
              "rows": [_row("onnx", "float32", 32, 0.8)], "exports": []}  # fmt: skip
    runs, rows, exports = serving.file_runs(legacy)
    assert runs == [{"run": 1, "command": legacy["command"], "date": "2026-01-02",
                     "notes": "load 9", "wall_s": 12.0,
                     "load_averages": legacy["load_averages"]}]  # fmt: skip
    assert rows[0]["run"] == 1 and exports == []
