"""Every image format the docs list, in every pixel layout, into 1, 3 and 4 channel models,
through every entry point: `keras_vit.data.decode`, folder datasets (`keras_vit.data.load`),
`keras-vit predict` and `explain` (their image readers) and the SavedModel's `serving_bytes`.

The files are written by Pillow here; the reference pixels are Pillow's own decoding of the
same bytes, converted with Pillow's `Image.convert` ("L": ITU-R 601 luma, "RGB", "RGBA":
opaque alpha added), not by keras_vit. Pillow's integer luma and TensorFlow's float luma
may differ by one level; JPEG decoders (libjpeg-turbo's fast and accurate IDCTs) by a few.
"""

from __future__ import annotations

import io
import logging

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import keras_vit
from keras_vit import data
from keras_vit.cli import explain, predict
from keras_vit.data import decode, image_check
from keras_vit.export import export_saved_model
from keras_vit.spec import image_formats
from tests.output_checks import randomize_weights

SIZE = 16
CHANNELS = (1, 3, 4)
PILLOW_MODE = {1: "L", 3: "RGB", 4: "RGBA"}

# (format, Pillow mode written, save options): each layout docs/data_and_recipes.md and
# docs/serving.md name.
LAYOUTS = [
    ("PNG", "L", {}),
    ("PNG", "LA", {}),
    ("PNG", "P", {}),
    ("PNG", "RGB", {}),
    ("PNG", "RGBA", {}),
    ("PNG", "I;16", {}),
    ("JPEG", "L", {"quality": 95}),
    ("JPEG", "RGB", {"quality": 95}),
    ("JPEG", "CMYK", {"quality": 95}),
    ("BMP", "L", {}),
    ("BMP", "P", {}),
    ("BMP", "RGB", {}),
    ("BMP", "RGBA", {}),
    ("GIF", "L", {}),
    ("GIF", "P", {}),
    ("WEBP", "RGB", {"lossless": True}),
    ("WEBP", "RGBA", {"lossless": True}),
]
IDS = [f"{fmt}-{mode}" for fmt, mode, _ in LAYOUTS]


def _pixels(seed=0):
    """A smooth 16 x 16 RGBA picture (JPEG decoders agree closely on smooth content)."""
    rng = np.random.default_rng(seed)
    i, j = np.meshgrid(np.arange(SIZE), np.arange(SIZE), indexing="ij")
    phase = rng.uniform(0, 6)
    planes = [
        14 * i + 10,
        12 * j + 20,
        127 + 100 * np.sin(i / 3 + j / 4 + phase),
        255 - 9 * (i + j),
    ]
    return np.clip(np.stack(planes, -1), 0, 255).astype(np.uint8)


def encoded(fmt, mode, options, seed=0) -> bytes:
    pixels = _pixels(seed)
    if mode == "I;16":
        image = Image.fromarray(pixels[..., 0].astype(np.uint16) * 257)
    else:
        image = Image.fromarray(pixels, "RGBA").convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def reference(data_bytes: bytes, channels: int) -> np.ndarray:
    """Pillow's decoding of the bytes in `channels` channels, uint8 `(16, 16, channels)`."""
    image = Image.open(io.BytesIO(data_bytes))
    image.load()
    if image.mode == "I;16":  # 16-bit gray: Pillow converts by clipping, scale it first
        image = Image.fromarray((np.asarray(image) >> 8).astype(np.uint8))
    out = np.asarray(image.convert(PILLOW_MODE[channels]))
    return out.reshape(SIZE, SIZE, channels)


def tolerance(fmt, channels):
    """Pixel levels: one for the luma's rounding, a few for JPEG (TensorFlow's default fast
    integer IDCT, as TFDS decodes; Pillow uses the accurate one; a CMYK file's four planes
    add up to 11 levels, 2 on average)."""
    if fmt == "JPEG":
        return 12
    return 1 if channels == 1 else 0


def _write(path, fmt, mode, options, seed=0):
    path.write_bytes(encoded(fmt, mode, options, seed))
    return path


@pytest.mark.parametrize("channels", CHANNELS)
@pytest.mark.parametrize("fmt, mode, options", LAYOUTS, ids=IDS)
def test_decode_pixels_matches_pillow(fmt, mode, options, channels):
    raw = encoded(fmt, mode, options)
    got = decode.decode_pixels(tf.constant(raw), channels).numpy()
    assert got.dtype == np.uint8 and got.shape == (SIZE, SIZE, channels)
    expected = reference(raw, channels)
    assert np.abs(got.astype(int) - expected).max() <= tolerance(fmt, channels)


def test_the_layout_table_covers_every_listed_format():
    assert {fmt for fmt, _, _ in LAYOUTS} == set(image_formats.DECODED_FORMATS)


@pytest.fixture(scope="module")
def image_files(tmp_path_factory):
    """One file per layout in class folder `all/`, named by its layout."""
    root = tmp_path_factory.mktemp("formats")
    folder = root / "all"
    folder.mkdir()
    ext = {"PNG": "png", "JPEG": "jpg", "BMP": "bmp", "GIF": "gif", "WEBP": "webp"}
    paths = [
        _write(folder / f"{k:02d}_{fmt}_{mode.replace(';', '')}.{ext[fmt]}", fmt, mode, opts)
        for k, (fmt, mode, opts) in enumerate(LAYOUTS)
    ]
    return root, paths


def _scaled(pixels):
    return (pixels.astype(np.float32) - 127.5) / 127.5


@pytest.mark.parametrize("channels", CHANNELS)
def test_folder_dataset_keeps_and_decodes_every_layout(image_files, channels, caplog):
    root, paths = image_files
    with caplog.at_level(logging.WARNING, logger="keras_vit.data.image_check"):
        dataset = data.load(
            str(root), "train", image_size=SIZE, batch_size=None, training=False, channels=channels
        )
        images = [image.numpy() for image, _ in dataset]
    assert not [r for r in caplog.records if "Skipped" in r.getMessage()]
    assert len(images) == len(paths)
    for (fmt, _, _), path, image in zip(LAYOUTS, paths, images, strict=True):
        expected = _scaled(reference(path.read_bytes(), channels))
        limit = tolerance(fmt, channels) / 127.5 + 1e-6
        assert np.abs(image - expected).max() <= limit, path.name


@pytest.mark.parametrize("channels", CHANNELS)
def test_predict_reads_every_layout(image_files, channels):
    _, paths = image_files
    files = predict.usable_images([str(p) for p in paths], "fail", channels)
    assert files == [str(p) for p in paths]
    images = predict.read_images(files, (SIZE, SIZE), channels)
    for (fmt, _, _), path, image in zip(LAYOUTS, paths, images, strict=True):
        expected = _scaled(reference(path.read_bytes(), channels))
        assert np.abs(image - expected).max() <= tolerance(fmt, channels) / 127.5 + 1e-6


@pytest.mark.parametrize("channels", CHANNELS)
def test_explain_reads_every_layout(image_files, channels):
    _, paths = image_files
    for (fmt, _, _), path in zip(LAYOUTS, paths, strict=True):
        batch = explain.prepare(explain.read_image(str(path)), (SIZE, SIZE, channels))
        expected = _scaled(reference(path.read_bytes(), channels))
        assert np.abs(batch[0] - expected).max() <= tolerance(fmt, channels) / 127.5 + 1e-6


def _exported(tmp_path, channels):
    model = keras_vit.ViT(
        image_size=SIZE,
        patch_size=8,
        hidden_dim=16,
        num_heads=2,
        mlp_dim=32,
        num_layers=1,
        num_classes=3,
        channels=channels,
    )
    randomize_weights(model, seed=channels)
    return model, tf.saved_model.load(export_saved_model(model, tmp_path / f"c{channels}"))


@pytest.mark.parametrize("channels", CHANNELS)
def test_serving_bytes_accepts_every_layout(tmp_path, channels):
    """Each listed layout is accepted, in one batch, and classified as the Pillow-decoded
    pixels are by the model itself."""
    model, served = _exported(tmp_path, channels)
    raws = [encoded(fmt, mode, options) for fmt, mode, options in LAYOUTS]
    logits = served.signatures["serving_bytes"](image_bytes=tf.constant(raws))["logits"]
    pixels = np.stack([reference(raw, channels) for raw in raws])
    expected = model.predict(_scaled(pixels), verbose=0)
    assert np.abs(expected).max() > 1e-2
    for k, (fmt, _, _) in enumerate(LAYOUTS):
        # a pixel level is 1/127.5 of the input; JPEG differs by a few levels
        limit = 0.05 if fmt == "JPEG" else 0.02
        np.testing.assert_allclose(logits[k], expected[k], atol=limit, err_msg=IDS[k])


def test_gray_bmp_and_gif_digits_folder_keeps_every_image(tmp_path):
    """The reported case: 12 valid gray digits (BMP and GIF) all kept, in 1 channel."""
    for label in ("0", "1"):
        (tmp_path / label).mkdir()
        for k in range(3):
            _write(tmp_path / label / f"{k}.bmp", "BMP", "L", {}, seed=k)
            _write(tmp_path / label / f"{k}.gif", "GIF", "L", {}, seed=k)
    info = data.describe(str(tmp_path))
    dataset = data.load(str(tmp_path), "train", image_size=SIZE, batch_size=None, training=False)
    images = [image.numpy() for image, _ in dataset]
    assert info.channels == 1 and len(images) == 12
    assert all(image.shape == (SIZE, SIZE, 1) for image in images)


def test_one_bit_bmp_is_named_not_called_corrupt(tmp_path):
    path = _write(tmp_path / "bits.bmp", "BMP", "1", {})
    problem = image_check.image_problem(path)
    assert "1-bit BMP" in problem and "corrupt" not in problem
    with pytest.raises(tf.errors.InvalidArgumentError):
        decode.decode_file(path, 3)


def test_unknown_channel_count_is_refused():
    with pytest.raises(ValueError, match="channels=2"):
        decode.decode_pixels(tf.constant(encoded("PNG", "RGB", {})), 2)


def test_jpeg_xl_is_refused_with_its_name():
    """tf.io.decode_image reads JPEG XL, Pillow (the file checks) does not: refused by the
    one rule so that serving_bytes accepts exactly what the other entry points accept."""
    codestream = b"\xff\x0a" + bytes(64)
    with pytest.raises(tf.errors.InvalidArgumentError, match="JPEG XL"):
        decode.decode_pixels(tf.constant(codestream), 3)
