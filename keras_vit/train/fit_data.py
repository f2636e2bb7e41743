"""The training, validation and test data of `keras_vit.train.runs.fit_run`, checked against
the compiled model and the strategy before any file is written: (images, labels) arrays whole
(labels integer class ids in [0, num_classes), images finite and of the model's input shape,
batches the replicas share evenly), datasets by their static shapes and as their batches are
read (`keras_vit.data.labels`).
"""

from __future__ import annotations

from keras_vit._validation import check_labels, check_positive_int
from keras_vit.runtime import distribute


def check_fit_input(train_data, steps_per_epoch) -> None:
    """`fit_run` step 1: arrays take no `steps_per_epoch` (an epoch is one pass)."""
    if isinstance(train_data, tuple) and steps_per_epoch is not None:
        raise ValueError(
            "`steps_per_epoch` is for infinite datasets; with (images, labels) arrays an "
            f"epoch is one pass over them. Received: steps_per_epoch={steps_per_epoch!r}"
        )


def checked_data(model, strategy, train_data, validation_data, test_data, batch_size):
    """`fit_run` step 2b, before any file is written: (train, validation, test data) checked
    against the compiled `model` and `strategy`.

    Arrays are checked whole: labels integer class ids in [0, num_classes) (the model's
    output width), images finite and shaped as the model's input, at least one example, a
    batch size > 0, and under R > 1 replicas every batch (the last, partial one included)
    a multiple of R. Datasets: a training set of 0 batches is refused, a static batch size
    must be a multiple of R (an unknown one is asserted per batch), and every label is
    asserted as it is read (`keras_vit.data.labels`)."""
    num_classes = int(model.output_shape[-1])
    if isinstance(train_data, tuple) and batch_size is not None:
        check_positive_int("batch_size", batch_size)
    checked = []
    for data, what in (
        (train_data, "train_data"),
        (validation_data, "validation_data"),
        (test_data, "test_data"),
    ):
        if data is None:
            checked.append(None)
        elif isinstance(data, tuple):
            checked.append(_checked_arrays(data, model, num_classes, what))
        else:
            checked.append(_checked_dataset(data, num_classes, what))
    if isinstance(train_data, tuple):
        check_replica_batches(len(checked[0][0]), batch_size or 32, strategy)
    else:
        _check_dataset_batches(checked[0], strategy)
        checked[0] = _replica_asserted(checked[0], strategy)
    return tuple(checked)


def _checked_arrays(data, model, num_classes: int, what: str):
    """(images, int32 labels) of an (images, labels) tuple, or ValueError naming the first
    bad value (see `checked_data`)."""
    import numpy as np

    if len(data) != 2:
        raise ValueError(
            f"{what} must be an (images, labels) pair of arrays. Received: a tuple of {len(data)}"
        )
    images, labels = np.asarray(data[0]), np.asarray(data[1])
    if not len(images) or len(images) != len(labels):
        raise ValueError(
            f"{what} needs at least one image and one label per image. Received: "
            f"{len(images)} images, {len(labels)} labels"
        )
    _check_model_input(images, model, what)
    return images, check_labels(labels, num_classes, what=f"labels of {what}")


def _check_model_input(images, model, what: str) -> None:
    """ValueError for images of another shape than the model's input, or not finite."""
    import numpy as np

    expected = tuple(model.input_shape[1:])
    shape = images.shape[1:]
    if len(shape) != len(expected) or any(
        e not in (None, s) for e, s in zip(expected, shape, strict=True)
    ):
        raise ValueError(
            f"{what}: images of shape {images.shape} do not fit the model's input "
            f"(batch, {', '.join(map(str, expected))})."
        )
    if images.dtype.kind not in "iuf":
        raise ValueError(f"{what}: images must be real numbers. Received: dtype={images.dtype}")
    finite = np.isfinite(images)
    if not finite.all():
        index = np.unravel_index(int(np.argmin(finite)), images.shape)
        raise ValueError(
            f"{what}: images must be finite. Received: "
            f"images[{', '.join(map(str, index))}]={images[index].item()!r}"
        )


def _checked_dataset(dataset, num_classes: int, what: str):
    from keras_vit.data.labels import checked_labels

    return checked_labels(dataset, num_classes, what)


def _check_dataset_batches(dataset, strategy) -> None:
    """ValueError for a training dataset of 0 batches, or whose static batch size the
    strategy's replicas cannot share evenly (`distribute.per_replica_batch_size`)."""
    if int(dataset.cardinality()) == 0:
        raise ValueError(
            "train_data yields no batch (its cardinality is 0): nothing would be trained. A "
            "training pipeline drops the last partial batch, so a split smaller than the "
            "batch size gives none; choose a smaller batch size."
        )
    batch = _static_batch(dataset)
    if strategy.num_replicas_in_sync > 1 and batch is not None:
        distribute.per_replica_batch_size(batch, strategy)


def _static_batch(dataset) -> int | None:
    import tensorflow as tf

    first = tf.nest.flatten(dataset.element_spec)[0]
    return first.shape[0] if first.shape.rank else None


def _replica_asserted(dataset, strategy):
    """Under R > 1 replicas, a dataset whose batch size is not static asserts that each
    batch is a multiple of R (else the replicas' shares differ: a wrong gradient, or a
    crash in the all-reduce)."""
    import tensorflow as tf

    replicas = strategy.num_replicas_in_sync
    if replicas == 1 or _static_batch(dataset) is not None:
        return dataset
    name = type(strategy).__name__

    def check(images, *rest):
        size = tf.shape(tf.nest.flatten(images)[0])[0]
        test = tf.debugging.Assert(
            tf.equal(size % replicas, 0),
            [f"A batch that the {replicas} replicas of {name} cannot share evenly:", size],
        )
        with tf.control_dependencies([test]):
            return (tf.nest.map_structure(tf.identity, images), *rest)

    return dataset.map(check)


def check_replica_batches(num_examples: int, batch_size: int, strategy) -> None:
    """ValueError unless every batch of `num_examples` arrays at global `batch_size` (the
    last, partial one included) splits evenly over the strategy's replicas (the batches that
    occur: 2 examples at batch 3 are one batch of 2).

    Each replica averages the loss over its own share and the shares' gradients are summed
    with weight 1/R (Keras' `scale_loss_for_distribution`), so unequal shares weight some
    examples more than one device would (9 images at batch 4 on 2 replicas: the last batch
    of 1 ended 0.049 away from one device's weights) or crash the all-reduce (batch 5:
    InvalidArgumentError in AddN). Equal shares train as one device does. Dropping the
    remainder instead would train on other examples than one device does, silently.
    """
    replicas = strategy.num_replicas_in_sync
    if replicas == 1:
        return
    if num_examples >= batch_size:  # a full batch occurs
        distribute.per_replica_batch_size(batch_size, strategy)
    last = num_examples % batch_size
    if last % replicas:
        name = type(strategy).__name__
        raise ValueError(
            f"{num_examples} examples at global batch size {batch_size} end every epoch with a "
            f"batch of {last}, which the {replicas} replicas of {name} cannot share evenly "
            f"(each replica must get the same number of examples); use a number of examples "
            f"whose remainder by the batch size is a multiple of {replicas} (e.g. "
            f"{num_examples - last}). Received: num_examples={num_examples}, "
            f"batch_size={batch_size}, replicas={replicas}"
        )
