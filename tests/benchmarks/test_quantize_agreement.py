"""benchmarks/studies/quantize_agreement.py: the modes it measures and the figures it writes."""

from __future__ import annotations

import importlib

import numpy as np
import pytest


@pytest.fixture(scope="module")
def study():
    return importlib.import_module("benchmarks.studies.quantize_agreement")


def test_openvino_int8_is_measured_by_its_export_not_by_keras_quantize(study, monkeypatch):
    images = np.zeros((3, 4, 4, 1), np.float32)
    monkeypatch.setattr(study, "quantized_copy", pytest.fail)
    monkeypatch.setattr(study, "openvino_int8_logits", lambda path, got: ("openvino", got))
    assert study.mode_logits("best.keras", "openvino_int8", images) == ("openvino", images)
    assert study.parse_args(["run"]).modes == ["int8", "int4", "float8", "openvino_int8"]


def test_figures_give_each_modes_accuracy_agreement_and_logit_difference(study):
    from benchmarks.figures import render

    figures = {
        "float32": {"accuracy": 0.978},
        "openvino_int8": {"accuracy": 0.977, "top1_agreement": 0.99812,
                          "max_abs_logit_difference": 0.04321, "predict_s": 2.0},
    }  # fmt: skip
    values = study.figure_values(figures, 1000)
    assert {key: render(entry) for key, entry in values.items()} == {
        "images": "1000", "float32_accuracy": "97.80%", "openvino_int8_accuracy": "97.70%",
        "openvino_int8_top1_agreement": "99.81%",
        "openvino_int8_max_abs_logit_difference": "0.043",
    }  # fmt: skip
