"""Few-shot linear evaluation of frozen features, as the paper measures representations.

"Few-shot accuracies are obtained by solving a regularized least-squares regression problem
that maps the (frozen) representation of a subset of training images to {-1, 1}^K target
vectors. This formulation allows us to recover the exact solution in closed form." (paper
section 4.1, "Metrics"). The solve follows big_vision's `fewshot_lsr` evaluator: features
whitened with the few-shot set's mean and standard deviation, a constant bias column (so the
bias is all but unregularised), targets 2 * one_hot - 1, and the ridge solution
W = (X^T X + l2 I)^-1 X^T Y computed from one eigendecomposition of X^T X (or, when there are
fewer images than features, W = X^T (X X^T + l2 I)^-1 Y from X X^T), so every l2 of the grid
costs one matrix product.

Protocol of `fewshot_evaluate`: for each number of shots and each seed, `shots` training
images per class are drawn, and `holdout_per_class` further training images per class (never
test images) choose l2 from `l2_grid`; the model fitted on the shots with that l2 is scored on
the whole test split. Test features are streamed batch by batch: only the training pool's
features are kept in memory. Results are the mean and standard deviation over seeds.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from keras_vit._validation import check_labels, check_positive_int
from keras_vit.spec import layer_names

logger = logging.getLogger(__name__)

BIAS_CONSTANT = 100.0
"""The bias column's value (big_vision): large, so that its weight is barely regularised."""
WHITEN_EPSILON = 1e-5
L2_GRID = tuple(2.0**i for i in range(-10, 20))
"""big_vision's l2 grid, 2^-10 .. 2^19."""
FEATURE_LAYERS = layer_names.FEATURE_LAYERS


@dataclasses.dataclass
class FewshotResult:
    """Few-shot accuracy for one number of shots.

    Attributes:
        shots: training images per class.
        accuracies: test accuracy of each seed (fraction in [0, 1]).
        l2: the l2 chosen on the held-out training images, per seed.
        mean, std: mean and (population) standard deviation of `accuracies`.
        num_test: test images scored.
    """

    shots: int
    accuracies: list[float]
    l2: list[float]
    num_test: int

    @property
    def mean(self) -> float:
        return float(np.mean(self.accuracies))

    @property
    def std(self) -> float:
        return float(np.std(self.accuracies))

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "mean": self.mean, "std": self.std}


class RidgeProbe:
    """The closed-form ridge regression of `fewshot_lsr` on one few-shot set.

    Args:
        features: float `(n, d)` features of the few-shot images.
        labels: int `(n,)` class ids in [0, num_classes).
        num_classes: K.

    The eigendecomposition is computed once; `weights(l2)` and `predict(features, l2)` are
    then cheap for every l2.
    """

    def __init__(self, features, labels, num_classes: int):
        x = np.asarray(features, np.float64)
        labels = np.asarray(labels)
        if x.ndim != 2 or len(x) != len(labels) or not len(x):
            raise ValueError(
                "RidgeProbe needs features (n, d) and n labels, n >= 1. "
                f"Received: features.shape={x.shape}, labels.shape={labels.shape}"
            )
        self.num_classes = int(num_classes)
        self.mean = x.mean(axis=0, keepdims=True)
        self.std = x.std(axis=0, keepdims=True) + WHITEN_EPSILON
        x = self.design(features)
        y = 2.0 * np.eye(self.num_classes)[labels] - 1.0
        self.primal = len(x) >= x.shape[1]
        gram = x.T @ x if self.primal else x @ x.T
        self.eigs, q = np.linalg.eigh(gram)
        # primal: W = q diag(1/(e+l2)) q^T x^T y; dual: W = x^T q diag(1/(e+l2)) q^T y
        self.lhs = q if self.primal else x.T @ q
        self.rhs = q.T @ (x.T @ y) if self.primal else q.T @ y

    def design(self, features) -> np.ndarray:
        """Whitened features with the bias column: `(n, d + 1)` float64."""
        x = (np.asarray(features, np.float64) - self.mean) / self.std
        return np.pad(x, ((0, 0), (0, 1)), constant_values=BIAS_CONSTANT)

    def weights(self, l2: float) -> np.ndarray:
        """W `(d + 1, K)` minimising ||X W - Y||^2 + l2 ||W||^2 (bias row last)."""
        return (self.lhs / (self.eigs + l2)) @ self.rhs

    def scores(self, features, l2: float) -> np.ndarray:
        return self.design(features) @ self.weights(l2)

    def predict(self, features, l2: float) -> np.ndarray:
        return np.argmax(self.scores(features, l2), axis=1)


def check_shots(
    shots: Iterable[int],
    class_counts: Mapping | None = None,
    *,
    num_examples: int | None = None,
    num_classes: int | None = None,
) -> None:
    """Raises ValueError unless the training pool holds `max(shots)` images of every class
    (each draw takes that many per class; the l2 holdout takes what is left, up to
    `holdout_per_class`).

    Args:
        shots: the numbers of training images per class to evaluate.
        class_counts: {class id or name: training images of that class}, when known.
        num_examples, num_classes: the pool's size and K, when only they are known (a TFDS
            split records its size, not its classes'): then `num_examples >= max(shots) * K`
            is what can be checked.

    Raises:
        ValueError: naming the first class with too few images, or the pool's size.
    """
    largest = max(shots)
    if class_counts is not None:
        for name, count in class_counts.items():
            if count < largest:
                raise ValueError(
                    f"{largest}-shot evaluation needs {largest} training examples of every "
                    f"class; class {name} has {count}."
                )
    elif num_examples is not None and num_classes and num_examples < largest * num_classes:
        raise ValueError(
            f"{largest}-shot evaluation needs {largest} training examples of each of the "
            f"{num_classes} classes, {largest * num_classes} in all; the pool has "
            f"{num_examples}."
        )


def usable_class_counts(root, split: str, *, bad_images: str = "skip") -> dict[str, int]:
    """{class name: images that decode} of `split` of the image folder `root`: the files
    `keras_vit.data.load` keeps (`keras_vit.data.folder.decodable_class_counts`)."""
    from keras_vit.data import folder

    return folder.decodable_class_counts(root, split, bad_images=bad_images)


def sample_shots(labels, shots: int, holdout_per_class: int, seed: int):
    """(few-shot indices, l2-holdout indices) into `labels`: `shots` and then up to
    `holdout_per_class` more per class, drawn with `seed` (disjoint).

    Raises:
        ValueError: a class has fewer than `shots` examples (`check_shots`).
    """
    labels = np.asarray(labels)
    values, counts = np.unique(labels, return_counts=True)
    check_shots([shots], dict(zip(values.tolist(), counts.tolist(), strict=True)))
    rng = np.random.default_rng([int(seed), int(shots)])
    chosen, held = [], []
    for value in values:
        members = rng.permutation(np.flatnonzero(labels == value))
        chosen.append(members[:shots])
        held.append(members[shots : shots + holdout_per_class])
    return np.concatenate(chosen), np.concatenate(held)


def choose_l2(probe: RidgeProbe, features, labels, l2_grid: Sequence[float]) -> float:
    """The l2 of `l2_grid` with the best accuracy on (features, labels); ties go to the
    larger l2. With no held-out examples, the middle of the grid."""
    grid = sorted(float(v) for v in l2_grid)
    if not len(labels):
        return grid[len(grid) // 2]
    accuracies = [np.mean(probe.predict(features, l2) == labels) for l2 in grid]
    best = max(accuracies)
    return max(l2 for l2, acc in zip(grid, accuracies, strict=True) if acc == best)


def fewshot_from_features(
    train_features,
    train_labels,
    test_batches: Iterable,
    *,
    num_classes: int,
    shots: Sequence[int] = (1, 5, 10, 25),
    l2_grid: Sequence[float] = L2_GRID,
    seeds: int = 3,
    holdout_per_class: int = 10,
) -> dict[int, FewshotResult]:
    """Few-shot accuracies from precomputed training features (see the module docstring).

    Args:
        train_features, train_labels: the training pool, `(n, d)` and `(n,)`.
        test_batches: an iterable of (features `(b, d)`, labels `(b,)`) batches, read once.
        num_classes: K.
        shots: the numbers of training images per class to evaluate.
        l2_grid: candidate l2 values.
        seeds: how many draws per number of shots (seeds 0 .. seeds - 1).
        holdout_per_class: training images per class (besides the shots) that choose l2.

    Returns:
        {shots: FewshotResult}.

    Raises:
        ValueError: bad shots/seeds/grid/num_classes, a class with fewer examples than
            `shots`, or a training or test label that is no integer class id in
            [0, num_classes) (naming the first, its index and the range; a test batch is
            checked as it is read).
    """
    check_positive_int("seeds", seeds)
    for value in shots:
        check_positive_int("shots", value)
    if not len(l2_grid) or min(l2_grid) <= 0:
        raise ValueError(f"`l2_grid` must hold values > 0. Received: l2_grid={l2_grid!r}")
    if holdout_per_class < 0:
        raise ValueError(f"`holdout_per_class` must be >= 0. Received: {holdout_per_class}")
    check_positive_int("num_classes", num_classes)
    train_features = np.asarray(train_features)
    train_labels = check_labels(train_labels, num_classes, what="few-shot training labels")
    probes = {}
    for n in shots:
        for seed in range(seeds):
            chosen, held = sample_shots(train_labels, n, holdout_per_class, seed)
            probe = RidgeProbe(train_features[chosen], train_labels[chosen], num_classes)
            l2 = choose_l2(probe, train_features[held], train_labels[held], l2_grid)
            probes[n, seed] = (probe, probe.weights(l2), l2)
    correct = dict.fromkeys(probes, 0)
    count = 0
    for features, labels in test_batches:
        labels = check_labels(np.asarray(labels).reshape(-1), num_classes, what="test labels")
        for key, (probe, weights, _) in probes.items():
            predictions = np.argmax(probe.design(features) @ weights, axis=1)
            correct[key] += int(np.sum(predictions == labels))
        count += len(labels)
    if not count:
        raise ValueError("The test data is empty.")
    return {
        n: FewshotResult(
            shots=n,
            accuracies=[correct[n, seed] / count for seed in range(seeds)],
            l2=[probes[n, seed][2] for seed in range(seeds)],
            num_test=count,
        )
        for n in shots
    }


def feature_layer_name(model) -> str:
    """The layer whose output is the representation the head reads: "pre_logits" when the
    model has one, else "fc_norm" (final_norm="pooled"), else the pooling ("pool", or the
    MAP head). For a distilled model (DeiT) that is the class token alone (`pool`; timm's
    `forward_head(pre_logits=True)` averages it with the distillation token instead); with
    register tokens "gap" averages the patch tokens only."""
    names = {layer.name for layer in model.layers}
    for name in FEATURE_LAYERS:
        if name in names:
            return name
    raise ValueError(
        f"Model {model.name!r} has no {' or '.join(FEATURE_LAYERS)} layer; few-shot evaluation "
        "needs a keras_vit ViT or hybrid classifier."
    )


def feature_model(model, layer: str | None = None):
    """A `keras.Model` from the model's images to the frozen features `(batch, d)`: the
    model's layers (so its dtype policy) and its `jit_compile` (XLA or not)."""
    import keras

    name = layer or feature_layer_name(model)
    extractor = keras.Model(model.inputs, model.get_layer(name).output, name=f"{model.name}_{name}")
    extractor.jit_compile = model.jit_compile
    return extractor


def stream_features(extractor, data, *, progress: bool = False):
    """Yields (features float32 `(b, d)`, labels `(b,)`) for each batch of `data` (a
    `tf.data.Dataset` of (images, labels) batches), computed by `extractor.predict_on_batch`
    (a compiled graph; XLA when `extractor.jit_compile` is True)."""
    import keras

    bar = keras.utils.Progbar(None, unit_name="batch") if progress else None
    tensorflow = keras.backend.backend() == "tensorflow"
    for step, (images, labels) in enumerate(data, start=1):
        # JAX's and PyTorch's compiled steps take arrays, not tf.data's tensors
        batch = images if tensorflow else np.asarray(images)
        features = np.asarray(extractor.predict_on_batch(batch))
        if bar is not None:
            bar.update(step)
        yield features.astype(np.float32), np.asarray(labels).reshape(-1)


def collect_features(extractor, data, *, progress: bool = False):
    """All features and labels of `data`, concatenated: `(n, d)`, `(n,)`."""
    parts = list(stream_features(extractor, data, progress=progress))
    if not parts:
        raise ValueError("The training data is empty.")
    return np.concatenate([f for f, _ in parts]), np.concatenate([y for _, y in parts])


def fewshot_evaluate(
    model,
    train,
    test,
    *,
    shots: Sequence[int] = (1, 5, 10, 25),
    l2_grid: Sequence[float] = L2_GRID,
    seeds: int = 3,
    holdout_per_class: int = 10,
    num_classes: int | None = None,
    layer: str | None = None,
    progress: bool = False,
) -> dict[int, FewshotResult]:
    """Few-shot linear accuracy of a frozen model's representation (paper section 4.1).

    Args:
        model: a keras_vit ViT or hybrid; its "pre_logits" output (or "pool" without one) is
            the representation (`layer` names another layer), computed under the model's
            dtype policy and its `jit_compile` (`keras_vit.runtime.precision.with_dtype_policy`
            gives a model another policy).
        train: `tf.data.Dataset` of (images `(batch, height, width, channels)` in [-1, 1],
            int labels `(batch,)`) batches: the pool the shots and the l2 holdout are drawn
            from. Its features are kept in memory.
        test: the same for the test split; streamed, never held in memory.
        shots, l2_grid, seeds, holdout_per_class: see `fewshot_from_features`.
        num_classes: K; default: 1 + the largest training label.
        progress: show progress bars while extracting features.

    Returns:
        {shots: FewshotResult} (mean and spread over seeds, the l2 chosen per seed).

    Raises:
        ValueError: a model without a representation layer, empty data, too few examples.
    """
    extractor = feature_model(model, layer)
    features, labels = collect_features(extractor, train, progress=progress)
    if num_classes is None:  # 1 + the largest label, once every label is a class id
        num_classes = int(check_labels(labels, what="few-shot training labels").max()) + 1
    logger.info("Few-shot pool: %d training images, %d-d features", *features.shape)
    return fewshot_from_features(
        features,
        labels,
        stream_features(extractor, test, progress=progress),
        num_classes=num_classes,
        shots=shots,
        l2_grid=l2_grid,
        seeds=seeds,
        holdout_per_class=holdout_per_class,
    )
