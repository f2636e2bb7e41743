"""The learning-curve figure of a run: title, best epoch marked, label-smoothing loss floor."""

from __future__ import annotations

import numpy as np
import pytest

from keras_vit.train import losses
from keras_vit.train.learning_curves import (
    best_epoch_index,
    learning_curve_figure,
    plot_learning_curves,
    smoothed_loss_floor,
)

ROWS = [
    {"epoch": 0, "loss": 2.0, "accuracy": 0.3, "val_loss": 1.9, "val_accuracy": 0.40},
    {"epoch": 1, "loss": 1.2, "accuracy": 0.6, "val_loss": 1.3, "val_accuracy": 0.71},
    {"epoch": 2, "loss": 0.9, "accuracy": 0.7, "val_loss": 1.1, "val_accuracy": 0.69},
]


@pytest.mark.parametrize("smoothing, classes", [(0.1, 10), (0.2, 37), (0.05, 2)])
def test_loss_floor_is_the_smoothed_loss_of_a_perfect_prediction(smoothing, classes):
    # Independent reference: keras_vit's own training loss, fed logits whose softmax is the
    # smoothed target itself (the minimiser of cross-entropy against that target).
    target = np.full(classes, smoothing / classes)
    target[1] += 1 - smoothing
    loss = losses.loss(label_smoothing=smoothing)
    value = float(loss(np.array([1]), np.log(target)[None].astype("float32")))
    assert smoothed_loss_floor(smoothing, classes) == pytest.approx(value, rel=1e-5)
    assert smoothed_loss_floor(0.0, classes) == 0.0


def test_best_epoch_is_highest_accuracy_or_lowest_loss():
    assert best_epoch_index(ROWS, "val_accuracy") == 1
    assert best_epoch_index(ROWS, "val_loss") == 2
    assert best_epoch_index(ROWS, "top5") is None
    assert best_epoch_index(ROWS, None) is None


def test_figure_has_title_best_epoch_mark_and_floor():
    figure = learning_curve_figure(
        ROWS,
        title="mnist-run: learning curves",
        monitor="val_accuracy",
        label_smoothing=0.1,
        num_classes=10,
    )
    assert figure._suptitle.get_text() == "mnist-run: learning curves"
    loss_axes, accuracy_axes = figure.axes
    for axes in (loss_axes, accuracy_axes):
        labels = [line.get_label() for line in axes.lines]
        assert "best epoch 2 (val_accuracy 0.7100)" in labels  # epochs drawn from 1
        mark = next(line for line in axes.lines if line.get_label().startswith("best"))
        assert list(mark.get_xdata()) == [2, 2]
    floor = next(line for line in loss_axes.lines if line.get_label().startswith("floor"))
    assert floor.get_ydata()[0] == pytest.approx(smoothed_loss_floor(0.1, 10))
    assert not any(line.get_label().startswith("floor") for line in accuracy_axes.lines)


def test_no_floor_without_smoothing_and_png_is_written(tmp_path):
    figure = learning_curve_figure(ROWS, monitor="val_loss")
    assert not any(line.get_label().startswith("floor") for line in figure.axes[0].lines)
    path = tmp_path / "curves.png"
    plot_learning_curves(ROWS, path, title="t", monitor="val_loss")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
