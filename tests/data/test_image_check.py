"""Tests of keras_vit.data.image_check and of folder datasets holding bad image files."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from keras_vit import data
from keras_vit.data import image_check
from tests.helpers.bad_images import CLASSES, GOOD_PER_CLASS, bomb_png, write_folder


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "images"
    good, bad = write_folder(root)
    return root, good, bad


def test_each_bad_file_has_a_reason_and_odd_good_files_pass(folder):
    _, good, bad = folder
    for path in good:
        assert image_check.image_problem(path) is None, path
    for path, words in bad.items():
        problem = image_check.image_problem(path)
        assert problem is not None and words in problem, (path, problem)


def test_decompression_bomb_is_refused_before_decoding(folder, tmp_path, monkeypatch):
    _, _, bad = folder
    decoded = []
    real = image_check._decode_problem
    monkeypatch.setattr(image_check, "_decode_problem", lambda *a: decoded.append(a) or real(*a))
    (bomb,) = [path for path in bad if path.name == "bomb.png"]
    assert "refused before decoding" in image_check.image_problem(bomb)
    # 8000 x 8000: under Pillow's own limit, over keras_vit's (and over a lower one given).
    medium = tmp_path / "medium.png"
    medium.write_bytes(bomb_png(8000, 8000))
    assert "header claims 8000 x 8000 pixels" in image_check.image_problem(medium)
    assert "limit of 1000" in image_check.image_problem(bad_small := medium, max_pixels=1000)
    assert decoded == []
    assert bad_small.stat().st_size < 200


def test_skip_logs_count_and_names_and_training_iterates(folder, caplog):
    root, good, bad = folder
    with caplog.at_level(logging.WARNING, logger="keras_vit.data.image_check"):
        dataset = data.load(str(root), "train", image_size=16, batch_size=2, training=True)
        batches = list(dataset)
    (record,) = [r for r in caplog.records if "Skipped" in r.getMessage()]
    message = record.getMessage()
    assert f"Skipped {len(bad)} bad image file(s) of {len(good) + len(bad)}" in message
    for path in bad:
        assert str(path) in message
    assert sum(len(labels) for _, labels in batches) == (len(good) // 2) * 2
    images = np.concatenate([images for images, _ in batches])
    # gray MNIST digits and colour odd files: the folder is read in colour (colour wins)
    assert images.shape[1:] == (16, 16, 3) and np.isfinite(images).all()


def test_skip_keeps_every_good_file_with_its_label(folder):
    root, good, _ = folder
    dataset = data.load(str(root), "train", image_size=8, batch_size=None, training=False)
    labels = [int(label) for _, label in dataset]
    expected = [CLASSES.index(path.parent.name) for path in sorted(good)]
    assert labels == expected and len(labels) == 2 * GOOD_PER_CLASS + 3


def test_fail_names_the_first_bad_file(folder):
    root, _, bad = folder
    with pytest.raises(image_check.BadImageError) as info:
        data.load(str(root), "train", image_size=8, batch_size=4, training=False, bad_images="fail")
    message = str(info.value)
    first = sorted(bad)[0]
    assert message.startswith(f"Bad image {first}: {bad[first]}") or f"Bad image {first}" in message
    assert f"{len(bad)} bad file(s)" in message and "--bad-images skip" in message


def test_unknown_policy_is_rejected():
    with pytest.raises(ValueError, match="bad_images must be one of"):
        image_check.check_images([], "ignore")
