"""LearningCurvePlot passes the run's title, monitor and label smoothing to the figure."""

from __future__ import annotations

import numpy as np

import keras_vit
from keras_vit import callbacks, plots, training


def test_learning_curve_plot_reads_smoothing_and_classes_from_the_model(
    tmp_path, monkeypatch, tiny_vit_kwargs
):
    drawn = []
    monkeypatch.setattr(plots, "plot_learning_curves", lambda rows, path, **o: drawn.append(o))
    model = keras_vit.ViT(**tiny_vit_kwargs)
    model.compile(optimizer="sgd", loss=training.loss(label_smoothing=0.1))
    history = callbacks.HistoryCSV(tmp_path / "history.csv")
    plot = callbacks.LearningCurvePlot(
        history, tmp_path / "curves.png", title="run-7: learning curves", monitor="loss"
    )
    x = np.zeros((4, 32, 32, 3), "float32")
    model.fit(x, np.arange(4), epochs=1, batch_size=4, callbacks=[history, plot], verbose=0)
    assert drawn == [
        {
            "title": "run-7: learning curves",
            "monitor": "loss",
            "label_smoothing": 0.1,
            "num_classes": 10,
        }
    ]
