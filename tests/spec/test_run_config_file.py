"""keras_vit.spec.run_config_file: the model arguments of the run a `.npz` sits in."""

from __future__ import annotations

import json

from keras_vit.spec.run_config_file import RUN_CONFIG_FILE, kwargs_from_run_config


def test_the_model_arguments_of_the_run_folder(tmp_path):
    kwargs = {"resnet_groups": 8, "hidden_dim": 32}
    (tmp_path / RUN_CONFIG_FILE).write_text(json.dumps({"resolved": {"model_kwargs": kwargs}}))
    assert kwargs_from_run_config(tmp_path / "best.npz") == kwargs


def test_no_run_config_gives_none(tmp_path):
    assert kwargs_from_run_config(tmp_path / "best.npz") is None
    for text in ("{not json", "[]", '{"resolved": {}}', '{"resolved": {"model_kwargs": [1]}}'):
        (tmp_path / RUN_CONFIG_FILE).write_text(text)
        assert kwargs_from_run_config(tmp_path / "best.npz") is None, text
    (tmp_path / RUN_CONFIG_FILE).write_bytes(b"\xff\xfe\x00")
    assert kwargs_from_run_config(tmp_path / "best.npz") is None
