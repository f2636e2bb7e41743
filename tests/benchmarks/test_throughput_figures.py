"""`bench.py run` payloads as figures files (benchmarks/figures.py, `bench.py results`): the
keys, the merge of several runs into one file, the import of an old `--json` file, the tables."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def tf_figures():
    from benchmarks import figures

    return figures


def _record(framework, policy, xla, rates, *, rss, gflops, util, ours, best_ours):
    return {
        "framework": framework,
        "mode": "infer",
        "policy": policy,
        "xla": xla,
        "setting": f"{policy}+xla" if xla else policy,
        "images_per_s": sorted(rates)[len(rates) // 2],
        "images_per_s_all": rates,
        "peak_rss_mb": rss,
        "model_gflops_per_s": gflops,
        "utilisation": util,
        "ours_over_this": ours,
        "best_ours_over_this": best_ours,
    }


def _payload(batch_size=16):
    """A hand-made B/16 inference payload: keras_vit and keras-hub, two settings each (every
    framework asked for; vit-keras gave no result, as when it is not installed)."""
    results = [
        _record("keras_vit", "float32", True, [1.1, 1.0, 1.2], rss=1200.4, gflops=35.2,
                util=0.18, ours=1.0, best_ours=2.5),
        _record("keras_vit", "mixed_bfloat16", False, [2.4, 2.6, 2.5], rss=1300.0, gflops=88.0,
                util=0.454, ours=1.0, best_ours=1.0),
        _record("keras_hub", "float32", True, [1.4, 1.3, 1.5], rss=1400.0, gflops=49.0,
                util=0.25, ours=1.1 / 1.4, best_ours=2.5 / 1.4),
        _record("keras_hub", "mixed_bfloat16", False, [2.0, 1.9, 2.1], rss=1500.0, gflops=70.0,
                util=0.361, ours=2.5 / 2.0, best_ours=2.5 / 2.0),
    ]  # fmt: skip
    return {
        "config": {"variant": "B/16", "image_size": 224, "batch_size": batch_size,
                   "mode": "infer", "settings": "float32+xla,mixed_bfloat16",
                   "frameworks": ["keras_vit", "keras_hub", "vit_keras"], "steps": 3, "repeats": 3,
                   "warmup": 2, "gemm_sizes": "1024,2048", "interleave": "framework",
                   "one_at_a_time": False},
        "machine": {"cpus": 2, "platform": "Linux-x86_64", "load_average_before": [1.2, 1.0, 0.9],
                    "load_average_after": [1.5, 1.1, 0.95]},
        "roof_gflops": 193.74,
        "results": results,
        "auto": {"modes": {"infer": {"setting": "mixed_bfloat16", "of_fastest": 1.0}}},
    }  # fmt: skip


def test_values_of_a_run(tf_figures, tmp_path):
    path = tmp_path / "throughput_settings.json"
    ids = tf_figures.update_results(path, _payload(), date="2026-12-01", command="c")
    assert ids == ["b16_224_bs16_infer"]
    written = json.loads(path.read_text())
    values = {k: tf_figures.render(v) for k, v in written["values"].items()}
    run = "b16_224_bs16_infer_"
    assert values[run + "keras_vit_bf16_img_s"] == "2.50"
    assert values[run + "keras_vit_bf16_range"] == "2.40-2.60"
    assert values[run + "keras_vit_f32_xla_peak_rss_mib"] == "1200"
    assert values[run + "keras_hub_bf16_model_gflops"] == "70.0"
    assert values[run + "keras_hub_bf16_of_roof"] == "36%"
    assert values[run + "keras_hub_bf16_ours_over_this"] == "1.25x"
    assert values[run + "keras_vit_best_setting"] == "mixed_bfloat16"
    assert values[run + "keras_hub_best_setting"] == "mixed_bfloat16"
    assert values[run + "keras_hub_best_ours_over_this"] == "1.25x"
    assert values[run + "ours_over_best_peer"] == "1.25x"  # 2.5 / 2.0
    assert values[run + "roof_gflops"] == "193.7"
    assert values[run + "load_before"] == "1.20 / 1.00 / 0.90"
    assert values[run + "auto_setting"] == "mixed_bfloat16"
    assert values[run + "auto_of_fastest"] == "100%"
    assert written["runs"]["b16_224_bs16_infer"]["date"] == "2026-12-01"
    assert written["measured"]["date"] == "2026-12-01" and written["command"]


def test_a_second_run_is_added_and_a_repeated_run_replaced(tf_figures, tmp_path):
    path = tmp_path / "t.json"
    tf_figures.update_results(path, _payload(16), date="2026-11-30", command="first")
    tf_figures.update_results(path, _payload(8), date="2026-12-01", command="second")
    faster = _payload(16)
    faster["results"] = faster["results"][:2]  # keras_vit alone this time
    faster["results"][1]["images_per_s"] = 3.0
    tf_figures.update_results(path, faster, date="2026-12-02", command="third")
    written = json.loads(path.read_text())
    assert sorted(written["runs"]) == ["b16_224_bs16_infer", "b16_224_bs8_infer"]
    assert written["runs"]["b16_224_bs16_infer"]["command"] == "third"
    assert written["values"]["b16_224_bs16_infer_keras_vit_bf16_img_s"]["value"] == 3.0
    assert written["values"]["b16_224_bs8_infer_keras_vit_bf16_img_s"]["value"] == 2.5
    stale = [k for k in written["values"] if k.startswith("b16_224_bs16_infer_keras_hub")]
    assert stale == []  # the repeated run's old keras-hub figures are gone
    assert "b16_224_bs8_infer_keras_hub_bf16_img_s" in written["values"]
    assert written["measured"]["date"] == "2026-12-02"


def test_import_of_an_old_json_file_and_its_table(tf_figures, tmp_path):
    old = tmp_path / "b16_infer.json"
    old.write_text(json.dumps(_payload()))
    os.utime(old, (1764547200, 1764547200))  # 2025-12-01 00:00 UTC
    results = tmp_path / "throughput_settings.json"
    assert tf_figures.main(["import", str(old), "--results", str(results)], "results") == 0
    run = json.loads(results.read_text())["runs"]["b16_224_bs16_infer"]
    assert run["date"] in ("2025-11-30", "2025-12-01")  # the local date of that instant
    assert run["command"] == (
        "python -m benchmarks.bench run --model B/16 --image-size 224 --batch-size 16 "
        "--mode infer --settings float32+xla,mixed_bfloat16 "
        "--frameworks keras_vit,keras_hub,vit_keras --steps 3 --repeats 3 --warmup 2 "
        "--gemm-sizes 1024,2048 --interleave framework"
    )
    table = tf_figures.markdown_table(results, "b16_224_bs16_infer")
    lines = table.splitlines()
    assert lines[0] == (
        "| framework | f32_xla img/s | bf16 img/s | best setting | best, of roof "
        "| ours best/this best |"
    )
    shown = [tf_figures.FIGURE.sub(lambda m: m["text"], line) for line in lines[2:]]
    assert shown == [
        "| keras_vit | 1.10 | 2.50 | mixed_bfloat16 | 45% | 1.00x |",
        "| keras-hub | 1.40 | 2.00 | mixed_bfloat16 | 36% | 1.25x |",
    ]
    assert tf_figures.check_text(table, tmp_path) == []
    with pytest.raises(ValueError, match="no run 'ti16_224_bs16_train'"):
        tf_figures.markdown_table(results, "ti16_224_bs16_train")


@pytest.mark.parametrize("argv, message", [
    (["table", "{tmp}/throughput_settings.json", "nope"], "has no run 'nope'"),
    (["table", "{tmp}/missing.json", "b16_224_bs16_infer"], "No such file or directory"),
    (["import", "{tmp}/missing.json", "--results", "{tmp}/r.json"], "No such file or directory"),
    (["import", "{tmp}/bad.json", "--results", "{tmp}/r.json"], "Expecting value"),
])  # fmt: skip
def test_results_refuses_a_run_or_file_it_lacks_in_one_line(tf_figures, tmp_path, capsys,
                                                             argv, message):  # fmt: skip
    (tmp_path / "throughput_settings.json").write_text(json.dumps({"values": {"b16_x": 1}}))
    (tmp_path / "bad.json").write_text("not JSON")
    with pytest.raises(SystemExit) as raised:
        tf_figures.main([word.format(tmp=tmp_path) for word in argv], "results")
    assert raised.value.code == 2 and message in capsys.readouterr().err.splitlines()[-1]


def test_records_of_runs_before_settings_read_as_float32_xla(tf_figures):
    """Payloads of the first throughput script hold neither `policy` nor `xla` (float32, XLA unless
    `--no-xla`)."""
    old = _payload()
    old["results"] = old["results"][:1]
    for key in ("policy", "xla", "setting"):
        del old["results"][0][key]
    assert "keras_vit_f32_xla_img_s" in tf_figures.mode_values(old, "infer")
    old["config"]["no_xla"] = True
    values = tf_figures.mode_values(old, "infer")
    assert "keras_vit_f32_img_s" in values and values["keras_vit_best_setting"] == "float32"


def test_a_run_against_some_peers_is_named_after_them(tf_figures):
    config = {"variant": "S/16", "image_size": 224, "batch_size": 16}
    assert tf_figures.run_id(config, "train") == "s16_224_bs16_train"
    everyone = {**config, "frameworks": ["keras_vit", "keras_hub", "vit_keras"]}
    assert tf_figures.run_id(everyone, "train") == "s16_224_bs16_train"
    pair = {**config, "frameworks": ["keras_vit", "keras_hub"]}
    assert tf_figures.run_id(pair, "train") == "s16_224_bs16_train_keras_hub"
    alone = {**config, "frameworks": ["keras_vit"]}
    assert tf_figures.run_id(alone, "infer") == "s16_224_bs16_infer"
