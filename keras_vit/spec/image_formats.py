"""The image formats keras_vit decodes, as names and file endings, without TensorFlow (the
CLI's help texts list them before TensorFlow starts). The decoding rule itself is
`keras_vit.data.decode`."""

from __future__ import annotations

DECODED_FORMATS = ("PNG", "JPEG", "BMP", "GIF", "WEBP")
"""The formats `keras_vit.data.decode.decode_pixels` reads (Pillow's names for them)."""

FORMATS_TEXT = "PNG, JPEG, BMP, GIF or WebP"
"""`DECODED_FORMATS` for help texts and messages."""

IMAGE_EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png", ".webp")
"""File name endings that folder datasets and `predict` pick up as images."""

# Leading bytes of formats that are not decoded, to name them in errors (TIFF: both byte
# orders, classic and BigTIFF; ICO/CUR; Photoshop; JPEG XL codestream and container).
UNDECODED_SIGNATURES = {
    b"II*\x00": "TIFF",
    b"MM\x00*": "TIFF",
    b"II+\x00": "TIFF",
    b"MM\x00+": "TIFF",
    b"\x00\x00\x01\x00": "ICO",
    b"\x00\x00\x02\x00": "CUR",
    b"8BPS": "PSD",
    b"\xff\x0a": "JPEG XL",
    b"\x00\x00\x00\x0cJXL \r\n\x87\n": "JPEG XL",
}


def undecoded_format(head: bytes) -> str | None:
    """The name of a format keras_vit does not decode that `head` (a file's first bytes)
    starts with, e.g. "TIFF"; None for anything else.

    >>> undecoded_format(b"II*\\x00\\x08\\x00"), undecoded_format(b"\\x89PNG")
    ('TIFF', None)
    """
    for signature, name in UNDECODED_SIGNATURES.items():
        if head.startswith(signature):
            return name
    return None
