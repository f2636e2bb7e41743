"""A folder dataset with the bad files of issue reports: corrupt, empty, bombs, odd formats.

`write_folder(root)` writes `root/<class>/...` for two classes: good 28x28 PNGs from the
embedded MNIST set, files TensorFlow decodes though they look odd (a CMYK JPEG, a 16-bit
PNG, a PNG named .jpg), and bad files (a truncated JPEG, a zero-byte PNG, a PNG whose header
claims 100,000 x 100,000 pixels, TIFF data named .png, text named .jpg).
"""

import io
import struct
import zlib

import numpy as np
from PIL import Image

from keras_vit.data import embedded

GOOD_PER_CLASS = 3
CLASSES = ("digit_0", "digit_1")


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
    crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)


def bomb_png(width=100_000, height=100_000) -> bytes:
    """A valid PNG header (8-bit RGB, width x height) with a tiny IDAT: ~100 bytes."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(b"\x00" * 1024))
        + _png_chunk(b"IEND", b"")
    )


def _encoded(array, image_format, mode=None, **options) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array, mode).save(buffer, format=image_format, **options)
    return buffer.getvalue()


def write_folder(root):
    """Writes the folder; returns ({path: True} for good files, {path: reason words} bad)."""
    raw = embedded.read_embedded("mnist")
    rng = np.random.default_rng(0)
    good, bad = {}, {}
    for label, name in enumerate(CLASSES):
        folder = root / name
        folder.mkdir(parents=True)
        for index in np.flatnonzero(raw["y_test"] == label)[:GOOD_PER_CLASS]:
            path = folder / f"{index:05d}.png"
            path.write_bytes(_encoded(raw["x_test"][index], "PNG"))
            good[path] = True
    odd = root / CLASSES[0]
    rgb = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
    files = {
        "cmyk.jpg": _encoded(rng.integers(0, 256, (20, 24, 4), dtype=np.uint8), "JPEG", "CMYK"),
        "gray16.png": _encoded(rng.integers(0, 65536, (20, 24), dtype=np.uint16), "PNG"),
        "png_named.jpg": _encoded(rgb, "PNG"),
    }
    for name, payload in files.items():
        (odd / name).write_bytes(payload)
        good[odd / name] = True
    broken = root / CLASSES[1]
    jpeg = _encoded(rng.integers(0, 256, (120, 160, 3), dtype=np.uint8), "JPEG", quality=90)
    files = {
        "corrupt.jpg": jpeg[: len(jpeg) * 6 // 10],  # header intact, scan data cut
        "empty.png": b"",
        "bomb.png": bomb_png(),
        "tiff_named.png": _encoded(rgb, "TIFF"),
        "notes.jpg": b"these are notes, not an image\n",
    }
    reasons = {
        "corrupt.jpg": "corrupt",
        "empty.png": "empty file",
        "bomb.png": "header claims 10000000000 pixels",
        "tiff_named.png": "TIFF data",
        "notes.jpg": "unrecognised content",
    }
    for name, payload in files.items():
        (broken / name).write_bytes(payload)
        bad[broken / name] = reasons[name]
    return good, bad
