"""TFDS names: never downloaded; a clear error when the data is not prepared locally."""

from __future__ import annotations

import logging

import pytest

from keras_vit import data
from keras_vit.data.pipeline import source_kind


def test_missing_tfds_dataset_names_dataset_and_data_dir(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        data.load(
            "cifar100", "train[:10%]", image_size=32, batch_size=8, training=True, data_dir=tmp_path
        )
    message = str(error.value)
    assert "'cifar100'" in message and str(tmp_path) in message and "never downloads" in message
    assert not any(tmp_path.iterdir()), "nothing may be downloaded into data_dir"


def test_describe_of_missing_tfds_dataset_fails_the_same_way(tmp_path, caplog):
    with caplog.at_level(logging.DEBUG), pytest.raises(FileNotFoundError, match="oxford_iiit_pet"):
        data.describe("oxford_iiit_pet", data_dir=tmp_path)
    # the clear error alone: no absl "Variant folder ... has no dataset_info.json" before it
    assert [r.getMessage() for r in caplog.records if r.name == "absl"] == []


def test_tfds_prefix_selects_tfds_over_the_embedded_set():
    assert source_kind("mnist") == "embedded"
    assert source_kind("tfds:mnist") == "tfds"
    assert source_kind("cifar10") == "tfds"


def test_unknown_source_lists_the_known_ones():
    with pytest.raises(ValueError) as error:
        data.load("no_such_dataset_xyz", image_size=28, batch_size=8, training=False)
    message = str(error.value)
    assert "no_such_dataset_xyz" in message and "'mnist'" in message and "'digits'" in message
    with pytest.raises(ValueError, match="Received: source=42"):
        data.describe(42)
