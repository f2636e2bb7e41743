"""What an encoded image's header says before its pixels are decoded, read with TensorFlow ops
(so inside a SavedModel's graph as in a `tf.data` pipeline): the declared pixel count, refused
above `keras_vit.spec.image_formats.MAX_PIXELS`, and the EXIF orientation of a JPEG, applied.

Declared size, by format (the fields the decoders themselves allocate from):

- JPEG: the frame header, by `tf.image.extract_jpeg_shape`;
- PNG: the IHDR chunk's width and height (big-endian 32-bit at bytes 16 and 20; PNG
  specification, section 11.2.2);
- GIF: the logical screen's width and height (little-endian 16-bit at bytes 6 and 8; GIF89a
  section 18), the frame size TensorFlow's decoder allocates;
- BMP: BITMAPINFOHEADER's width and height (little-endian 32-bit at bytes 18 and 22; a
  negative height is a top-down bitmap);
- WebP: the VP8X canvas (24-bit width - 1 and height - 1 at bytes 24 and 27), or the lossy
  "VP8 " frame (14-bit fields at bytes 26 and 28) or the lossless "VP8L" header (14-bit
  width - 1 and height - 1 packed from byte 21) (RFC 9649, sections 2.5-2.7).

EXIF orientation (JPEG): the APP1 segment that starts with "Exif\\0\\0" holds a TIFF header
(byte order "II" or "MM", then the offset of IFD0); tag 0x0112 (Orientation, SHORT) of IFD0
says how the stored pixels are turned (EXIF 2.32, section 4.6.4, table 4; TIFF 6.0,
section 2). `apply_orientation` turns them upright as viewers do and as Pillow's
`ImageOps.exif_transpose` does: 2 mirror left-right, 3 turn 180 degrees, 4 mirror top-bottom,
5 transpose, 6 turn 90 degrees clockwise, 7 transverse, 8 turn 90 degrees counter-clockwise.
A missing, unreadable or out-of-range tag reads as 1 (as stored).
"""

from __future__ import annotations

import tensorflow as tf

from keras_vit.spec.image_formats import MAX_PIXELS

ORIENTATION_TAG = 0x0112
EXIF_SHORT = 3  # the TIFF field type of Orientation
MAX_IFD_ENTRIES = 64  # IFD0 entries searched for the Orientation tag
MAX_JPEG_SEGMENTS = 64  # marker segments walked before the first scan
_EXIF_HEADER = b"Exif\x00\x00"


def _read(data, position, size: int):
    """`size` bytes of `data` at `position` as int32 values; zeros past the end (no error)."""
    length = tf.strings.length(data)
    start = tf.clip_by_value(tf.cast(position, tf.int32), 0, length)
    raw = tf.io.decode_raw(tf.strings.substr(data, start, size), tf.uint8)
    raw = tf.pad(raw, [[0, size - tf.shape(raw)[0]]])
    return tf.cast(tf.reshape(raw, [size]), tf.int32)


def _number(values, little_endian):
    """The unsigned integer of byte values (int32, last axis), in the given byte order."""
    size = values.shape[-1]
    little = tf.constant([256**i for i in range(size)], tf.int64)
    weights = tf.where(little_endian, little, tf.reverse(little, [0]))
    return tf.reduce_sum(tf.cast(values, tf.int64) * weights, axis=-1)


def _starts_with(data, signature: bytes, position: int = 0):
    return tf.strings.substr(data, position, len(signature)) == signature


def declared_size(data):
    """(height, width) int64 the header of encoded `data` declares; (0, 0) for data of no
    format in the module docstring (its decoder refuses it)."""
    little, big = tf.constant(True), tf.constant(False)

    def jpeg():
        shape = tf.image.extract_jpeg_shape(data, output_type=tf.int32)
        return tf.cast(shape[0], tf.int64), tf.cast(shape[1], tf.int64)

    def png():
        return _number(_read(data, 20, 4), big), _number(_read(data, 16, 4), big)

    def gif():
        return _number(_read(data, 8, 2), little), _number(_read(data, 6, 2), little)

    def bmp():
        height = _number(_read(data, 22, 4), little)
        height = tf.where(height >= 2**31, 2**32 - height, height)  # top-down: negative
        return height, _number(_read(data, 18, 4), little)

    def webp():
        vp8x = (_number(_read(data, 27, 3), little) + 1, _number(_read(data, 24, 3), little) + 1)
        lossy = (
            _number(_read(data, 28, 2), little) % 16384,
            _number(_read(data, 26, 2), little) % 16384,
        )
        bits = _number(_read(data, 21, 4), little)
        lossless = ((bits // 16384) % 16384 + 1, bits % 16384 + 1)
        chunk = tf.strings.substr(data, 12, 4)
        pick = lambda i: tf.where(  # noqa: E731
            chunk == "VP8X", vp8x[i], tf.where(chunk == "VP8L", lossless[i], lossy[i])
        )
        return pick(0), pick(1)

    is_webp = _starts_with(data, b"RIFF") & _starts_with(data, b"WEBP", 8)
    kinds = [
        _starts_with(data, b"\xff\xd8\xff"),
        _starts_with(data, b"\x89PNG\r\n\x1a\n"),
        _starts_with(data, b"GIF8"),
        _starts_with(data, b"BM"),
        is_webp,
    ]
    index = tf.reduce_min(tf.where(tf.stack([*kinds, tf.constant(True)]))[:, 0])
    zero = lambda: (tf.constant(0, tf.int64), tf.constant(0, tf.int64))  # noqa: E731
    return tf.switch_case(tf.cast(index, tf.int32), [jpeg, png, gif, bmp, webp, zero])


def check_pixel_count(data, max_pixels: int = MAX_PIXELS):
    """`data`, after an assertion (InvalidArgumentError when it fails, in the graph) that its
    header declares at most `max_pixels` pixels (width x height): a decompression bomb is
    refused before its pixels are allocated."""
    height, width = declared_size(data)
    message = tf.strings.format(
        "image header declares {} x {} pixels (width x height), more than the limit of "
        + f"{max_pixels} pixels (keras_vit.spec.image_formats.MAX_PIXELS); decompression bomb "
        "refused before decoding",
        (width, height),
    )
    check = tf.debugging.Assert(width * height <= max_pixels, [message])
    with tf.control_dependencies([check]):
        return tf.identity(data)


def _jpeg_tiff_start(data):
    """Position of the TIFF header inside a JPEG's Exif APP1 segment, or -1."""
    length = tf.strings.length(data)

    def walking(position, found):
        marker = _read(data, position, 2)
        return (
            tf.equal(found, -1)
            & (position + 4 <= length)
            & tf.equal(marker[0], 0xFF)
            & tf.logical_not(tf.reduce_any(tf.equal(marker[1], [0xDA, 0xD9])))  # scan, end
        )

    def step(position, found):
        marker = _read(data, position, 4)
        exif = tf.equal(marker[1], 0xE1) & (
            tf.strings.substr(data, position + 4, len(_EXIF_HEADER)) == _EXIF_HEADER
        )
        found = tf.where(exif, position + 4 + len(_EXIF_HEADER), found)
        segment = marker[2] * 256 + marker[3]
        return position + 2 + tf.maximum(segment, 2), found

    is_jpeg = _starts_with(data, b"\xff\xd8")
    _, found = tf.while_loop(
        walking,
        step,
        (tf.constant(2, tf.int32), tf.where(is_jpeg, -1, -2)),
        maximum_iterations=MAX_JPEG_SEGMENTS,
    )
    return tf.maximum(found, -1)


def _tiff_orientation(data, start):
    """The Orientation value of the IFD0 of the TIFF structure at `start` (1 when absent)."""
    order = tf.strings.substr(data, tf.maximum(start, 0), 2)
    little = order == "II"
    valid = (start >= 0) & (little | (order == "MM"))
    ifd = start + tf.cast(_number(_read(data, start + 4, 4), little), tf.int32)
    count = tf.cast(_number(_read(data, ifd, 2), little), tf.int32)
    entries = tf.reshape(_read(data, ifd + 2, 12 * MAX_IFD_ENTRIES), (MAX_IFD_ENTRIES, 12))
    tags = _number(entries[:, 0:2], little)
    types = _number(entries[:, 2:4], little)
    values = _number(entries[:, 8:10], little)
    match = (
        (tf.range(MAX_IFD_ENTRIES) < count)
        & tf.equal(tags, ORIENTATION_TAG)
        & tf.equal(types, EXIF_SHORT)
    )
    found = tf.reduce_any(match)
    value = tf.gather(values, tf.argmax(tf.cast(match, tf.int32)))
    usable = valid & found & (value >= 1) & (value <= 8)
    return tf.where(usable, tf.cast(value, tf.int32), 1)


def exif_orientation(data):
    """The EXIF orientation (1-8, int32) of encoded `data`: a JPEG's Exif APP1 Orientation
    tag; 1 for every other image, or a JPEG without a readable tag."""
    data = tf.convert_to_tensor(data, tf.string)
    return _tiff_orientation(data, _jpeg_tiff_start(data))


def apply_orientation(image, orientation):
    """An `(h, w, c)` image as stored, turned upright for EXIF `orientation` (1-8; see the
    module docstring); orientations 5-8 swap height and width."""

    def transpose(x):
        # rows and columns swapped by a gather, not tf.transpose: in a tf.data graph the
        # oneDNN Transpose kernel logs an ERROR line for uint8 on CPUs without some AVX-512
        # extensions (Grappler moves later casts after it, so any dtype ends as uint8 there)
        height, width = tf.shape(x)[0], tf.shape(x)[1]
        index = tf.range(height)[None, :] * width + tf.range(width)[:, None]
        return tf.gather(tf.reshape(x, [height * width, -1]), index)

    branches = [
        lambda: image,  # 1 (index 0)
        lambda: image,  # 1
        lambda: tf.reverse(image, [1]),  # 2: mirror left-right
        lambda: tf.reverse(image, [0, 1]),  # 3: 180 degrees
        lambda: tf.reverse(image, [0]),  # 4: mirror top-bottom
        lambda: transpose(image),  # 5: transpose
        lambda: tf.reverse(transpose(image), [1]),  # 6: 90 degrees clockwise
        lambda: tf.reverse(transpose(image), [0, 1]),  # 7: transverse
        lambda: tf.reverse(transpose(image), [0]),  # 8: 90 degrees counter-clockwise
    ]
    index = tf.clip_by_value(tf.cast(orientation, tf.int32), 0, 8)
    turned = tf.switch_case(index, branches)
    turned.set_shape([None, None, image.shape[-1]])
    return turned
