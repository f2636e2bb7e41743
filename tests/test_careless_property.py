"""Property tests of careless use: for the builders, `data.load`, the losses,
`runs.fit_run`, `finetune`, `fewshot` and `keras-vit train`'s data arguments, hypothesis
draws labels (in and out of range, float, negative, NaN), dataset sizes around the batch
size and the replica count, dtypes, shapes and NaN/inf pixels. The property: the correct
result (checked against an oracle written here: NumPy cross-entropy, the expected batches
and steps), or a one-line ValueError naming the value and the rule, before any file is
written. Bounded (tiny models, few examples, one process); the issue's own cases are in
tests/test_careless_data.py."""

from __future__ import annotations

import json
import math
import os
import types

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import keras_vit
from keras_vit import data
from keras_vit.cli.main import main
from keras_vit.evaluate import fewshot
from keras_vit.train import fit_data, losses, runs

TINY = dict(patch_size=4, hidden_dim=8, num_heads=2, mlp_dim=16, num_layers=1)

# A label as a careless user may give it: a class id, one too many, negative, a fraction,
# NaN, inf, a huge id.
LABEL = st.one_of(
    st.integers(0, 2),
    st.sampled_from([3, -1, 0.5, 2.0, float("nan"), float("inf"), 10**9]),
)


def label_lists(size):
    """Lists of `size` labels: half the draws all good (every class id once, then any),
    half with any labels, so that both the result and the refusals are reached."""
    good = st.permutations([0, 1, 2] * 2).map(lambda labels: labels[:size])
    return st.one_of(good, st.lists(LABEL, min_size=size, max_size=size))


def expected_label_fault(labels, num_classes):
    """The oracle: (index, value) of the first label that is not a whole number in
    [0, num_classes), or None; written from the rule, not from keras_vit."""
    for index, value in enumerate(labels):
        if not (math.isfinite(value) and float(value).is_integer() and 0 <= value < num_classes):
            return index, value
    return None


def assert_names_label(error, index, value, num_classes):
    message = str(error)
    assert "\n" not in message, message
    shown = int(value) if math.isfinite(value) and float(value).is_integer() else value
    assert f"label {shown!r} at index {index}" in message, message
    assert f"[0, {num_classes})" in message, message


def labels_array(labels):
    """The NumPy array a user would build: int64 when every label is an int, else float."""
    if all(isinstance(v, int) for v in labels):
        return np.array(labels, np.int64)
    return np.array(labels, np.float64)


def nothing_written(run_dir):
    return not os.path.exists(run_dir) or not os.listdir(run_dir)


# --- losses ----------------------------------------------------------------------------------


@settings(max_examples=30)
@given(
    labels=st.integers(1, 5).flatmap(label_lists),
    num_classes=st.integers(2, 4),
    smoothing=st.sampled_from([0.0, 0.1]),
)
def test_losses_give_the_numpy_cross_entropy_or_name_the_bad_label(labels, num_classes, smoothing):
    logits = np.random.default_rng(len(labels)).normal(size=(len(labels), num_classes))
    logits = logits.astype("float32")
    loss = losses.loss(smoothing)
    fault = expected_label_fault(labels, num_classes)
    if fault is not None:
        with pytest.raises(ValueError) as error:
            loss(labels_array(labels), logits)
        assert_names_label(error.value, *fault, num_classes)
        return
    targets = np.eye(num_classes)[np.array(labels, int)] * (1 - smoothing)
    targets += smoothing / num_classes
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -(targets * log_p).sum(-1).mean()
    assert float(loss(labels_array(labels), logits)) == pytest.approx(expected, rel=1e-5)


# --- data.load -------------------------------------------------------------------------------

PIXEL_FAULTS = {None: None, "nan": np.nan, "inf": np.inf, "negative": -1.0, "over": 256.0}


@settings(max_examples=60)
@given(
    n=st.integers(0, 6),
    batch=st.integers(1, 7),
    training_mode=st.booleans(),
    labels=label_lists(6),
    pixel_fault=st.one_of(st.none(), st.sampled_from(sorted(PIXEL_FAULTS, key=str))),
    dtype=st.sampled_from(["uint8", "float32", "float64", "int64", "bool"]),
    channels=st.sampled_from([None, 1, 3, 4, None, 1, 3, 4, 2, 5]),
)
def test_data_load_gives_the_examples_or_names_the_fault(
    n, batch, training_mode, labels, pixel_fault, dtype, channels
):
    rng = np.random.default_rng(n)
    shape = (n, 4, 4) if channels is None else (n, 4, 4, channels)
    pixels = rng.integers(0, 256, shape).astype(dtype)
    if pixel_fault and n and dtype in ("float32", "float64"):
        pixels.reshape(-1)[-1] = PIXEL_FAULTS[pixel_fault]
    else:
        pixel_fault = None
    labels = labels[:n]
    faults = []  # every rule the source breaks: the error must name one of them
    if channels not in (None, 1, 3, 4):
        faults.append("with 1, 3 or 4 channels")
    if dtype == "bool":
        faults.append("x must hold real pixel values")
    if pixel_fault:
        faults.append(f"={PIXEL_FAULTS[pixel_fault]!r}")
    if (fault := expected_label_fault(labels, 2**20)) is not None:
        faults.append(f"at index {fault[0]}")
    if training_mode and n < batch:
        faults.append(f"batch size {batch} is larger than the {n} training images")
    source = (pixels, labels_array(labels) if labels else np.zeros(0, np.int64))
    try:
        dataset = data.load(source, image_size=4, batch_size=batch, training=training_mode,
                            augment="none")  # fmt: skip
        batches = [(np.asarray(x), np.asarray(y)) for x, y in dataset]
    except ValueError as error:
        assert faults, f"refused a good source: {error}"
        assert "\n" not in str(error) and any(f in str(error) for f in faults), (error, faults)
        return
    assert not faults, f"accepted {faults}"
    sizes = [len(y) for _, y in batches]
    if training_mode:  # shuffled, last partial batch dropped
        assert sizes == [batch] * (n // batch)
        got = np.concatenate([y for _, y in batches]) if batches else np.zeros(0)
        assert set(got.tolist()) <= set(int(v) for v in labels)
    else:  # in order, the partial batch kept; pixels scaled by (x - 127.5) / 127.5
        assert sum(sizes) == n and all(s == batch for s in sizes[:-1])
        got = np.concatenate([y for _, y in batches]) if batches else np.zeros(0)
        assert got.tolist() == [int(v) for v in labels]
        if n:
            images = np.concatenate([x for x, _ in batches])
            expected = pixels.astype(np.float64).reshape(images.shape[:3] + (-1,))
            expected = (expected[..., : images.shape[-1]] - 127.5) / 127.5
            np.testing.assert_allclose(images, expected, atol=1e-6)


# --- replicas --------------------------------------------------------------------------------


@settings(max_examples=100)
@given(n=st.integers(1, 12), batch=st.integers(1, 9), replicas=st.integers(1, 4))
def test_replica_batches_are_refused_exactly_when_a_share_differs(n, batch, replicas):
    """Oracle: every batch of `n` arrays at `batch` (the last, partial one included) must
    give each replica the same number of examples."""
    strategy = types.SimpleNamespace(num_replicas_in_sync=replicas)
    sizes = [batch] * (n // batch) + ([n % batch] if n % batch else [])
    even = all(size % replicas == 0 for size in sizes)
    if even:
        fit_data.check_replica_batches(n, batch, strategy)
        return
    with pytest.raises(ValueError) as error:
        fit_data.check_replica_batches(n, batch, strategy)
    message = str(error.value)
    assert "\n" not in message
    assert f"({replicas} with" in message or f"replicas={replicas}" in message, message
    assert f"batch_size={batch}" in message


# --- builders and finetune -------------------------------------------------------------------

NUM_CLASSES = st.sampled_from([-1, 0, 1, 2, 3, 1.5, True, "3", None])


@given(num_classes=NUM_CLASSES, image_size=st.sampled_from([8, 12, 6, 0, (8, 12), "8"]))
def test_builders_build_the_asked_model_or_name_the_argument(num_classes, image_size):
    good_classes = type(num_classes) is int and num_classes >= 2
    good_size = image_size in (8, 12, (8, 12))
    try:
        model = keras_vit.ViT(num_classes=num_classes, image_size=image_size, **TINY)
    except (ValueError, TypeError) as error:
        assert not (good_classes and good_size), error
        assert "\n" not in str(error)
        named = [] if good_classes else ["num_classes"]
        named += [] if good_size else ["image", "Image"]
        assert any(name in str(error) for name in named), error
        return
    assert good_classes and good_size
    assert model.output_shape == (None, num_classes)


@pytest.fixture(scope="module")
def source_model():
    model = keras_vit.ViT(num_classes=4, image_size=8, **TINY)
    return model


@settings(max_examples=8)
@given(num_classes=NUM_CLASSES, image_size=st.sampled_from([8, 12, 6, None]))
def test_finetune_gives_the_new_head_or_names_the_argument(source_model, num_classes, image_size):
    good_classes = type(num_classes) is int and num_classes >= 2
    good_size = image_size in (8, 12, None)
    try:
        tuned = keras_vit.finetune(source_model, num_classes, image_size=image_size)
    except ValueError as error:
        assert not (good_classes and good_size), error
        assert "\n" not in str(error)
        return
    assert good_classes and good_size
    assert tuned.output_shape == (None, num_classes)
    size = image_size or 8
    assert tuned.input_shape[1:3] == (size, size)


# --- fewshot ---------------------------------------------------------------------------------


@settings(max_examples=30)
@given(train=label_lists(6), test=label_lists(2))
def test_fewshot_scores_the_probe_or_names_the_bad_label(train, test):
    rng = np.random.default_rng(0)
    features = rng.normal(size=(6, 4))
    assume(expected_label_fault(train, 3) is not None or sorted(set(train)) == [0, 1, 2])
    call = lambda: fewshot.fewshot_from_features(  # noqa: E731
        features, labels_array(train), [(features[:2], labels_array(test))], num_classes=3,
        shots=(1,), seeds=1, holdout_per_class=0,
    )  # fmt: skip
    fault = expected_label_fault(train, 3) or expected_label_fault(test, 3)
    if fault is not None:
        with pytest.raises(ValueError) as error:
            call()
        assert_names_label(error.value, *fault, 3)
        return
    result = call()[1]
    assert result.num_test == 2 and 0 <= result.accuracies[0] <= 1


# --- fit_run ---------------------------------------------------------------------------------


def tiny_build():
    model = keras_vit.ViT(num_classes=3, image_size=8, **TINY)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=losses.loss(0.1),
                  metrics=["accuracy"], jit_compile=False)  # fmt: skip
    return model


@settings(max_examples=10)
@given(
    n=st.integers(0, 5),
    batch=st.sampled_from([None, 1, 2, 4, 6, 0]),
    labels=label_lists(5),
    nan_pixel=st.sampled_from([False, False, False, True]),
    size=st.sampled_from([8, 8, 8, 6]),
)
@example(n=3, batch=2, labels=[0, 3, 1, 2, 0], nan_pixel=False, size=8)  # one label fault
@example(n=3, batch=4, labels=[2, 0, 1, 0, 0], nan_pixel=False, size=8)  # all in one batch
def test_fit_run_trains_every_batch_or_names_the_fault_before_any_file(
    tmp_path_factory, n, batch, labels, nan_pixel, size
):
    images = np.random.default_rng(n).uniform(-1, 1, (n, size, size, 3)).astype("float32")
    if nan_pixel and n:
        images[-1, 0, 0, 0] = np.nan
    labels = labels[:n]
    faults = []
    if batch == 0:
        faults.append("batch_size=0")
    if not n:
        faults.append("needs at least one image")
    if size != 8:
        faults.append("do not fit the model's input")
    if nan_pixel and n:
        faults.append("=nan")
    if (fault := expected_label_fault(labels, 3)) is not None:
        faults.append(f"at index {fault[0]}")
    run_dir = tmp_path_factory.mktemp("fit") / "run"
    y = labels_array(labels) if labels else np.zeros(0, np.int64)
    try:
        result = runs.fit_run(run_dir, tiny_build, (images, y), epochs=1, batch_size=batch,
                              verbose=0)  # fmt: skip
    except ValueError as error:
        assert faults, f"refused good data: {error}"
        assert "\n" not in str(error) and any(f in str(error) for f in faults), (error, faults)
        assert nothing_written(run_dir)
        return
    assert not faults, f"accepted {faults}"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    steps = math.ceil(n / (batch or 32))
    assert metrics["steps"] == steps == int(result.model.optimizer.iterations)
    assert all(np.isfinite(w).all() for w in result.model.get_weights())


# --- the CLI's data arguments ----------------------------------------------------------------


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    """root/train/{a,b}/ with 3 images each and root/validation/{a,b}/ with 1 each."""
    root = tmp_path_factory.mktemp("folder")
    rng = np.random.default_rng(0)
    for split, count in (("train", 3), ("validation", 1)):
        for label in ("a", "b"):
            (root / split / label).mkdir(parents=True)
            for index in range(count):
                pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
                path = root / split / label / f"{index}.png"
                path.write_bytes(tf.io.encode_png(pixels).numpy())
    return root


@settings(max_examples=5)
@given(batch=st.sampled_from(["1", "3", "6", "7", "0", "-2", "2.5", "x"]),
       image_size=st.sampled_from(["8", "6"]))  # fmt: skip
def test_cli_train_data_arguments_train_or_exit_2_before_any_file(
    tmp_path_factory, capsys, image_folder, batch, image_size
):
    """6 training images: a batch of 1 to 6 trains 6 // batch steps; 7 is refused (no batch),
    0, -2, 2.5 and x are argparse errors; --image-size 6 is no multiple of the patch 4."""
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    argv = ["train", "--dataset", str(image_folder), "--validation-split", "validation",
            "--batch-size", batch, "--image-size", image_size, "--stem", "patch",
            "--patch-size", "4", "--epochs", "1", "--no-jit-compile",
            "--mixed-precision", "float32", "--run-dir", str(run_dir), "--quiet"]  # fmt: skip
    good_batch = batch.isdigit() and 1 <= int(batch) <= 6
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse: a number outside its rule
        code = exit_.code
    err = capsys.readouterr().err
    if good_batch and image_size == "8":
        assert code == 0, err
        assert json.loads((run_dir / "metrics.json").read_text())["steps"] == 6 // int(batch)
        return
    assert code == 2 and nothing_written(run_dir), err
    last = err.strip().splitlines()[-1]
    if not batch.lstrip("-").isdigit() or int(batch) <= 0:
        assert batch in last
    elif not good_batch:
        assert "batch size 7 is larger than the 6 training images" in last
    else:
        assert "not divisible by the patch size" in last
