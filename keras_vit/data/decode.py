"""The one image decoding rule of keras_vit: encoded bytes -> uint8 pixels in 1, 3 or 4 channels.

Folder datasets (`keras_vit.data.folder`), `keras-vit predict`, `keras-vit explain` and the
SavedModel's `serving_bytes` signature (`keras_vit.export`) all decode with `decode_pixels`,
which uses TensorFlow ops only, so it runs inside a SavedModel as in a `tf.data` pipeline:

1. `tf.io.decode_image(channels=0, expand_animations=False)` reads the file's own channels:
   PNG (gray, gray + alpha, palette, RGB, RGBA; 16-bit scaled to 8 bits), JPEG (gray, RGB,
   CMYK decoded to RGB by libjpeg), BMP (8-, 24- and 32-bit uncompressed), GIF (first
   frame, RGB) and WebP (RGB, RGBA). The format is read from the bytes, not from a name.
2. An 8-bit BMP's pixels are palette indices in TensorFlow's decoder; `decode_pixels` looks
   them up in the file's colour table (BMP "BITMAPINFOHEADER": table after the header,
   4 bytes blue-green-red-reserved per entry). A 32-bit BI_RGB BMP's fourth byte is
   reserved, not alpha (TensorFlow reads it as alpha): it is dropped.
3. `to_channels` converts to what the model takes: gray <- RGB by ITU-R 601 luma
   (`tf.image.rgb_to_grayscale`, rounded), RGB <- gray by repeating it, alpha dropped for
   1 and 3 channels, an opaque alpha (255) added for 4.

Not read (refused, never silently): 1-, 4- and 16-bit or RLE-compressed BMP, JPEG XL
(which `tf.io.decode_image` would read: refused so that every entry point accepts the same
files), TIFF, and every other format. `decode_pixels` raises TensorFlow's error (it runs in
graphs); `decode_file` raises a ValueError naming the file and the format where the format
is one it recognises (TIFF, ICO, PSD, JPEG XL; `keras_vit.spec.image_formats.undecoded_format`).
"""

from __future__ import annotations

import tensorflow as tf

from keras_vit.data.image_header import apply_orientation, check_pixel_count, exif_orientation
from keras_vit.spec.image_formats import FORMATS_TEXT, MAX_PIXELS, undecoded_format

CHANNELS = (1, 3, 4)

_BMP_INFO_HEADER = 54  # 14-byte file header + 40-byte BITMAPINFOHEADER


_JPEG_XL_SIGNATURES = (b"\xff\x0a", b"\x00\x00\x00\x0cJXL \r\n\x87\n")


def _refuse_jpeg_xl(data):
    """`data`, after an assertion that it is no JPEG XL file (TensorFlow's `decode_image`
    reads JPEG XL, which Pillow, and so the file checks of `image_check`, cannot)."""
    is_jxl = tf.reduce_any(
        [tf.strings.substr(data, 0, len(sig)) == sig for sig in _JPEG_XL_SIGNATURES]
    )
    check = tf.debugging.Assert(
        tf.logical_not(is_jxl),
        [f"JPEG XL data; keras_vit decodes {FORMATS_TEXT}"],
    )
    with tf.control_dependencies([check]):
        return tf.identity(data)


def _little_endian(data, position: int, size: int):
    """The unsigned little-endian integer of `size` bytes at `position` of a string tensor."""
    raw = tf.io.decode_raw(tf.strings.substr(data, position, size), tf.uint8)
    weights = tf.constant([256**i for i in range(size)], tf.int64)
    return tf.reduce_sum(tf.cast(raw, tf.int64) * weights)


def _bmp_field(data, position: int, size: int):
    """A BMP header field, or -1 when `data` is no BMP with a BITMAPINFOHEADER (or longer)."""
    long_enough = tf.strings.length(data) >= _BMP_INFO_HEADER

    def read():
        magic = tf.strings.substr(data, 0, 2) == "BM"
        info = _little_endian(data, 14, 4) >= 40
        return tf.where(
            magic & info, _little_endian(data, position, size), tf.constant(-1, tf.int64)
        )

    return tf.cond(long_enough, read, lambda: tf.constant(-1, tf.int64))


def _bmp_fixed(data, image):
    """TensorFlow's BMP pixels as the file means them: an 8-bit BMP's indices looked up in
    its colour table; a 32-bit uncompressed (BI_RGB) BMP's fourth byte, reserved by the
    format, dropped instead of read as alpha."""
    bits, compression = _bmp_field(data, 28, 2), _bmp_field(data, 30, 4)
    palette = tf.equal(bits, 8)
    reserved = tf.equal(bits, 32) & tf.equal(compression, 0)
    image = tf.cond(palette, lambda: _apply_bmp_palette(data, image), lambda: image)
    return tf.cond(reserved, lambda: image[..., :3], lambda: image)


def _apply_bmp_palette(data, indices):
    """uint8 `(h, w, 1)` palette indices -> `(h, w, 3)` RGB, or `(h, w, 1)` for a gray table."""
    start = 14 + _little_endian(data, 14, 4)
    used = _little_endian(data, 46, 4)
    count = tf.where(used == 0, tf.constant(256, tf.int64), tf.minimum(used, 256))
    table = tf.io.decode_raw(tf.strings.substr(data, start, 4 * count), tf.uint8)
    rgb = tf.reverse(tf.reshape(table, (-1, 4))[:, :3], axis=[1])  # BGR -> RGB
    index = tf.minimum(tf.cast(indices[..., 0], tf.int32), tf.shape(rgb)[0] - 1)
    colours = tf.gather(rgb, index)
    gray = tf.reduce_all((rgb[:, 0] == rgb[:, 1]) & (rgb[:, 1] == rgb[:, 2]))
    return tf.cond(gray, lambda: colours[..., :1], lambda: colours)


def to_channels(image, channels: int):
    """An `(h, w, c)` image (c in 1-4: gray, gray + alpha, RGB, RGBA) in `channels` (1, 3, 4).

    Integer images stay integer (the luma is rounded); float images stay float. Works on a
    static or unknown channel count (inside `tf.function`).

    Raises:
        ValueError: `channels` not 1, 3 or 4.
    """
    if channels not in CHANNELS:
        raise ValueError(f"Images decode to 1, 3 or 4 channels. Received: channels={channels!r}")
    dtype = image.dtype
    have = tf.shape(image)[-1]
    color = tf.cond(
        have >= 3,
        lambda: image[..., :3],
        lambda: tf.repeat(image[..., :1], 3, axis=-1),
    )
    color.set_shape([None, None, 3])
    if channels == 3:
        return color
    if channels == 1:
        luma = tf.image.rgb_to_grayscale(tf.cast(color, tf.float32))
        gray = tf.cond(have >= 3, lambda: luma, lambda: tf.cast(image[..., :1], tf.float32))
        if dtype.is_integer:
            gray = tf.round(gray)
        gray = tf.cast(gray, dtype)
        gray.set_shape([None, None, 1])
        return gray
    opaque = tf.fill(tf.shape(color[..., :1]), tf.constant(255, dtype))
    alpha = tf.cond(
        tf.equal(have % 2, 0),  # gray + alpha or RGBA
        lambda: image[..., -1:],
        lambda: opaque,
    )
    rgba = tf.concat([color, alpha], axis=-1)
    rgba.set_shape([None, None, 4])
    return rgba


def decode_pixels(data, channels: int = 0, max_pixels: int = MAX_PIXELS):
    """Encoded image bytes (a scalar string tensor) -> uint8 `(height, width, channels)`,
    upright.

    Before decoding, the size the header declares is checked against `max_pixels`
    (`keras_vit.data.image_header.check_pixel_count`); after it, a JPEG's EXIF orientation
    is applied (`image_header.apply_orientation`, as viewers and Pillow's
    `ImageOps.exif_transpose` show the photo: orientations 5-8 swap height and width).

    Args:
        data: the file's bytes.
        channels: 1, 3 or 4 (converted by `to_channels`), or 0 for the file's own channels
            (1 gray, 2 gray + alpha, 3 RGB, 4 RGBA; a palette BMP gives 3, or 1 for a gray
            colour table).
        max_pixels: the most pixels (width x height) the header may declare (default
            `keras_vit.spec.image_formats.MAX_PIXELS`, 40,000,000).

    Raises:
        tf.errors.InvalidArgumentError: bytes no decoder of the module docstring reads, or a
            header declaring more than `max_pixels` pixels (the message names both sides and
            the limit).
        ValueError: `channels` not 0, 1, 3 or 4.
    """
    if channels not in (0, *CHANNELS):
        raise ValueError(
            f"Images decode to 0 (own), 1, 3 or 4 channels. Received: channels={channels!r}"
        )
    data = _refuse_jpeg_xl(tf.convert_to_tensor(data, tf.string))
    data = check_pixel_count(data, max_pixels)
    image = tf.io.decode_image(data, channels=0, expand_animations=False)
    image = _bmp_fixed(data, image)
    image.set_shape([None, None, None])
    image = apply_orientation(image, exif_orientation(data))
    return image if channels == 0 else to_channels(image, channels)


def decode_file(path, channels: int = 0, max_pixels: int = MAX_PIXELS):
    """`decode_pixels` of the file at `path` (eager): a uint8 `(h, w, channels)` tensor.

    Raises:
        ValueError: a file of a format keras_vit does not decode that it recognises (TIFF,
            ICO, PSD, JPEG XL): "x.tiff: TIFF data; keras_vit decodes PNG, JPEG, ...".
        tf.errors.InvalidArgumentError: other bytes no decoder reads (corrupt, unknown).
    """
    data = tf.io.read_file(str(path))
    try:
        return decode_pixels(data, channels, max_pixels)
    except tf.errors.InvalidArgumentError:
        kind = undecoded_format(data.numpy()[:16])
        if kind is None:
            raise
    raise ValueError(f"{path}: {kind} data; keras_vit decodes {FORMATS_TEXT}.")
