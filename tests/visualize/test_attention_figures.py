"""Overlay and grid figures: size, aspect ratio, where the heat lands, atomic PNG writes."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from keras_vit.visualize import layer_grid_figure, overlay_figure, save_png


def read_png(path):
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


@pytest.mark.parametrize("height, width", [(300, 451), (1000, 700), (20, 64)])
def test_overlay_png_has_the_image_aspect_ratio(tmp_path, height, width):
    image = np.full((height, width, 3), 128, np.uint8)
    fig = overlay_figure(image, np.random.default_rng(0).random((2, 3)), "title\nline 2")
    pixels = read_png(save_png(fig, tmp_path / "o.png"))
    out_h, out_w = pixels.shape[:2]
    assert out_w == max(width, 640)
    assert abs(out_h - out_w * height / width) <= 1.0


def test_heat_lands_on_the_right_cell(tmp_path):
    # A (2, 3) map with all its mass in the bottom-right cell, fully opaque: jet(1) is dark
    # red (0.5, 0, 0), jet(0) dark blue (0, 0, 0.5).
    heatmap = np.zeros((2, 3))
    heatmap[1, 2] = 4.0
    fig = overlay_figure(np.zeros((200, 300), np.uint8), heatmap, alpha=1.0, min_width=300)
    pixels = read_png(save_png(fig, tmp_path / "o.png")).astype(int)
    bottom_right = pixels[185, 285]
    top_left = pixels[15, 15]
    assert bottom_right[0] > 100 and bottom_right[2] < 30
    assert top_left[2] > 100 and top_left[0] < 30


def test_save_png_is_atomic_and_overwrites(tmp_path):
    path = tmp_path / "sub" / "map.png"
    image = np.zeros((10, 10, 3), np.uint8)
    save_png(overlay_figure(image, np.ones((1, 1)), min_width=50), path)
    save_png(overlay_figure(image, np.ones((1, 1)), min_width=80), path)
    assert [p.name for p in path.parent.iterdir()] == ["map.png"]
    assert read_png(path).shape[:2] == (80, 80)


def test_layer_grid(tmp_path):
    image = np.zeros((30, 60, 3), np.uint8)
    maps = [np.eye(2)] * 5
    fig = layer_grid_figure(image, maps, [f"block {i}" for i in range(5)])
    pixels = read_png(save_png(fig, tmp_path / "grid.png"))
    assert pixels.shape[1] > pixels.shape[0]  # 4 columns x 2 rows of wide panels
    with pytest.raises(ValueError, match="titles"):
        layer_grid_figure(image, maps, ["only one"])
