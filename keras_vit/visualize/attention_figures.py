"""Figures for attention maps: a rollout overlay and a grid of per-layer maps (matplotlib).

Uses matplotlib's object API with the Agg canvas (no pyplot, no GUI, no global state).
"""

from __future__ import annotations

import math
import os

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from keras_vit._atomic import atomic_path

OVERLAY_CMAP = "jet"


def _normalised(heatmap) -> np.ndarray:
    """Scales a map to [0, 1] by its maximum (all-zero maps stay zero)."""
    heatmap = np.asarray(heatmap, dtype=np.float32)
    top = float(heatmap.max()) if heatmap.size else 0.0
    return heatmap / top if top > 0 else heatmap


def _show_image(ax, image) -> tuple[int, int]:
    image = np.asarray(image)
    if image.ndim == 3 and image.shape[-1] == 1:
        image = image[..., 0]
    height, width = image.shape[:2]
    ax.imshow(image, cmap="gray" if image.ndim == 2 else None, extent=(0, width, height, 0))
    return height, width


def _overlay(ax, image, heatmap, alpha) -> None:
    height, width = _show_image(ax, image)
    ax.imshow(
        _normalised(heatmap),
        cmap=OVERLAY_CMAP,
        alpha=alpha,
        vmin=0.0,
        vmax=1.0,
        interpolation="bilinear",
        extent=(0, width, height, 0),
    )
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.set_axis_off()


def overlay_figure(
    image,
    heatmap,
    title: str | None = None,
    *,
    alpha: float = 0.5,
    min_width: int = 640,
    dpi: int = 100,
) -> Figure:
    """The image with a heat map (e.g. attention rollout) over it, at the image's aspect ratio.

    The axes fill the whole figure and the title is drawn inside the image (top left, on a
    translucent box), so the saved PNG has exactly the image's aspect ratio (to within one
    pixel of rounding).

    Args:
        image: `(height, width, channels)` or `(height, width)` image, uint8 or float in [0, 1].
        heatmap: `(grid_h, grid_w)` map, stretched over the image with bilinear
            interpolation and scaled to [0, 1] by its maximum.
        title: text drawn on the image (e.g. the top-5 classes), or None.
        alpha: opacity of the heat map (default 0.5).
        min_width: output width in pixels at least (default 640); the image's own width if
            larger.
        dpi: figure resolution (default 100).

    Returns:
        A `matplotlib.figure.Figure` with an Agg canvas.
    """
    height, width = np.asarray(image).shape[:2]
    scale = max(1.0, min_width / width)
    fig = Figure(figsize=(width * scale / dpi, height * scale / dpi), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    _overlay(ax, image, heatmap, alpha)
    if title:
        ax.text(
            0.01,
            0.99,
            title,
            transform=ax.transAxes,
            va="top",
            ha="left",
            fontsize=9,
            family="monospace",
            bbox={"facecolor": "white", "alpha": 0.75, "edgecolor": "none"},
        )
    return fig


def layer_grid_figure(
    image, heatmaps, titles, *, alpha: float = 0.5, panel_inches: float = 2.5, dpi: int = 100
) -> Figure:
    """A grid of overlays, one per heat map (e.g. one per Transformer block).

    Args:
        image: `(height, width, channels)` or `(height, width)` image.
        heatmaps: sequence of `(grid_h, grid_w)` maps.
        titles: one title per map.
        alpha: opacity of the heat maps (default 0.5).
        panel_inches: width of one panel (default 2.5).
        dpi: figure resolution (default 100).

    Returns:
        A `matplotlib.figure.Figure` with an Agg canvas.

    Raises:
        ValueError: if `titles` and `heatmaps` differ in length or are empty.
    """
    if len(heatmaps) != len(titles) or not heatmaps:
        raise ValueError(
            "`heatmaps` and `titles` must be non-empty and of equal length. "
            f"Received: {len(heatmaps)} maps, {len(titles)} titles"
        )
    height, width = np.asarray(image).shape[:2]
    cols = min(4, len(heatmaps))
    rows = math.ceil(len(heatmaps) / cols)
    panel_h = panel_inches * height / width
    fig = Figure(figsize=(cols * panel_inches, rows * (panel_h + 0.35)), dpi=dpi)
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.flat[len(heatmaps) :]:
        ax.set_axis_off()
    for ax, heatmap, title in zip(axes.flat, heatmaps, titles, strict=False):
        _overlay(ax, image, heatmap, alpha)
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def save_png(fig: Figure, path: str | os.PathLike) -> str:
    """Writes `fig` as a PNG atomically (temporary file in the same folder, then os.replace).

    Returns:
        The path written, as a string.
    """
    path = os.fspath(path)
    with atomic_path(path) as tmp, open(tmp, "wb") as stream:
        fig.savefig(stream, format="png", dpi=fig.dpi)
    return path
