"""spec/image_formats: the decoded formats, their file endings (Pillow's own registry) and the
signatures of formats that are named but not decoded (TIFF 6.0 header "II*\\0"/"MM\\0*",
BigTIFF "II+\\0", ICO/CUR ICONDIR reserved 0 + type 1/2, Photoshop "8BPS", JPEG XL)."""

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from keras_vit.spec.image_formats import (
    DECODED_FORMATS,
    FORMATS_TEXT,
    IMAGE_EXTENSIONS,
    UNDECODED_SIGNATURES,
    undecoded_format,
)


def encoded(fmt, **kwargs):
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((4, 4, 3), "uint8")).save(buffer, format=fmt, **kwargs)
    return buffer.getvalue()


def test_extensions_are_pillows_for_the_decoded_formats():
    by_format = {}
    for extension, fmt in Image.registered_extensions().items():
        by_format.setdefault(fmt, set()).add(extension)
    for fmt in DECODED_FORMATS:
        assert by_format[fmt] & set(IMAGE_EXTENSIONS), fmt
    for extension in IMAGE_EXTENSIONS:
        assert Image.registered_extensions()[extension] in DECODED_FORMATS, extension
    assert all(e == e.lower() and e.startswith(".") for e in IMAGE_EXTENSIONS)
    # Both spellings of JPEG that cameras and datasets use.
    assert {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp"} <= set(IMAGE_EXTENSIONS)


def test_the_help_text_names_every_decoded_format():
    for fmt in DECODED_FORMATS:
        assert fmt.lower() in FORMATS_TEXT.lower()
    assert FORMATS_TEXT.count(",") + FORMATS_TEXT.count(" or ") == len(DECODED_FORMATS) - 1


@pytest.mark.parametrize(
    "fmt, kwargs, name",
    [
        ("TIFF", {}, "TIFF"),
        ("ICO", {"sizes": [(4, 4)]}, "ICO"),
    ],
)
def test_files_pillow_writes_in_undecoded_formats_are_named(fmt, kwargs, name):
    assert undecoded_format(encoded(fmt, **kwargs)[:16]) == name


def test_both_tiff_byte_orders_and_the_other_signatures():
    assert undecoded_format(b"II*\x00\x08\x00\x00\x00") == "TIFF"  # little-endian
    assert undecoded_format(b"MM\x00*\x00\x00\x00\x08") == "TIFF"  # big-endian
    assert undecoded_format(b"II+\x00\x08\x00\x00\x00") == "TIFF"  # BigTIFF
    assert undecoded_format(b"\x00\x00\x02\x00\x01\x00") == "CUR"
    assert undecoded_format(b"8BPS\x00\x01") == "PSD"
    assert undecoded_format(b"\xff\x0a\xfa") == "JPEG XL"
    assert undecoded_format(b"\x00\x00\x00\x0cJXL \r\n\x87\n\x00") == "JPEG XL"


@pytest.mark.parametrize("fmt", DECODED_FORMATS)
def test_decoded_formats_are_not_named(fmt):
    assert undecoded_format(encoded(fmt)[:16]) is None


@settings(max_examples=30, deadline=None)
@given(signature=st.sampled_from(sorted(UNDECODED_SIGNATURES)), tail=st.binary(max_size=12))
def test_any_file_starting_with_a_signature_is_named(signature, tail):
    assert undecoded_format(signature + tail) == UNDECODED_SIGNATURES[signature]


@settings(max_examples=30, deadline=None)
@given(head=st.binary(max_size=16))
def test_other_bytes_are_not_named(head):
    if not any(head.startswith(s) for s in UNDECODED_SIGNATURES):
        assert undecoded_format(head) is None
    assert undecoded_format(head[:1]) is None  # every signature is at least two bytes
