"""A folder of real PNG files (written from the embedded MNIST set), one sub-folder per class."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from keras_vit import data
from keras_vit.data import embedded

PER_CLASS = 4
CLASSES = (3, 5, 7)


def _write_pngs(root, images, labels):
    """Writes images as root/<class>/<index>.png; returns {path: (pixels, label)} in file order."""
    written = {}
    for index, (image, label) in enumerate(zip(images, labels, strict=False)):
        folder = root / f"digit_{label}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{index:04d}.png"
        path.write_bytes(tf.io.encode_png(image).numpy())
        written[path] = (image, label)
    return dict(sorted(written.items()))


def _pick(split):
    raw = embedded.read_embedded("mnist")
    x, y = raw[f"x_{split}"], raw[f"y_{split}"]
    index = np.concatenate([np.flatnonzero(y == c)[:PER_CLASS] for c in CLASSES])
    return x[index][..., None], y[index]


@pytest.fixture
def flat_folder(tmp_path):
    return tmp_path, _write_pngs(tmp_path, *_pick("test"))


def test_folder_eval_pipeline_is_the_scaled_png_pixels(flat_folder):
    root, written = flat_folder
    images, labels = zip(
        *data.load(root, image_size=28, batch_size=None, training=False), strict=False
    )
    expected = np.stack([(pixels - 127.5) / 127.5 for pixels, _ in written.values()])
    class_of = {c: i for i, c in enumerate(CLASSES)}
    np.testing.assert_allclose(np.stack(images), expected, atol=1e-6)
    assert [int(k) for k in labels] == [class_of[label] for _, label in written.values()]
    batch = next(iter(data.load(str(root), image_size=28, batch_size=5, training=False)))[0]
    assert batch.shape == (5, 28, 28, 1)
    assert batch.numpy().min() == expected[:5].min() and batch.numpy().max() == expected[:5].max()


def test_folder_describe_and_training_batches(flat_folder):
    root, _ = flat_folder
    info = data.describe(root)
    assert info.class_names == tuple(f"digit_{c}" for c in CLASSES)
    assert (info.num_classes, info.channels) == (3, 1)
    assert info.num_examples == {"train": PER_CLASS * len(CLASSES)}
    dataset = data.load(root, image_size=32, batch_size=5, training=True, channels=3)
    batches = list(dataset)
    assert [b[0].shape for b in batches] == [(5, 32, 32, 3)] * 2  # 12 images, remainder dropped
    assert all(
        -1.0 <= float(tf.reduce_min(x)) and float(tf.reduce_max(x)) <= 1.0 for x, _ in batches
    )


def test_folder_slices_hold_out_part_of_each_class(flat_folder):
    root, _ = flat_folder
    kwargs = dict(image_size=28, batch_size=None, training=False)
    head = [int(y) for _, y in data.load(root, "train[:75%]", **kwargs)]
    tail = [int(y) for _, y in data.load(root, "train[75%:]", **kwargs)]
    assert np.bincount(head).tolist() == [3, 3, 3] and np.bincount(tail).tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match=r"train\[90%:\]"):
        data.load(root, "test", **kwargs)


def test_folder_with_split_subfolders(tmp_path):
    _write_pngs(tmp_path / "train", *_pick("train"))
    _write_pngs(tmp_path / "test", *_pick("test"))
    info = data.describe(tmp_path)
    assert info.num_examples == {"test": 12, "train": 12}
    images = [
        x for x, _ in data.load(tmp_path, "test", image_size=14, batch_size=None, training=False)
    ]
    assert len(images) == 12 and images[0].shape == (14, 14, 1)


def test_rgb_pngs_give_three_channels(tmp_path):
    rgb = np.random.default_rng(0).integers(0, 256, (4, 10, 10, 3), dtype=np.uint8)
    _write_pngs(tmp_path, rgb, np.array([0, 0, 1, 1]))
    assert data.describe(tmp_path).channels == 3
    images = np.stack(
        [x for x, _ in data.load(tmp_path, image_size=10, batch_size=None, training=False)]
    )
    np.testing.assert_allclose(images, (rgb - 127.5) / 127.5, atol=1e-6)


def test_inception_crop_is_taken_from_the_image_at_its_own_resolution(tmp_path):
    """Stripes 2 pixels wide on a 64x64 PNG: resized to 8x8 first (bilinear samples at
    x = 3.5 + 8k, between a white and a black column) they blur to a uniform gray, so a crop
    of the resized image is flat; a small crop (1/64-2/64 of the area) of the original,
    resized to 8x8, keeps the stripes."""
    stripes = np.where((np.arange(64) // 2) % 2 == 1, 255, 0).astype(np.uint8)
    image = np.broadcast_to(stripes[None, :, None], (64, 64, 1)).copy()
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "stripes.png").write_bytes(tf.io.encode_png(image).numpy())
    resized_first = tf.image.resize(image.astype("float32"), (8, 8)).numpy()
    assert np.ptp(resized_first) < 1  # what the old pipeline cropped from
    crop = data.Augmentation(
        crop_area_range=(1 / 64, 2 / 64), aspect_ratio_range=(1, 1), flip=False
    )
    for seed in range(3):
        pipeline = data.load(
            str(tmp_path), "train", image_size=8, batch_size=None, training=True,
            augment=crop, shuffle_seed=seed,
        )  # fmt: skip
        ((pixels, label),) = pipeline.take(1).as_numpy_iterator()
        assert pixels.shape == (8, 8, 1) and label == 0
        assert np.ptp(pixels) > 1.0, seed  # contrast over half of [-1, 1]: the stripes survive


def test_folder_images_keep_their_size_until_the_pipeline_resizes(tmp_path):
    from keras_vit.data import folder, splits

    (tmp_path / "a").mkdir()
    for name, size in (("wide.png", (10, 30)), ("tall.png", (20, 6))):
        pixels = np.full((*size, 3), 200, np.uint8)
        (tmp_path / "a" / name).write_bytes(tf.io.encode_png(pixels).numpy())
    examples, count = folder.folder_examples(tmp_path, splits.parse_split("train"), channels=1)
    shapes = sorted(tuple(image.shape) for image, _ in examples.as_numpy_iterator())
    assert count == 2 and shapes == [(10, 30, 1), (20, 6, 1)]
    batch, _ = next(
        iter(data.load(str(tmp_path), "train", image_size=4, batch_size=2, training=False))
    )
    assert batch.shape == (2, 4, 4, 3)


@pytest.mark.parametrize("colour_at", [0, 5, 11])
def test_a_folder_mixing_gray_and_colour_is_read_in_colour_with_a_warning(
    tmp_path, caplog, colour_at
):
    """The channels came from the first image alone: a gray first image made every later
    colour image gray, silently. Now colour wins wherever it is among the sampled images."""
    rng = np.random.default_rng(0)
    gray = rng.integers(0, 256, (12, 10, 10, 1), dtype=np.uint8)
    labels = np.repeat([0, 1], 6)
    _write_pngs(tmp_path, gray, labels)
    colour = rng.integers(0, 256, (10, 10, 3), dtype=np.uint8)
    paths = sorted(tmp_path.rglob("*.png"))
    paths[colour_at].write_bytes(tf.io.encode_png(colour).numpy())
    with caplog.at_level("WARNING"):
        assert data.describe(tmp_path).channels == 3
    assert "mix gray and colour; reading all of them in colour" in caplog.text
    images = [x for x, _ in data.load(tmp_path, image_size=10, batch_size=None, training=False)]
    assert {tuple(image.shape) for image in images} == {(10, 10, 3)}


def test_an_all_gray_folder_stays_gray_without_a_warning(tmp_path, caplog):
    gray = np.random.default_rng(1).integers(0, 256, (40, 6, 6, 1), dtype=np.uint8)
    _write_pngs(tmp_path, gray, np.repeat([0, 1], 20))
    with caplog.at_level("WARNING"):
        assert data.describe(tmp_path).channels == 1
    assert "colour" not in caplog.text
