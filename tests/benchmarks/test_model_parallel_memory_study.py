"""benchmarks/studies/model_parallel_memory.py's step figures: XLA's per-device bytes of a
compiled step summed as arguments + outputs - aliased (donated) + temporaries, and the keys
the documents quote, "not measured" where a step's compile did not finish."""

from __future__ import annotations

import types

import pytest

from benchmarks.studies import model_parallel_memory as study

MIB = 2**20


def test_a_steps_bytes_in_mib_and_their_total():
    analysis = types.SimpleNamespace(
        argument_size_in_bytes=500 * MIB,
        output_size_in_bytes=490 * MIB,
        alias_size_in_bytes=480 * MIB,
        temp_size_in_bytes=1000 * MIB,
    )
    assert study.step_bytes(analysis) == {
        "step_arguments_mib": 500.0,
        "step_outputs_mib": 490.0,
        "step_aliased_mib": 480.0,
        "step_temp_mib": 1000.0,
        "step_total_mib": 1510.0,  # 500 + 490 - 480 + 1000: the donated buffers counted once
    }


def test_step_figures_are_keyed_by_mesh_and_precision_and_say_not_measured():
    measured = {"model": "B/16", "batch_axis": 2, "model_axis": 2, "precision": "float32"}
    measured.update({f"step_{field}_mib": 1.3 for field in study.STEP_FIELDS})
    skipped = {"model": "B/16", "batch_axis": 1, "model_axis": 4, "precision": "mixed_bfloat16"}
    skipped["not_measured"] = "the step's compile did not finish (killed after 300 s)"
    values = study.values_of({"points": [], "shapes": {}, "step_points": [measured, skipped]})
    assert values["b16_2x2_f32_step_temp_mib"] == {"value": "1.3", "format": "{}"}
    assert values["b16_2x2_f32_step_total_mib"]["value"] == "1.3"
    assert values["b16_1x4_bf16_step_total_mib"]["value"] == "not measured"
    assert len(values) == 2 * len(study.STEP_FIELDS)


def step_point(model, batch, model_axis, precision, total):
    return {"model": model, "batch_axis": batch, "model_axis": model_axis,
            "precision": precision, "step_total_mib": total}  # fmt: skip


def test_merged_steps_replace_the_remeasured_points_and_keep_the_others_in_table_order():
    kept = [step_point("B/16", 1, 1, "float32", 1.0), step_point("L/16", 1, 2, "float32", 2.0)]
    measured = [
        step_point("L/16", 2, 2, "mixed_bfloat16", 3.0),
        step_point("L/16", 1, 2, "float32", 4.0),  # measured again: replaces 2.0
        step_point("L/16", 1, 1, "float32", 5.0),
    ]
    merged = study.merged_steps(kept, measured)
    assert [(p["model"], p["batch_axis"], p["model_axis"], p["precision"], p["step_total_mib"])
            for p in merged] == [
        ("B/16", 1, 1, "float32", 1.0),
        ("L/16", 1, 1, "float32", 5.0),
        ("L/16", 1, 2, "float32", 4.0),
        ("L/16", 2, 2, "mixed_bfloat16", 3.0),
    ]  # fmt: skip


def test_a_merge_into_a_file_of_another_image_size_is_refused(tmp_path):
    out = tmp_path / "model_parallel_memory.json"
    out.write_text('{"image_size": 224, "batch_per_replica": 8, "command": "c"}')
    args = study.parse_args(["--merge", "--out", str(out), "--image-size", "384"])
    with pytest.raises(SystemExit, match="image_size=224; this run asks for 384"):
        study.merge_record(args, env={})
