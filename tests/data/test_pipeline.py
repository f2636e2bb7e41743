"""The training pipeline: shuffling, augmentation, batching, MixUp, RandAugment, seeds."""

from __future__ import annotations

import numpy as np
import pytest

from keras_vit import data


def _first_batch(dataset):
    x, y = next(iter(dataset))
    return x.numpy(), y.numpy()


def _tiny():
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (24, 16, 16, 3), dtype=np.uint8), np.arange(24) % 4


def test_training_batches_are_shaped_scaled_and_drop_the_remainder():
    dataset = data.load("digits", "test", image_size=16, batch_size=64, training=True)
    batches = list(dataset)
    assert len(batches) == 500 // 64
    for x, y in batches:
        assert x.shape == (64, 16, 16, 1) and y.shape == (64,)
        assert -1.0 <= float(x.numpy().min()) and float(x.numpy().max()) <= 1.0


def test_seed_makes_the_pipeline_reproducible_and_epochs_differ():
    make = lambda seed: data.load(  # noqa: E731
        _tiny(), image_size=16, batch_size=8, training=True, shuffle_seed=seed
    )
    first, again, other = make(3), make(3), make(4)
    x1, y1 = _first_batch(first)
    np.testing.assert_array_equal(x1, _first_batch(again)[0])
    assert not np.array_equal(x1, _first_batch(other)[0])
    x2, _ = _first_batch(first)  # second pass over the same dataset: a new epoch
    assert not np.array_equal(x1, x2)


def test_eval_pipeline_keeps_order_and_last_partial_batch():
    x, y = _tiny()
    batches = list(data.load((x, y), image_size=16, batch_size=10, training=False))
    assert [len(b[1]) for b in batches] == [10, 10, 4]
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), y)


def test_one_hot_and_mixup_labels_are_distributions():
    _, y = _first_batch(
        data.load(_tiny(), image_size=16, batch_size=8, training=False, one_hot=True)
    )
    np.testing.assert_array_equal(y, np.eye(4)[np.arange(8) % 4])
    mix = data.Augmentation(crop_area_range=None, flip=False, mixup_alpha=0.4)
    x, y = _first_batch(data.load(_tiny(), image_size=16, batch_size=8, training=True, augment=mix))
    assert y.shape == (8, 4) and x.shape == (8, 16, 16, 3)
    np.testing.assert_allclose(y.sum(1), 1.0, atol=1e-6)
    assert (y.max(1) < 1.0).any()


def test_randaugment_runs_in_the_pipeline_and_needs_rgb():
    augment = data.Augmentation(crop_area_range=(0.5, 1.0), randaugment=True)
    x, _ = _first_batch(
        data.load(_tiny(), image_size=16, batch_size=8, training=True, augment=augment)
    )
    assert x.shape == (8, 16, 16, 3) and -1.0 <= x.min() and x.max() <= 1.0
    with pytest.raises(ValueError, match="RandAugment needs 3 channels"):
        data.load("mnist", image_size=28, batch_size=8, training=True, augment=augment)


def test_default_augmentation_is_mild_for_digits_and_the_release_for_others():
    assert data.default_augmentation("mnist").flip is False
    assert data.default_augmentation("digits").crop_area_range[0] >= 0.5
    natural = data.default_augmentation("cifar10")
    assert natural.flip is True and natural.crop_area_range == (0.05, 1.0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(image_size=0), "image_size"),
        (dict(batch_size=0), "batch_size"),
        (dict(channels=2), "channels"),
        (dict(augment="heavy"), "augment"),
        (dict(split="validation"), "splits"),
    ],
)
def test_bad_arguments_are_refused(kwargs, match):
    arguments = {**dict(image_size=28, batch_size=8, training=True), **kwargs}
    with pytest.raises(ValueError, match=match):
        data.load("mnist", **arguments)


def test_shots_per_class_only_for_embedded_sets():
    with pytest.raises(ValueError, match="shots_per_class"):
        data.load(_tiny(), image_size=16, batch_size=4, training=False, shots_per_class=2)


def test_class_counts_of_sliced_splits_without_decoding(tmp_path):
    from keras_vit.data import embedded

    labels = embedded.read_embedded("digits")["y_train"]
    by_class = {str(k): int(n) for k, n in enumerate(np.bincount(labels))}
    assert data.class_counts("digits", "train") == by_class
    assert data.class_counts("digits", "train[:20]") == {str(k): 20 for k in range(10)}
    assert data.split_size("digits", "train[:20]") == 200
    x, y = np.zeros((6, 4, 4), np.uint8), np.array([0, 2, 2, 2, 0, 2])
    assert data.class_counts((x, y), "train[1:]") == {"0": 1, "1": 0, "2": 3}  # per class
    for name, count in (("cat", 3), ("dog", 1)):
        (tmp_path / name).mkdir()
        for index in range(count):  # never decoded: counting lists the files only
            (tmp_path / name / f"{index}.png").write_bytes(b"")
    assert data.class_counts(tmp_path, "train") == {"cat": 3, "dog": 1}
    assert data.class_counts(tmp_path, "train[:2]") == {"cat": 2, "dog": 1}
    assert data.split_size(tmp_path, "train[-2:]") == 3
