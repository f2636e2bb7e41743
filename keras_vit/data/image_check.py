"""Checks image files before a pipeline decodes them: empty, unreadable, corrupt, or too big.

A folder dataset may hold files that `tf.io.decode_image` cannot decode (a truncated JPEG,
a zero-byte file, text or TIFF data under an image extension) or should not decode (a
decompression bomb: a small PNG whose header claims 100,000 x 100,000 pixels, 30 GB once
decoded). Inside a `tf.data` iterator such a file stops training with an error that names
no file. `check_images` finds them first, in three steps per file, cheapest first:

1. size and readability (`os.stat`, `open`);
2. the header, read by Pillow without decoding the pixels (`PIL.Image.open` is lazy):
   the format must be one keras_vit decodes (`DECODABLE_FORMATS`; a BMP of 8, 24 or 32
   bits, uncompressed) and width x height at most `max_pixels`, so a bomb is refused
   before any decoding;
3. a full decode by keras_vit's one rule (`keras_vit.data.decode.decode_pixels`, the
   decoder of the pipeline itself), which finds corrupt and truncated data.

Every image that rule reads is kept, in every channel count: gray, palette, CMYK JPEG,
16-bit PNG, alpha, a GIF or BMP into a gray model, a PNG saved with a `.jpg` extension
(the format is read from the content). A file is called corrupt only when the decoder of
its format fails on it; a valid file of a format or variant keras_vit does not read is
named as such ("1-bit BMP", "TIFF data").

`policy` says what happens to bad files: "skip" (leave them out; their count and names are
logged) or "fail" (`BadImageError` naming the first bad file).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import re
import warnings

from keras_vit.spec.image_formats import DECODED_FORMATS, FORMATS_TEXT, MAX_PIXELS

logger = logging.getLogger(__name__)

BAD_IMAGE_POLICIES = ("skip", "fail")
DECODABLE_FORMATS = DECODED_FORMATS
BMP_BITS = (8, 24, 32)
LOGGED_NAMES = 20
REFUSED = "decompression bomb refused before decoding"


class BadImageError(ValueError):
    """An image file cannot (or must not) be decoded; the message names the file."""


def check_policy(policy: str) -> str:
    if policy not in BAD_IMAGE_POLICIES:
        raise ValueError(
            f"bad_images must be one of {list(BAD_IMAGE_POLICIES)}. Received: {policy!r}"
        )
    return policy


def image_problem(path, max_pixels: int = MAX_PIXELS, channels: int = 3) -> str | None:
    """Why the image file at `path` cannot be used, or None if it decodes.

    Args:
        path: the image file.
        max_pixels: largest width x height accepted (checked from the header, before any
            decoding).
        channels: the channels the pipeline decodes to (1, 3 or 4).

    Returns:
        None, or a short reason such as "empty file (0 bytes)" or "header claims
        100000 x 100000 pixels, more than the limit of 40000000".
    """
    return header_problem(path, max_pixels) or _decode_problem(
        os.fspath(path), channels, max_pixels
    )


def header_problem(path, max_pixels: int = MAX_PIXELS) -> str | None:
    """`image_problem` without decoding the pixels (no TensorFlow): what the file's size, its
    signature and header (read by Pillow) show; None when they show nothing wrong."""
    from PIL import Image, UnidentifiedImageError

    path = os.fspath(path)
    try:
        if os.path.getsize(path) == 0:
            return "empty file (0 bytes)"
        with open(path, "rb") as handle, warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(handle) as image:
                image_format, (width, height) = image.format, image.size
            variant = _unread_variant(handle, image_format)
    except Image.DecompressionBombError as error:  # Pillow's own, higher limit
        pixels = re.search(r"\((\d+) pixels\)", str(error))
        claimed = f"{pixels.group(1)} pixels" if pixels else "too many pixels"
        return f"header claims {claimed}, more than the limit of {max_pixels}; {REFUSED}"
    except UnidentifiedImageError:
        return "not image data keras_vit can decode (unrecognised content)"
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    if image_format not in DECODABLE_FORMATS:
        return f"{image_format} data; keras_vit decodes {FORMATS_TEXT}"
    if variant:
        return variant
    if width * height > max_pixels:
        return (
            f"header claims {width} x {height} pixels, more than the limit of {max_pixels}; "
            f"{REFUSED}"
        )
    return None


def _unread_variant(handle, image_format: str) -> str | None:
    """Why a valid file of a decoded format is still not read (BMP: TensorFlow's decoder
    reads uncompressed 8-, 24- and 32-bit files), or None."""
    if image_format != "BMP":
        return None
    handle.seek(0)
    header = handle.read(34)
    bits = int.from_bytes(header[28:30], "little")
    compression = int.from_bytes(header[30:34], "little")
    if bits not in BMP_BITS or compression not in (0, 3):
        return (
            f"a {bits}-bit BMP (compression {compression}); keras_vit reads uncompressed "
            "BMP of 8, 24 or 32 bits: save it as PNG"
        )
    return None


def _decode_problem(path: str, channels: int = 3, max_pixels: int = MAX_PIXELS) -> str | None:
    import tensorflow as tf

    from keras_vit.data.decode import decode_file

    try:
        decode_file(path, channels, max_pixels)
    except ValueError as error:  # a format decode_file names (TIFF, ...)
        return str(error).split(": ", 1)[-1].rstrip(".")
    except (tf.errors.InvalidArgumentError, tf.errors.OpError) as error:
        message = " ".join(str(error.message).split())
        message = message.split("}} ", 1)[-1].split(" [Op:")[0][:120]  # TF's framing off
        return f"corrupt or truncated data ({message})"
    return None


def check_images(
    paths,
    policy: str = "skip",
    *,
    max_pixels: int = MAX_PIXELS,
    channels: int = 3,
    where="",
    log: bool = True,
):
    """Which of `paths` are usable images (see the module docstring).

    Args:
        paths: image file paths.
        policy: "skip" (default) or "fail".
        max_pixels, channels: see `image_problem`.
        where: the folder or source named in the log line.
        log: log the skipped files as one warning (False: the caller reports them).

    Returns:
        (list of booleans, True for each usable file; {path: reason} of the bad ones).

    Raises:
        BadImageError: with policy "fail", naming the first bad file and the reason.
        ValueError: an unknown policy.
    """
    check_policy(policy)
    paths = [os.fspath(p) for p in paths]
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        problems = list(pool.map(lambda p: image_problem(p, max_pixels, channels), paths))
    bad = {path: reason for path, reason in zip(paths, problems, strict=True) if reason}
    if bad and policy == "fail":
        path, reason = next(iter(bad.items()))
        raise BadImageError(
            f"Bad image {path}: {reason}. {len(bad)} bad file(s) in all; pass "
            "--bad-images skip (bad_images='skip') to leave them out."
        )
    if log:
        report_skipped(bad, len(paths), where)
    return [problem is None for problem in problems], bad


def report_skipped(bad: dict, total: int, where="") -> None:
    """The one warning that names skipped image files ({path: reason}, of `total` read;
    `where`: the folder or source), the first `LOGGED_NAMES` of them by name; nothing when
    `bad` is empty. `train`, `evaluate` and `predict` report skips this way."""
    if not bad:
        return
    shown = "; ".join(f"{path} ({reason})" for path, reason in list(bad.items())[:LOGGED_NAMES])
    more = f"; and {len(bad) - LOGGED_NAMES} more" if len(bad) > LOGGED_NAMES else ""
    logger.warning(
        "Skipped %d bad image file(s) of %d%s: %s%s",
        len(bad),
        total,
        f" in {where}" if where else "",
        shown,
        more,
    )
