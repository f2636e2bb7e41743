"""Learning-curve figure of a run (matplotlib, Agg canvas: no display needed)."""

from __future__ import annotations

import math

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from keras_vit import _atomic


def smoothed_loss_floor(label_smoothing: float, num_classes: int) -> float:
    """The lowest cross-entropy reachable with label smoothing: the entropy of the smoothed
    target, (1 - e + e/K) on the true class and e/K on the K - 1 others (Szegedy et al.
    2016, section 7). 0 without smoothing."""
    if not label_smoothing or num_classes < 2:
        return 0.0
    share = label_smoothing / num_classes
    top = 1.0 - label_smoothing + share
    return -(top * math.log(top) + (num_classes - 1) * share * math.log(share))


def best_epoch_index(rows: list[dict], monitor: str | None) -> int | None:
    """Index into `rows` of the best value of `monitor` (lowest for a loss, else highest);
    None when no row has it."""
    scored = [(i, row[monitor]) for i, row in enumerate(rows) if monitor and monitor in row]
    if not scored:
        return None
    pick = min if "loss" in monitor else max
    return pick(scored, key=lambda item: item[1])[0]


def plot_learning_curves(rows: list[dict], path, **options) -> None:
    """Writes `learning_curve_figure(rows, **options)` as a PNG, atomically.

    Args:
        rows: see `learning_curve_figure`.
        path: destination `.png`.
        options: `title`, `monitor`, `label_smoothing`, `num_classes` (see
            `learning_curve_figure`).
    """
    figure = learning_curve_figure(rows, **options)
    with _atomic.atomic_path(path) as tmp:
        figure.savefig(tmp, dpi=100)


def learning_curve_figure(
    rows: list[dict],
    *,
    title: str | None = None,
    monitor: str | None = None,
    label_smoothing: float = 0.0,
    num_classes: int | None = None,
) -> Figure:
    """Loss and accuracy per epoch (train and validation), one panel each.

    Args:
        rows: history rows as written by `keras_vit.train.callbacks.HistoryCSV`: dicts with
            `epoch` (from 0; drawn from 1, as Keras' progress bar counts) and any of `loss`,
            `val_loss`, `accuracy`, `val_accuracy`.
        title: figure title (runs use the run directory's name).
        monitor: the log that picks the best model (e.g. "val_accuracy"); its best epoch is
            marked with a vertical line in both panels. None: no mark.
        label_smoothing, num_classes: with smoothing, the loss panel shows the floor the
            loss cannot go below (`smoothed_loss_floor`) as a dotted line, so a loss that
            stops near it reads as expected, not as a stalled run.
    """
    figure = Figure(figsize=(9, 3.8), layout="constrained")
    FigureCanvasAgg(figure)
    panels = [("loss", "Loss"), ("accuracy", "Accuracy")]
    axes = figure.subplots(1, len(panels))
    epochs = [int(row["epoch"]) + 1 for row in rows]
    best = best_epoch_index(rows, monitor)
    for ax, (key, label) in zip(axes, panels, strict=True):
        for prefix, style in (("", "-o"), ("val_", "--s")):
            name = prefix + key
            points = [(e, row[name]) for e, row in zip(epochs, rows, strict=True) if name in row]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, style, markersize=3, label="validation" if prefix else "train")
        if best is not None:
            ax.axvline(
                epochs[best],
                color="tab:green",
                alpha=0.6,
                label=f"best epoch {epochs[best]} ({monitor} {rows[best][monitor]:.4f})",
            )
        if key == "loss" and label_smoothing and num_classes:
            floor = smoothed_loss_floor(label_smoothing, num_classes)
            ax.axhline(
                floor,
                color="gray",
                linestyle=":",
                label=f"floor {floor:.3f} (label smoothing {label_smoothing:g})",
            )
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="small")
    if title:
        figure.suptitle(title)
    return figure
