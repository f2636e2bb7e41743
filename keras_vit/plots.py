"""Learning-curve figure of a run (matplotlib, Agg canvas: no display needed)."""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from keras_vit import _atomic


def plot_learning_curves(rows: list[dict], path, *, title: str | None = None) -> None:
    """Draws loss and accuracy per epoch (train and validation) and writes a PNG atomically.

    Args:
        rows: history rows as written by `keras_vit.callbacks.HistoryCSV`: dicts with
            `epoch` and any of `loss`, `val_loss`, `accuracy`, `val_accuracy`.
        path: destination `.png`.
        title: optional figure title.
    """
    figure = Figure(figsize=(9, 3.5), layout="constrained")
    FigureCanvasAgg(figure)
    panels = [("loss", "Loss"), ("accuracy", "Accuracy")]
    axes = figure.subplots(1, len(panels))
    epochs = [int(row["epoch"]) + 1 for row in rows]
    for ax, (key, label) in zip(axes, panels, strict=True):
        for prefix, style in (("", "-o"), ("val_", "--s")):
            name = prefix + key
            points = [(e, row[name]) for e, row in zip(epochs, rows, strict=True) if name in row]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, style, markersize=3, label="validation" if prefix else "train")
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend()
    if title:
        figure.suptitle(title)
    with _atomic.atomic_path(path) as tmp:
        figure.savefig(tmp, dpi=100)
