"""keras_vit.callbacks: LearningCurvePlot's figure options; ModelSnapshots' best/last files.

ModelSnapshots is driven directly with scripted logs, so the best epoch (1) is neither the
first nor the last; the reference is the logits of the weights set before each epoch end.
"""

from __future__ import annotations

import json

import numpy as np

import keras_vit
from keras_vit import callbacks, learning_curves, runs, training
from keras_vit.callbacks import ModelSnapshots
from keras_vit.checkpoints import load_npz
from tests.conftest import TINY_VIT
from tests.model_helpers import random_images
from tests.output_checks import assert_outputs_close, randomize_weights


def test_learning_curve_plot_reads_smoothing_and_classes_from_the_model(
    tmp_path, monkeypatch, tiny_vit_kwargs
):
    drawn = []
    monkeypatch.setattr(
        learning_curves, "plot_learning_curves", lambda rows, path, **o: drawn.append(o)
    )
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


SCRIPTED_ACCURACY = [0.5, 0.9, 0.3]  # best: epoch 1


def test_best_and_last_files_hold_their_epochs_weights(tmp_path):
    model = keras_vit.ViT(**TINY_VIT)
    snapshots = ModelSnapshots(tmp_path, monitor="val_accuracy")
    snapshots.set_model(model)
    snapshots.on_train_begin()
    x = random_images(np.random.default_rng(0), 4, 32, 32)
    logits = []
    for epoch, accuracy in enumerate(SCRIPTED_ACCURACY):
        randomize_weights(model, seed=epoch)  # "training" between epoch ends
        logits.append(model.predict(x, verbose=0))
        snapshots.on_epoch_end(epoch, {"val_accuracy": accuracy})
    assert json.loads((tmp_path / "best.json").read_text()) == {
        "epoch": 1,
        "monitor": "val_accuracy",
        "value": 0.9,
    }
    for stem, epoch in (("best", 1), ("last", 2)):
        loaded = runs.load_model(tmp_path / f"{stem}.keras")
        assert_outputs_close(loaded.predict(x, verbose=0), logits[epoch], atol=1e-6, what=stem)
        fresh = keras_vit.ViT(**TINY_VIT)
        load_npz(fresh, tmp_path / f"{stem}.npz")
        assert_outputs_close(fresh.predict(x, verbose=0), logits[epoch], atol=1e-6, what=stem)
