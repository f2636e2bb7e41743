"""The export's `serving_bytes` signature at the serving edge: phone photos
(EXIF orientation) are classified upright, decompression bombs are refused from their header
inside the graph, and the controls (empty batch, 16-bit PNG, opaque RGBA PNG) keep working.

One export of a tiny ViT (random weights) is shared by the module. The reference for
`serving_bytes` is the same SavedModel's `serving_default` fed the upright pixels, which
are decoded here by TensorFlow's own decoders (`tf.io.decode_jpeg`/`decode_png`, which read
no EXIF) and turned by NumPy (tests/data/test_image_header.py's EXIF table).
"""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from keras_vit.export import export_saved_model
from keras_vit.spec.image_formats import MAX_PIXELS
from tests.data.test_image_header import UPRIGHT, bomb, jpeg_bytes, smooth_image
from tests.test_export import tiny_vit


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("edge") / "serving"
    path = export_saved_model(tiny_vit(seed=11), root, top_k=2)
    loaded = tf.saved_model.load(path)
    return {
        "root": root,
        "bytes": loaded.signatures["serving_bytes"],
        "images": loaded.signatures["serving_default"],
    }


def listing(root):
    return sorted((folder, tuple(sorted(files))) for folder, _, files in os.walk(root))


def by_bytes(served, encoded):
    out = served["bytes"](image_bytes=tf.constant(encoded, tf.string))
    return out["logits"].numpy()


def by_pixels(served, pixels):
    out = served["images"](images=tf.constant(pixels[None].astype(np.float32)))
    return out["logits"].numpy()[0]


@pytest.mark.parametrize("orientation", [6, 3, 8, 5])
def test_a_phone_photo_is_classified_upright(served, orientation):
    """It used to be classified in the sensor's orientation (the logits of the turned
    picture); now as the upright picture, and unlike the sensor's."""
    data = jpeg_bytes(smooth_image(30, 44, seed=orientation), orientation)
    stored = tf.io.decode_jpeg(data).numpy()
    got = by_bytes(served, [data])[0]
    np.testing.assert_allclose(got, by_pixels(served, UPRIGHT[orientation](stored)), atol=1e-5)
    assert np.abs(got - by_pixels(served, stored)).max() > 1e-3  # the turn matters here


def test_a_png_bomb_is_refused_in_the_graph_and_writes_nothing(served):
    before = listing(served["root"])
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        by_bytes(served, [bomb("PNG")])
    message = raised.value.message
    assert "image header declares 8000 x 6000 pixels" in message
    assert f"more than the limit of {MAX_PIXELS} pixels" in message
    assert listing(served["root"]) == before


def test_an_empty_batch_gives_empty_outputs(served):
    out = served["bytes"](image_bytes=tf.constant([], tf.string))
    assert out["logits"].shape[0] == 0 and out["top_k_indices"].shape == (0, 2)


def png(pixels):
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue()


def test_a_16_bit_png_and_an_opaque_rgba_png_are_served(served):
    """Controls: a 16-bit gray PNG (TensorFlow's 16-to-8-bit scaling is the reference) and
    an opaque RGBA PNG (the RGB pixels) give the logits of their pixels."""
    rng = np.random.default_rng(5)
    deep = rng.integers(0, 65536, (20, 28), dtype=np.uint16)
    buffer = io.BytesIO()
    Image.frombytes("I;16", (28, 20), deep.astype("<u2").tobytes()).save(buffer, "PNG")
    deep_png = buffer.getvalue()
    assert tf.io.decode_png(deep_png, dtype=tf.uint16).numpy()[..., 0].tolist() == deep.tolist()
    eight = tf.io.decode_png(deep_png, channels=3).numpy()
    rgba = rng.integers(0, 256, (26, 18, 4), dtype=np.uint8)
    rgba[..., 3] = 255
    got = by_bytes(served, [deep_png, png(rgba)])
    np.testing.assert_allclose(got[0], by_pixels(served, eight), atol=1e-5)
    np.testing.assert_allclose(got[1], by_pixels(served, rgba[..., :3]), atol=1e-5)


def drawn_image(kind, width, height, orientation, seed):
    """(bytes, upright RGB pixels or None for a bomb) of a drawn kind."""
    rng = np.random.default_rng(seed)
    if kind == "bomb":
        return bomb("PNG"), None
    if kind == "jpeg":
        data = jpeg_bytes(smooth_image(height, width, seed), orientation)
        return data, UPRIGHT[orientation](tf.io.decode_jpeg(data, channels=3).numpy())
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    if kind == "gray":
        return png(pixels[..., 0]), np.repeat(pixels[..., :1], 3, axis=-1)
    if kind == "rgba":
        alpha = np.concatenate([pixels, np.full_like(pixels[..., :1], 255)], axis=-1)
        return png(alpha), pixels
    return png(pixels), pixels


image_draws = st.tuples(
    st.sampled_from(["jpeg", "png", "gray", "rgba", "bomb"]),
    st.integers(1, 40),
    st.integers(1, 40),
    st.integers(1, 8),
    st.integers(0, 99),
)


@settings(max_examples=12, deadline=None)
@given(batch=st.lists(image_draws, min_size=0, max_size=3))
def test_serving_bytes_gives_the_upright_result_or_a_one_line_refusal(served, batch):
    """Property: for a drawn batch (empty included) of JPEGs in any orientation, PNGs in
    gray, RGB and opaque RGBA, of drawn sizes, and bombs, `serving_bytes` gives each image
    the logits of its upright pixels, or refuses the batch with one INVALID_ARGUMENT line
    naming the declared size and the limit, and no file is written."""
    before = listing(served["root"])
    images = [drawn_image(*draw) for draw in batch]
    encoded = [data for data, _ in images]
    if any(pixels is None for _, pixels in images):
        with pytest.raises(tf.errors.InvalidArgumentError) as raised:
            by_bytes(served, encoded)
        line = next(x for x in raised.value.message.splitlines() if "image header" in x)
        assert "declares 8000 x 6000 pixels" in line and str(MAX_PIXELS) in line
    else:
        got = by_bytes(served, encoded)
        assert got.shape == (len(batch), 10)
        for row, (_, pixels) in zip(got, images, strict=True):
            np.testing.assert_allclose(row, by_pixels(served, pixels), atol=1e-5)
    assert listing(served["root"]) == before
