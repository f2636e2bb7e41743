"""keras_vit.data.image_header through keras_vit's one decoding rule (`decode_pixels`): a phone
photo's EXIF orientation is applied, and an image declaring more than MAX_PIXELS is refused
from its header.

References: the stored pixels come from TensorFlow's own JPEG decoder (`tf.io.decode_jpeg`,
which ignores EXIF) and are turned by NumPy as the EXIF table says (written here, not taken
from the code under test); image files are made by Pillow, which writes the Orientation tag.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from keras_vit.cli import predict
from keras_vit.data.decode import decode_pixels
from keras_vit.data.image_header import declared_size, exif_orientation
from keras_vit.spec.image_formats import MAX_PIXELS

# EXIF 2.32 table 4: how the stored image is turned to be upright (NumPy, rows x columns).
UPRIGHT = {
    1: lambda a: a,
    2: lambda a: a[:, ::-1],
    3: lambda a: a[::-1, ::-1],
    4: lambda a: a[::-1, :],
    5: lambda a: np.swapaxes(a, 0, 1),
    6: lambda a: np.rot90(a, k=-1),  # 90 degrees clockwise
    7: lambda a: np.rot90(a, k=-1)[::-1, :],  # transverse
    8: lambda a: np.rot90(a, k=1),  # 90 degrees counter-clockwise
}
# ... and back: the sensor's pixels of an upright picture.
STORED = {
    1: lambda a: a,
    2: lambda a: a[:, ::-1],
    3: lambda a: a[::-1, ::-1],
    4: lambda a: a[::-1, :],
    5: lambda a: np.swapaxes(a, 0, 1),
    6: lambda a: np.rot90(a, k=1),
    7: lambda a: np.rot90(a[::-1, :], k=1),
    8: lambda a: np.rot90(a, k=-1),
}


def smooth_image(height, width, seed=0):
    """uint8 RGB with smooth gradients and a corner mark (JPEG keeps it within a few levels)."""
    rows, cols = np.mgrid[0:height, 0:width].astype(np.float32)
    phase = np.random.default_rng(seed).uniform(0, 6, 3)
    image = np.stack(
        [127 + 100 * np.sin(rows / 7 + phase[i]) * np.cos(cols / 11 + i) for i in range(3)], -1
    )
    image[: height // 4, : width // 4] = (255, 0, 0)  # top-left: tells the turns apart
    return np.clip(image, 0, 255).astype(np.uint8)


def jpeg_bytes(pixels, orientation=None, **kwargs):
    image = Image.fromarray(pixels)
    options = {"quality": 95, **kwargs}
    if orientation is not None:
        exif = image.getexif()
        exif[0x0112] = orientation
        options["exif"] = exif.tobytes()
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", **options)
    return buffer.getvalue()


def encode(image, image_format, **kwargs):
    buffer = io.BytesIO()
    image.save(buffer, image_format, **kwargs)
    return buffer.getvalue()


def test_the_reference_tables_are_inverse_of_each_other():
    a = np.arange(24).reshape(4, 6)
    for orientation in range(1, 9):
        np.testing.assert_array_equal(UPRIGHT[orientation](STORED[orientation](a)), a)
    assert UPRIGHT[6](a)[0, -1] == a[0, 0]  # clockwise: the top-left goes to the top-right


@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_exif_orientation_decodes_upright(orientation):
    """Each orientation, 1-8, of a 24x40 JPEG: the stored pixels turned as the EXIF table
    says, to the bit; it used to be the stored (sensor) orientation for every tag."""
    data = jpeg_bytes(smooth_image(24, 40), orientation)
    stored = tf.io.decode_jpeg(data).numpy()
    assert int(exif_orientation(data)) == orientation
    np.testing.assert_array_equal(decode_pixels(data).numpy(), UPRIGHT[orientation](stored))


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_a_phone_photo_matches_the_same_picture_turned_by_numpy(orientation):
    """The picture taken upright, stored turned (NumPy) with its tag, decodes to the upright
    picture within JPEG's loss; a mismatch of the turn would differ by ~100 levels."""
    upright = smooth_image(32, 48, seed=orientation)
    data = jpeg_bytes(STORED[orientation](upright), orientation, quality=100, subsampling=0)
    got = decode_pixels(data).numpy().astype(int)
    assert got.shape == upright.shape
    assert np.abs(got - upright).mean() < 3.0 and np.abs(got - upright).max() <= 24
    for other in set(range(1, 9)) - {orientation}:  # any other turn is far off
        turned = UPRIGHT[other](tf.io.decode_jpeg(data).numpy()).astype(int)
        if turned.shape == upright.shape:
            assert np.abs(turned - upright).mean() > 20


def test_predict_reads_the_photo_upright(tmp_path):
    """`keras-vit predict`'s reader: the tagged JPEG reads as a PNG of its upright pixels."""
    data = jpeg_bytes(smooth_image(24, 40), 6)
    (tmp_path / "phone.jpg").write_bytes(data)
    upright = UPRIGHT[6](tf.io.decode_jpeg(data).numpy())
    Image.fromarray(np.ascontiguousarray(upright)).save(tmp_path / "upright.png")
    images = predict.read_images(
        [str(tmp_path / "phone.jpg"), str(tmp_path / "upright.png")], (16, 16), 3
    )
    np.testing.assert_array_equal(images[0], images[1])
    sensor = predict.read_images([str(tmp_path / "phone.jpg")], (16, 16), 3)
    assert sensor.shape == (1, 16, 16, 3)


@pytest.mark.parametrize(
    "tag_bytes", [b"", b"\x00\x00", b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x05\x01\x12"]
)
def test_a_broken_or_missing_exif_reads_as_stored(tag_bytes):
    """A truncated APP1 or one without the tag is no error: the pixels as stored."""
    data = jpeg_bytes(smooth_image(16, 24))
    segment = b"\xff\xe1" + (len(tag_bytes) + 2).to_bytes(2, "big") + tag_bytes
    patched = data[:2] + segment + data[2:]
    assert int(exif_orientation(patched)) == 1
    np.testing.assert_array_equal(decode_pixels(patched).numpy(), tf.io.decode_jpeg(data).numpy())


def _bmp_declaring(width, height):
    """A valid 2x2 24-bit BMP whose header is then made to declare width x height."""
    data = bytearray(encode(Image.new("RGB", (2, 2)), "BMP"))
    data[18:22] = width.to_bytes(4, "little")
    data[22:26] = (-height).to_bytes(4, "little", signed=True)  # top-down
    return bytes(data)


BOMB_SIZES = {"PNG": (8000, 6000), "GIF": (7000, 6000), "JPEG": (9000, 5000), "WEBP": (7000, 7000)}
BOMB_SIZES["BMP"] = (8000, 6000)


def bomb(kind):
    """Bytes of a real file of `kind` declaring more than MAX_PIXELS (BMP: a patched header)."""
    size = BOMB_SIZES[kind]
    if kind == "BMP":
        return _bmp_declaring(*size)
    options = {"JPEG": {"quality": 10}, "WEBP": {"lossless": True}}.get(kind, {})
    return encode(Image.new("L" if kind != "WEBP" else "RGB", size), kind, **options)


@tf.function
def decoded_shape(data):
    return tf.shape(decode_pixels(data, 3))


@pytest.mark.parametrize("kind", sorted(BOMB_SIZES))
def test_a_decompression_bomb_is_refused_from_its_header_in_the_graph(kind):
    """Inside a graph (as in the SavedModel): InvalidArgumentError naming the declared
    size and the limit, before the pixels are allocated."""
    data = bomb(kind)
    width, height = BOMB_SIZES[kind]
    assert width * height > MAX_PIXELS
    assert tuple(int(v) for v in declared_size(data)) == (height, width)
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        decoded_shape(tf.constant(data))
    message = raised.value.message
    assert f"image header declares {width} x {height} pixels" in message
    assert f"more than the limit of {MAX_PIXELS} pixels" in message


def test_the_limit_is_the_one_of_the_file_checks():
    from keras_vit.data import image_check

    assert image_check.MAX_PIXELS is MAX_PIXELS == 40_000_000


@settings(max_examples=25, deadline=None)
@given(
    kind=st.sampled_from(["PNG", "GIF", "JPEG", "WEBP", "BMP", "PNG16", "RGBA"]),
    width=st.integers(1, 40),
    height=st.integers(1, 40),
)
def test_declared_size_is_pillows_for_drawn_images(kind, width, height):
    """The header's size, for each format and mode, is the size Pillow reads."""
    mode, image_format = {"PNG16": ("I;16", "PNG"), "RGBA": ("RGBA", "PNG")}.get(
        kind, ("RGB", kind)
    )
    data = encode(Image.new(mode, (width, height), 7), image_format)
    assert tuple(int(v) for v in declared_size(data)) == (height, width)
    assert Image.open(io.BytesIO(data)).size == (width, height)
    assert tuple(decode_pixels(data).shape[:2]) == (height, width)


def test_decoding_in_a_tf_data_graph_logs_no_onednn_uint8_error(tmp_path):
    """The orientation's transpose is no oneDNN Transpose on uint8, which logs an ERROR line
    ("oneDNN supports DT_UINT8 only on platforms with AVX-512") on CPUs lacking some AVX-512
    extensions: a line TF_CPP_MIN_LOG_LEVEL=2 does not hide. (On other CPUs this holds
    either way.)"""
    import subprocess
    import sys

    path = tmp_path / "a.png"
    Image.fromarray(np.zeros((4, 6, 3), np.uint8)).save(path)
    code = (
        "import tensorflow as tf\n"
        "from keras_vit.data.decode import decode_pixels\n"
        f"ds = tf.data.Dataset.from_tensor_slices([{str(path)!r}])\n"
        "for x in ds.map(lambda p: decode_pixels(tf.io.read_file(p), 3)): pass\n"
        "assert x.shape == (4, 6, 3)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert "DT_UINT8" not in done.stderr, done.stderr
