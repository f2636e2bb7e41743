"""The training stream of a run in epoch order, so that a run resumed at an epoch trains on the
batches the uninterrupted run saw: in-memory arrays in an order that is a function of (seed,
epoch) alone (`epoch_ordered_batches`), a finite `tf.data.Dataset` as one stream of its passes
(`epoch_passes`), and under a multi-worker strategy each worker's own pipeline at its pass
(`worker_passes`). `fit_input` picks the one a strategy needs, and `build_from_spec` keeps
Keras' JAX and PyTorch trainers from opening an iterator of their own over the stream.
"""

from __future__ import annotations


def fit_input(train_data, steps_per_epoch, batch_size, first_epoch, epochs, seed, strategy):
    """`fit_run` step 4: (x, steps_per_epoch, batch_size) for `model.fit`, so that a run
    resumed at `first_epoch` sees the batches of the uninterrupted one."""
    if isinstance(train_data, tuple):  # in-memory arrays: the order is ours to fix
        x, steps_per_epoch = epoch_ordered_batches(
            *train_data, batch_size or 32, first_epoch, epochs, seed
        )
        return x, steps_per_epoch, None
    if _is_default_strategy(strategy):  # a finite dataset: epoch e = its pass e
        x, steps_per_epoch = epoch_passes(train_data, first_epoch, steps_per_epoch)
        return x, steps_per_epoch, batch_size
    if _is_multi_worker(strategy):  # each worker's own copy of the pipeline, at its pass
        x, steps_per_epoch = worker_passes(train_data, first_epoch, steps_per_epoch)
        return x, steps_per_epoch, batch_size
    if steps_per_epoch is not None and hasattr(train_data, "repeat"):  # other strategies
        return train_data.repeat(), steps_per_epoch, batch_size  # one stream
    return train_data, steps_per_epoch, batch_size


def build_from_spec(model, x) -> None:
    """Builds `model`, its compiled loss and metrics from the element spec of the dataset `x`
    (no batch is read), before `model.fit(x)`.

    Keras' JAX and PyTorch trainers build what is still unbuilt at the start of `fit` from a
    batch of an iterator of their own over `x` (`Trainer._symbolic_build`, Keras 3.15), then
    drop it. Over a stream of passes (`epoch_passes`) that iterator begins a pass, which draws
    the next shuffle and augmentation seeds, and its read-ahead may begin more passes while it
    lives: the training iterator then starts at a later, timing-dependent pass, and runs of
    the same seed (a resumed and an uninterrupted run, two processes and one) train on other
    batches. Built from the spec, `fit` opens one iterator over `x`. TensorFlow's trainer
    reads no batch without a strategy and always one under a strategy (`worker_passes`
    counts it), so it is left alone, as are models without a compiled loss.
    """
    import keras
    from keras import tree

    if keras.backend.backend() == "tensorflow" or not hasattr(x, "element_spec"):
        return
    if getattr(model, "_compile_loss", None) is None:
        return

    def symbolic(spec):
        return None if spec is None else keras.KerasTensor(tuple(spec.shape), spec.dtype.name)

    model._symbolic_build(data_batch=tree.map_structure(symbolic, x.element_spec))


def epoch_ordered_batches(x, y, batch_size, first_epoch, epochs, seed):
    """(dataset, steps_per_epoch): batches of the arrays `x`, `y` for epochs `first_epoch`
    to `epochs - 1`, epoch `e` in the order `stateless_shuffle(range(n), seed=(seed, e))`.

    Keras' `fit(..., shuffle=True)` draws each epoch's permutation from the process' random
    state, which a restart resets: a run resumed at epoch `k` would then see epoch 0's order
    again. Here the order depends on (seed, epoch) alone; the last batch of an epoch may be
    partial, as with Keras' own array batching. `fit` must get `steps_per_epoch` (it then
    keeps one iterator across epochs).
    """
    import math

    import tensorflow as tf

    count = len(x)
    if len(y) != count:
        raise ValueError(f"images and labels differ in length: {count} and {len(y)}")
    images, labels = tf.constant(x), tf.constant(y)
    seed = tf.constant(seed, tf.int64)

    def epoch_indices(epoch):
        order = tf.random.experimental.stateless_shuffle(
            tf.range(count, dtype=tf.int64), seed=tf.stack([seed, epoch])
        )
        return tf.data.Dataset.from_tensor_slices(order).batch(batch_size)

    dataset = tf.data.Dataset.range(first_epoch, epochs).flat_map(epoch_indices)
    dataset = dataset.map(lambda index: (tf.gather(images, index), tf.gather(labels, index)))
    return dataset.prefetch(tf.data.AUTOTUNE), math.ceil(count / batch_size)


def epoch_passes(dataset, first_epoch: int, steps_per_epoch: int | None = None):
    """(dataset, steps_per_epoch): a finite dataset as one stream of batches in which a
    resumed run (starting at `first_epoch`) sees the batches the uninterrupted run saw.

    `shuffle(..., reshuffle_each_iteration=True)` and `Dataset.random(...,
    rerandomize_each_iteration=True)` (keras_vit.data.load's shuffle and augmentation seeds)
    draw each pass's seed from a state that advances once per iterator over the dataset, and
    a rebuilt dataset starts that state again at pass 0. `steps_per_epoch` None or equal to
    the dataset's batch count (an epoch is one pass): `first_epoch` iterators are started and
    dropped first, then `repeat()` makes the passes. Any other `steps_per_epoch` (an epoch is
    a share of a step budget, as `finetune` runs it): the stream `repeat()` with its first
    `first_epoch * steps_per_epoch` batches skipped (they are computed, not trained on).
    `fit` keeps one iterator across epochs once `steps_per_epoch` is given. A dataset of
    unknown size is repeated when `steps_per_epoch` is given (the resumed epochs then see
    other batches); an infinite one, or an unknown-sized one without `steps_per_epoch`, is
    returned unchanged.
    """
    import tensorflow as tf

    batches = int(dataset.cardinality())
    if batches == tf.data.INFINITE_CARDINALITY or (batches < 0 and steps_per_epoch is None):
        return dataset, steps_per_epoch
    if batches < 0:  # unknown size: a stream, but where the resumed run starts is unknown
        return dataset.repeat(), steps_per_epoch
    if steps_per_epoch in (None, batches):
        for _ in range(first_epoch):
            iterator = iter(dataset)
            del iterator
        return dataset.repeat().prefetch(tf.data.AUTOTUNE), batches
    stream = dataset.repeat().skip(first_epoch * steps_per_epoch)
    return stream.prefetch(tf.data.AUTOTUNE), steps_per_epoch


def worker_passes(dataset, first_epoch: int, steps_per_epoch: int | None = None):
    """(dataset, steps_per_epoch): a worker's training stream under a multi-worker strategy,
    in which a run resumed at `first_epoch` sees the batches the uninterrupted run saw.

    Every worker runs the whole pipeline and Keras' `experimental_distribute_dataset` gives
    it its share of each global batch (TensorFlow's auto-shard), so a worker's data position
    is its pipeline's: the passes begun so far (each new iterator over the dataset draws the
    next pass's shuffle and augmentation seeds from one state, see `epoch_passes`) and the
    batches taken in the current pass. How many iterators `fit` makes is Keras' business:
    under a strategy it first takes one batch from an iterator of its own to build the model
    (`_maybe_symbolic_build`, Keras 3.15), and with a finite dataset it starts a new
    iterator at every epoch's start and one more at its end. So the stream is made one
    iterator: `repeat()`, with `steps_per_epoch` (the dataset's batch count when None), and
    nothing after it that reads ahead (a `prefetch` there, ours or the one tf.data injects,
    lets the build's iterator begin the next pass in the background: a timing-dependent
    draw, so runs of the same seed differed). In a fresh run the build's iterator draws
    pass 0 and epoch `e` trains on batches `e * steps_per_epoch` onwards of the passes that
    follow.

    A run resumed at `first_epoch` (the epoch of the worker's backup, which
    `keras_vit.train.worker_restart.agreed_epoch` checked to be every worker's) first starts and
    drops one iterator per whole pass trained on before that epoch (the build's iterator
    then draws in place of the fresh run's), and its stream skips the batches of the current
    pass already trained on (computed, not trained on; none when an epoch is a whole pass).

    A dataset of unknown or infinite size (or an empty one) is repeated when
    `steps_per_epoch` is given and returned as it is otherwise (where the resumed run is in
    it cannot be found again).
    """
    batches = int(dataset.cardinality())
    if batches <= 0:  # infinite (-1), unknown (-2) or empty
        stream = dataset.repeat() if steps_per_epoch is not None else dataset
        return stream, steps_per_epoch
    steps_per_epoch = batches if steps_per_epoch is None else steps_per_epoch
    passes, offset = divmod(first_epoch * steps_per_epoch, batches)
    for _ in range(passes):
        iterator = iter(dataset)
        del iterator
    stream = dataset.repeat().skip(offset) if offset else dataset.repeat()
    return stream.with_options(_no_read_ahead_across_passes()), steps_per_epoch


def _no_read_ahead_across_passes():
    """tf.data options without the `prefetch` that tf.data injects at a pipeline's end by
    default (`experimental_optimization.inject_prefetch`): after `repeat()` it lets an
    iterator that was read once (Keras' build batch) begin the next pass in the background,
    drawing that pass's seeds or not depending on timing (seen with a pipeline that ends in
    `batch`: 2 different streams in 15 reads of the same seed). The batches are unchanged."""
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return options


def _is_multi_worker(strategy) -> bool:
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def _is_default_strategy(strategy) -> bool:
    """True for TensorFlow's default strategy (no `tf.distribute` strategy in use)."""
    return type(strategy).__name__ == "_DefaultDistributionStrategy"
