"""Labels outside [0, num_classes), runs that never trained, batches the
replicas cannot share. Every refusal is one line naming the value and the rule, before any
file is written. (The drawn neighbours of these cases: tests/test_careless_property.py.)"""

from __future__ import annotations

import json
import os
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import data
from keras_vit.data import tfds_source
from keras_vit.evaluate import fewshot
from keras_vit.train import losses, run_directory, runs
from tests.runtime.test_distribute import run_helper

TINY = dict(image_size=8, patch_size=4, hidden_dim=8, num_heads=2, mlp_dim=16, num_layers=1)
K = 5


def tiny_build(num_classes=K, loss=None):
    def build():
        model = keras_vit.ViT(num_classes=num_classes, **TINY)
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss=loss or losses.loss(0.1),
            metrics=["accuracy"],
            jit_compile=False,
        )
        return model

    return build


def images(n, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (n, 8, 8, 3)).astype("float32")


def assert_nothing_written(run_dir):
    assert not os.path.exists(run_dir) or not os.listdir(run_dir), os.listdir(run_dir)


# --- point 2: labels -----------------------------------------------------------------------

LOGITS = np.random.default_rng(1).normal(size=(4, K)).astype("float32")
BAD_LABELS = [
    ([0, 7, 1, 2], "label 7 at index 1 is outside the class range [0, 5)"),
    ([0, 1, -1, 2], "label -1 at index 2 is outside the class range [0, 5)"),
    ([0, 1, 2, 1.5], "label 1.5 at index 3 is not an integer class id in [0, 5)"),
]


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("labels, message", BAD_LABELS)
def test_the_loss_raises_on_bad_labels_in_eager_and_graph_mode(smoothing, labels, message):
    """Before: with label_smoothing=0.1, labels 7 and -1 of 5 classes gave a finite loss
    (one_hot of them is all zeros), and 1.5 was cast to 1 with or without smoothing."""
    loss = losses.loss(smoothing)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace(")", r"\)")):
        loss(np.array(labels), LOGITS)
    graph = tf.function(lambda y: loss(y, LOGITS), jit_compile=False)
    # Our Assert, or for an integer label out of range without smoothing TensorFlow's own
    # sparse cross-entropy kernel: the graph does not order the two, either may refuse first.
    refused = r"class id in \[0,\] \[5\]|label value of -?\d+ which is outside the valid range"
    with pytest.raises(tf.errors.InvalidArgumentError, match=refused):
        graph(tf.constant(labels))
    # XLA drops assert ops (TensorFlow 2.21): there the loss is NaN, never a finite number.
    xla = tf.function(lambda y: loss(y, LOGITS), jit_compile=True)
    assert np.isnan(float(xla(tf.constant(labels))))


def test_the_checked_losses_equal_keras_on_good_labels_and_round_trip():
    labels = np.array([0, 4, 2, 1])
    plain = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(labels, LOGITS)
    assert float(losses.loss()(labels, LOGITS)) == pytest.approx(float(plain), rel=1e-6)
    assert isinstance(losses.loss(), keras.losses.SparseCategoricalCrossentropy)
    for loss in (losses.loss(), losses.loss(0.1)):
        restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
        assert type(restored) is type(loss)
        with pytest.raises(ValueError, match="label 7 at index 1"):
            restored(np.array([0, 7, 1, 2]), LOGITS)


def test_model_fit_with_smoothing_refuses_labels_outside_the_classes():
    """The issue's case: model.fit with loss(label_smoothing=0.1) trained on 7 and -1."""
    model = tiny_build()()
    with pytest.raises(tf.errors.InvalidArgumentError, match="first bad label"):
        model.fit(images(4), np.array([0, 7, 1, -1]), batch_size=4, epochs=1, verbose=0)


@pytest.mark.parametrize(
    "labels, message",
    [
        (np.array([0, 1, -1, 2]), "label -1 at index 2 is outside the class range"),
        (np.array([0, 1.5, 1, 2]), "label 1.5 at index 1 is not an integer class id"),
        (np.array([0, np.nan, 1, 2]), "label nan at index 1 is not an integer class id"),
        (np.array([0, 10**9, 1, 2]), "label 1000000000 at index 1 is outside"),
        (np.array([True, False, True, True]), "labels must be integer class ids, not bool"),
        (np.array(["0", "1", "1", "2"]), "labels must be integer class ids, not <U1"),
    ],
)
def test_data_load_refuses_bad_array_labels_naming_the_first(labels, message):
    pixels = np.zeros((4, 8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match=message) as error:
        data.load((pixels, labels), image_size=8, batch_size=2, training=True)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("value", [np.nan, np.inf, -1.0, 256.0])
def test_data_load_refuses_pixels_that_are_not_finite_values_in_0_255(value):
    pixels = np.zeros((4, 8, 8, 3), np.float32)
    pixels[2, 3, 1, 0] = value
    with pytest.raises(ValueError, match=rf"x\[2, 3, 1, 0\]={value!r}"):
        data.load((pixels, np.arange(4)), image_size=8, batch_size=2, training=False)


def fake_tfds_builder(labels, feature):
    """A stand-in for a prepared TFDS builder: its info and `as_dataset` (the part of TFDS
    that keras_vit.data.tfds_source reads)."""
    info = types.SimpleNamespace(
        supervised_keys=("image", "label"),
        features={"image": types.SimpleNamespace(shape=(8, 8, 3)), "label": feature},
        splits={"train": types.SimpleNamespace(num_examples=len(labels))},
    )
    pixels = np.zeros((len(labels), 8, 8, 3), np.uint8)
    return types.SimpleNamespace(
        name="fake",
        info=info,
        as_dataset=lambda **kw: tf.data.Dataset.from_tensor_slices(
            (pixels, np.asarray(labels, np.int64))
        ),
    )


def test_tfds_labels_outside_the_class_label_raise_where_read(monkeypatch):
    """TFDS splits are read lazily: a label -1 (some test splits mean "no label") stops the
    pipeline at that example, naming it and the range."""
    feature = types.SimpleNamespace(num_classes=3, names=["a", "b", "c"])
    builder = fake_tfds_builder([0, 2, -1, 1], feature)
    monkeypatch.setattr(tfds_source, "prepared_builder", lambda name, data_dir=None: builder)
    monkeypatch.setattr(tfds_source, "_tfds", lambda: types.SimpleNamespace(ReadConfig=dict))
    dataset = data.load("tfds:fake", image_size=8, batch_size=2, training=False)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"class id in \[0, 3\)") as error:
        list(dataset)
    assert "[-1]" in str(error.value)
    good = fake_tfds_builder([0, 2, 1, 1], feature)
    monkeypatch.setattr(tfds_source, "prepared_builder", lambda name, data_dir=None: good)
    labels = np.concatenate([y for _, y in data.load("tfds:fake", image_size=8, batch_size=2,
                                                     training=False)])  # fmt: skip
    assert labels.tolist() == [0, 2, 1, 1]


def test_tfds_labels_without_a_class_count_are_refused_before_work(monkeypatch):
    builder = fake_tfds_builder([0, 1], types.SimpleNamespace(dtype="int64"))
    monkeypatch.setattr(tfds_source, "prepared_builder", lambda name, data_dir=None: builder)
    with pytest.raises(ValueError, match="label feature 'label' without a class count"):
        data.describe("tfds:fake")


def test_folder_labels_are_the_class_folders_in_order(tmp_path):
    """Folders cannot carry a bad label: each is the index of its sub-folder (sorted)."""
    for name, count in (("b", 2), ("a", 3)):
        (tmp_path / name).mkdir()
        for index in range(count):
            pixels = np.full((8, 8, 3), index, np.uint8)
            (tmp_path / name / f"{index}.png").write_bytes(tf.io.encode_png(pixels).numpy())
    dataset = data.load(str(tmp_path), image_size=8, batch_size=None, training=False)
    assert sorted(int(y) for _, y in dataset) == [0, 0, 0, 1, 1]


def test_fit_run_refuses_labels_beyond_the_model_classes_before_any_file(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(ValueError, match=r"label 7 at index 1 is outside the class range \[0, 5\)"):
        runs.fit_run(run_dir, tiny_build(), (images(4), np.array([0, 7, 1, 2])), epochs=1,
                     batch_size=2, verbose=0)  # fmt: skip
    assert_nothing_written(run_dir)
    with pytest.raises(ValueError, match="labels of validation_data: label -1 at index 0"):
        runs.fit_run(run_dir, tiny_build(), (images(4), np.arange(4)), epochs=1, batch_size=2,
                     validation_data=(images(2), np.array([-1, 0])), verbose=0)  # fmt: skip
    assert_nothing_written(run_dir)


def test_fit_run_stops_at_a_dataset_label_outside_the_classes(tmp_path):
    dataset = tf.data.Dataset.from_tensor_slices((images(4), np.array([0, 1, 2, 9]))).batch(2)
    run_dir = tmp_path / "run"
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Bad labels in train_data"):
        runs.fit_run(run_dir, tiny_build(), dataset, epochs=1, verbose=0)
    assert not run_directory.is_complete(run_dir)


def test_fit_run_steps_leave_the_loss_label_check_to_the_data_checks(tmp_path, monitor_checks):
    """fit_run checks every label where the data is made (arrays whole, datasets in their
    tf.data graph), so its steps are traced without the loss's own check (on JAX a host
    callback every step); the model it returns traces its steps again, with the check."""
    dataset = tf.data.Dataset.from_tensor_slices((images(4), np.array([0, 1, 2, 3]))).batch(2)
    result = runs.fit_run(tmp_path / "run", tiny_build(), dataset, epochs=1, verbose=0,
                          validation_data=dataset)  # fmt: skip
    assert monitor_checks == []
    with pytest.raises(tf.errors.InvalidArgumentError, match="first bad label"):
        result.model.fit(images(4), np.array([0, 7, 1, -1]), batch_size=4, epochs=1, verbose=0)
    assert monitor_checks


@pytest.fixture
def monitor_checks(monkeypatch):
    """The labels each traced in-step label check of the losses was given."""
    calls = []
    check = losses._traced_label_check

    def recorded(labels, valid, num_classes):
        calls.append(labels)
        return check(labels, valid, num_classes)

    monkeypatch.setattr(losses, "_traced_label_check", recorded)
    return calls


def test_fewshot_refuses_labels_outside_the_classes():
    """Before: a label -1 indexed np.eye(K)[-1], the last class, without a word."""
    features = np.random.default_rng(0).normal(size=(6, 4))
    test = [(features[:2], np.array([0, 1]))]
    with pytest.raises(ValueError, match="few-shot training labels: label -1 at index 5"):
        fewshot.fewshot_from_features(features, [0, 0, 1, 1, 2, -1], test, num_classes=3,
                                      shots=(1,), seeds=1, holdout_per_class=0)  # fmt: skip
    with pytest.raises(ValueError, match=r"test labels: label 3 at index 1 .* \[0, 3\)"):
        fewshot.fewshot_from_features(features, [0, 0, 1, 1, 2, 2], [(features[:2], [0, 3])],
                                      num_classes=3, shots=(1,), seeds=1,
                                      holdout_per_class=0)  # fmt: skip


# --- point 3: a run that never trained -----------------------------------------------------


def test_a_training_pipeline_smaller_than_its_batch_is_refused():
    """The issue's case: 5 images at batch 8 gave a pipeline of 0 batches."""
    source = (np.zeros((5, 8, 8, 3), np.uint8), np.arange(5) % 2)
    with pytest.raises(ValueError, match="batch size 8 is larger than the 5 training images"):
        data.load(source, "train", image_size=8, batch_size=8, training=True)
    # evaluation keeps the partial batch: one batch of 5
    assert [len(y) for _, y in data.load(source, image_size=8, batch_size=8, training=False)] == [5]


def test_fit_run_refuses_a_dataset_of_zero_batches_before_any_file(tmp_path):
    dataset = tf.data.Dataset.from_tensor_slices((images(5), np.arange(5))).batch(8, True)
    run_dir = tmp_path / "run"
    with pytest.raises(ValueError, match=r"yields no batch \(its cardinality is 0\)"):
        runs.fit_run(run_dir, tiny_build(), dataset, epochs=2, verbose=0)
    assert_nothing_written(run_dir)


@pytest.mark.filterwarnings("ignore:Your input ran out of data")
def test_fit_run_stops_an_epoch_of_zero_steps_of_a_dataset_of_unknown_size(tmp_path):
    """Before: Keras warns "ran out of data", counts optimizer iterations anyway, and
    metrics.json said steps=2 for a run that never trained."""
    dataset = tf.data.Dataset.from_tensor_slices((images(5), np.arange(5)))
    dataset = dataset.filter(lambda x, y: y > 10).batch(2)
    assert int(dataset.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    run_dir = tmp_path / "run"
    with pytest.raises(ValueError, match="Epoch 1 took no training step"):
        runs.fit_run(run_dir, tiny_build(), dataset, epochs=2, verbose=0)
    assert not run_directory.is_complete(run_dir)
    assert not (run_dir / "history.csv").exists()


def test_fit_run_refuses_empty_arrays_and_a_zero_batch_size(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(ValueError, match="needs at least one image"):
        runs.fit_run(run_dir, tiny_build(), (images(0), np.arange(0)), epochs=1, verbose=0)
    with pytest.raises(ValueError, match="batch_size=0"):
        runs.fit_run(run_dir, tiny_build(), (images(4), np.arange(4)), epochs=1, batch_size=0)
    assert_nothing_written(run_dir)


def test_fit_run_on_arrays_smaller_than_the_batch_trains_the_partial_batch(tmp_path):
    """Arrays keep the last partial batch (Keras' own rule): 5 images at batch 8 is one
    optimizer step an epoch, and the weights move."""
    build = tiny_build()
    result = runs.fit_run(tmp_path / "run", build, (images(5), np.arange(5)), epochs=2,
                          batch_size=8, verbose=0)  # fmt: skip
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["steps"] == 2
    assert int(result.model.optimizer.iterations) == 2


# --- point 4: batches the replicas cannot share --------------------------------------------


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    return run_helper("uneven_replicas.py", tmp_path_factory.mktemp("uneven"))


def test_arrays_whose_last_batch_the_replicas_cannot_share_are_refused(uneven):
    """Before: 9 images at batch 4 on 2 replicas ended 0.049 away from one device's weights;
    at batch 5 they crashed in AddN mid-epoch."""
    assert "end every epoch with a batch of 1" in uneven["9_at_4"]
    assert "replicas=2" in uneven["9_at_4"] and "batch_size=4" in uneven["9_at_4"]
    assert "multiple of the number of replicas (2" in uneven["9_at_5"]
    assert "Received: batch_size=5" in uneven["9_at_5"]
    assert "Received: batch_size=5" in uneven["dataset_batch_5"]
    assert uneven["nothing_written"]


def test_arrays_the_replicas_share_evenly_match_one_device(uneven):
    """10 images at batch 4 (4, 4, 2): every share equal, so the 2-replica run is the
    one-device run (same initial weights, order, SGD)."""
    assert uneven["10_at_4_steps"] == [6, 6]
    assert uneven["10_at_4_weight_diff"] < 1e-4
    assert uneven["10_at_4_weight_change"] > 1e-3  # it trained


def test_an_unknown_batch_size_is_asserted_per_batch_under_replicas(uneven):
    assert "cannot share evenly" in uneven["unknown_batch"]
