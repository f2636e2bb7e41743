"""Recipes: the warmup schedule (closed form), AdamW and SGD settings, losses, defaults."""

from __future__ import annotations

import dataclasses
import math

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_vit.runtime import optimizers
from keras_vit.train import losses, schedules, training


def _closed_form(step, base, total, warmup, decay, end=0.0):
    """The release's create_learning_rate_schedule, written out in NumPy."""
    progress = np.clip((step - warmup) / (total - warmup), 0.0, 1.0)
    if decay == "linear":
        lr = end + (base - end) * (1.0 - progress)
    else:
        lr = end + (base - end) * 0.5 * (1.0 + np.cos(np.pi * progress))
    if warmup:
        lr = lr * np.minimum(1.0, step / warmup)
    return lr


STEPS = np.array([0, 1, 50, 99, 100, 101, 250, 500, 999, 1000, 1500])


@pytest.mark.parametrize("decay", ["linear", "cosine"])
@pytest.mark.parametrize("warmup", [0, 100])
def test_schedule_matches_the_closed_form(decay, warmup):
    schedule = schedules.warmup_schedule(3e-3, 1000, warmup, decay, end_lr=1e-5)
    got = np.array([float(schedule(s)) for s in STEPS])
    np.testing.assert_allclose(got, _closed_form(STEPS, 3e-3, 1000, warmup, decay, 1e-5), rtol=1e-5)


def test_schedule_landmarks():
    """Peak at the end of warmup, half the peak midway through the cosine, 0 at the end."""
    schedule = schedules.warmup_schedule(0.01, 1100, 100, "cosine")
    assert float(schedule(0)) == 0.0
    assert float(schedule(50)) == pytest.approx(0.005)
    assert float(schedule(100)) == pytest.approx(0.01)
    assert float(schedule(600)) == pytest.approx(0.005, rel=1e-5)
    assert float(schedule(1100)) == pytest.approx(0.0, abs=1e-9)


def test_schedule_config_round_trip():
    schedule = schedules.warmup_schedule(1e-3, 300, 30, "linear", 1e-6)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert isinstance(restored, schedules.WarmupSchedule)
    assert restored.get_config() == schedule.get_config()
    assert float(restored(77)) == pytest.approx(float(schedule(77)))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(base_lr=0.0), "base_lr"),
        (dict(total_steps=0), "total_steps"),
        (dict(warmup_steps=100), "warmup_steps"),
        (dict(warmup_steps=-1), "warmup_steps"),
        (dict(decay="step"), "decay"),
    ],
)
def test_bad_schedule_arguments_are_refused(kwargs, match):
    arguments = {**dict(base_lr=1e-3, total_steps=100, warmup_steps=10), **kwargs}
    with pytest.raises(ValueError, match=match):
        schedules.warmup_schedule(**arguments)


def test_finetune_optimizer_is_the_release_recipe():
    """SGD momentum 0.9, global-norm clip 1.0, no weight decay, 500 warmup steps, cosine to 0."""
    optimizer = schedules.finetune_optimizer(0.03, 10_000)
    assert isinstance(optimizer, keras.optimizers.SGD)
    assert optimizer.momentum == 0.9 and not optimizer.nesterov
    assert optimizer.global_clipnorm == 1.0 and optimizer.clipnorm is None
    assert optimizer.weight_decay is None
    schedule = optimizer._learning_rate
    assert schedule.get_config() == {
        "base_lr": 0.03,
        "total_steps": 10_000,
        "warmup_steps": 500,
        "decay": "cosine",
        "end_lr": 0.0,
    }
    # Short runs cap the warmup at a tenth of the run.
    assert schedules.finetune_optimizer(0.01, 200)._learning_rate.warmup_steps == 20


def test_finetune_optimizer_clips_the_global_norm():
    """One SGD step with a huge gradient moves the weights by lr * 1.0 in global norm."""
    optimizer = schedules.finetune_optimizer(0.1, 100, warmup_steps=0)
    weights = [keras.Variable(np.zeros(3, "float32")), keras.Variable(np.zeros(4, "float32"))]
    gradients = [np.full(3, 100.0, "float32"), np.full(4, -50.0, "float32")]
    optimizer.apply_gradients(zip(gradients, weights, strict=True))
    moved = np.concatenate([w.numpy() for w in weights])
    norm = np.sqrt(np.sum(np.concatenate(gradients) ** 2))
    np.testing.assert_allclose(moved, -0.1 * np.concatenate(gradients) / norm, rtol=1e-5)


def test_pretrain_optimizer_is_adamw_and_decays_only_kernels(tiny_vit_kwargs):
    """A zero-gradient AdamW step changes only decayed variables: w <- w * (1 - lr * wd)."""
    import keras_vit

    model = keras_vit.ViT(**tiny_vit_kwargs)
    for variable in model.trainable_variables:
        variable.assign(np.ones(variable.shape, "float32"))
    optimizer = schedules.pretrain_optimizer(0.01, 100, 0, weight_decay=0.5, decay="cosine")
    assert isinstance(optimizer, keras.optimizers.AdamW)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.weight_decay) == (0.9, 0.999, 0.5)
    assert optimizer.global_clipnorm == 1.0
    zeros = [np.zeros(v.shape, "float32") for v in model.trainable_variables]
    optimizer.apply_gradients(zip(zeros, model.trainable_variables, strict=True))
    for variable in model.trainable_variables:
        expected = 1.0 - 0.01 * 0.5 if variable.name == "kernel" else 1.0
        np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-6, err_msg=variable.path)


def test_smoothed_sparse_loss_matches_numpy():
    logits = np.array([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0]], "float32")
    labels = np.array([0, 2])
    smoothing = 0.2
    targets = np.eye(3)[labels] * (1 - smoothing) + smoothing / 3
    log_probs = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    expected = -(targets * log_probs).sum(1).mean()
    assert float(losses.loss(smoothing)(labels, logits)) == pytest.approx(expected, rel=1e-5)
    plain = -log_probs[[0, 1], labels].mean()
    assert float(losses.loss()(labels, logits)) == pytest.approx(plain, rel=1e-5)
    one_hot = losses.loss(smoothing, one_hot=True)(np.eye(3)[labels], logits)
    assert float(one_hot) == pytest.approx(expected, rel=1e-5)


def test_smoothed_loss_config_round_trip():
    loss = losses.loss(0.1)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert restored.label_smoothing == pytest.approx(0.1)


def test_train_config_defaults_build_and_compile():
    """The `keras-vit train` defaults: a valid model for 28x28 gray MNIST and its optimizer."""

    config = training.TrainConfig()
    assert config.dataset == "mnist"
    assert config.image_size % config.patch_size == 0
    model = config.build(num_classes=10, channels=1)
    assert model.input_shape == (None, config.image_size, config.image_size, 1)
    # the default is the hybrid (ResNet root, stride 4: 7x7 tokens); stem "patch" the ViT
    assert model.get_layer("conv_root").filters == config.resnet_width
    assert model.get_layer("posembed_input").weights[0].shape == (1, 49, config.hidden_dim)
    vit = training.TrainConfig(stem="patch").build(num_classes=10, channels=1)
    assert "conv_root" not in {layer.name for layer in vit.layers}
    assert vit.get_layer("posembed_input").weights[0].shape == (1, 49, config.hidden_dim)
    with pytest.raises(ValueError, match="stem"):
        training.TrainConfig(stem="conv")
    steps = config.steps_per_epoch(4000)
    assert steps == 4000 // config.batch_size
    assert config.total_steps(4000) == steps * config.epochs
    compiled = config.compile_kwargs(4000)
    schedule = compiled["optimizer"]._learning_rate
    assert schedule.total_steps == config.total_steps(4000)
    assert schedule.base_lr == config.learning_rate
    assert compiled["optimizer"].weight_decay == config.weight_decay


def test_finetune_config_counts_steps_and_validates_a_few_times():
    """Fine-tuning is `steps` optimizer steps (paper appendix B.1.1) whatever the data size,
    with `validations` validation passes: 100 shots no longer mean 100 validations."""
    config = training.FinetuneConfig(steps=300, validations=5)
    for num_train in (100, 1297, 50_000):
        assert config.num_epochs(num_train) == 5
        assert config.steps_per_epoch(num_train) == 60
        assert config.total_steps(num_train) == 300
    assert training.FinetuneConfig(steps=7, validations=5).total_steps(100) == 10  # 5 x 2
    assert training.FinetuneConfig(steps=2, validations=5).num_epochs(100) == 2


def test_finetune_config_defaults():
    config = training.FinetuneConfig()
    assert config.dataset == "digits"
    optimizer = config.optimizer(num_train_examples=100)
    assert isinstance(optimizer, keras.optimizers.SGD) and optimizer.global_clipnorm == 1.0
    assert optimizer._learning_rate.total_steps == config.total_steps(100)
    assert math.isclose(optimizer._learning_rate.base_lr, config.learning_rate)


NAN, INF = float("nan"), float("inf")
BAD_TRAIN_FIELDS = {
    "epochs": [0, -3, 2.5, True, "30"],
    "batch_size": [0, -64, 64.0],
    "hidden_dim": [0, None],
    "num_heads": [0, 3],  # 3 does not divide the default hidden_dim 64
    "mlp_dim": [0],
    "num_layers": [-1],
    "resnet_width": [0],
    "resnet_groups": [0],
    "image_size": [0, (28,), "28"],
    "patch_size": [0, (4, 0)],
    "learning_rate": [0.0, -3e-3, NAN, INF, "3e-3"],
    "weight_decay": [-0.05, NAN],
    "warmup_epochs": [-1.0, INF],
    "label_smoothing": [1.0, -0.1],
    "dropout_rate": [1.0, NAN],
    "global_clipnorm": [0.0, -1.0, NAN],
    "jit_compile": ["yes", 1.5],
    "seed": [1.5, "0", -1, 2**32],
    "dataset": ["", None],
    "decay": ["step"],
    "stem": ["vit"],
    "pooling": ["cls", "GAP"],
    "position_embedding": ["sincos"],
}
BAD_FINETUNE_FIELDS = {
    "image_size": [0, (40, -1)],
    "batch_size": [0],
    "steps": [0, 1.5],
    "validations": [-1],
    "learning_rate": [0.0, NAN, -0.03],
    "warmup_steps": [-1, 2.5, NAN],
    "label_smoothing": [1.5],
    "jit_compile": ["xla"],
    "seed": [None],
    "dataset": [""],
}


def _field_cases(bad_fields):
    return [(field, value) for field, values in bad_fields.items() for value in values]


@pytest.mark.parametrize(
    "recipe, field, value",
    [(training.TrainConfig, *case) for case in _field_cases(BAD_TRAIN_FIELDS)]
    + [(training.FinetuneConfig, *case) for case in _field_cases(BAD_FINETUNE_FIELDS)],
)
def test_a_recipe_refuses_a_bad_field_by_name(recipe, field, value):
    """Bad values fail when the recipe is made (in Python or from a stored config.json),
    before any work: before this check `TrainConfig(learning_rate=nan)` trained on NaNs."""
    with pytest.raises(ValueError) as info:
        recipe(**{field: value})
    assert field in str(info.value) and repr(value) in str(info.value)


def test_every_recipe_field_has_bad_values_in_the_tests():
    """A new recipe field gets its refusals above."""
    for recipe, bad in (
        (training.TrainConfig, BAD_TRAIN_FIELDS),
        (training.FinetuneConfig, BAD_FINETUNE_FIELDS),
    ):
        assert set(bad) == {field.name for field in dataclasses.fields(recipe)}, recipe


@settings(max_examples=60, deadline=None)
@given(
    field=st.sampled_from(["learning_rate", "weight_decay", "warmup_epochs", "global_clipnorm"]),
    value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5)),
)
def test_a_train_recipe_takes_exactly_the_finite_numbers_of_its_rule(field, value):
    positive = field in ("learning_rate", "global_clipnorm")
    allowed = math.isfinite(value) and (value > 0 if positive else value >= 0)
    if allowed:
        assert getattr(training.TrainConfig(**{field: value}), field) == value
    else:
        with pytest.raises(ValueError, match=field):
            training.TrainConfig(**{field: value})


def test_recipes_take_what_the_cli_and_the_docs_give():
    """The accepted neighbours of the defaults: pairs, None where the field allows it."""
    training.TrainConfig(image_size=(28, 32), patch_size=(4, 4), global_clipnorm=None)
    training.TrainConfig(warmup_epochs=0, weight_decay=0, jit_compile=False, seed=2**32 - 1)
    training.FinetuneConfig(image_size=None, warmup_steps=0, jit_compile=True)
    training.FinetuneConfig(image_size=[40, 48], warmup_steps=None)


def _fit_steps(model, x, y, steps):
    for _ in range(steps):
        model.train_on_batch(x, y)


def test_reloaded_keras_file_continues_training_as_in_memory(tmp_path):
    """The saved optimizer is the optimizer: weight-decay exclusions (biases, LayerNorm,
    class token, position table), schedule position and moments survive `.keras`, so
    continuing from the reloaded file gives the weights of continuing in memory."""
    import keras_vit

    model = keras_vit.ViT(
        image_size=16,
        patch_size=8,
        hidden_dim=16,
        num_heads=2,
        mlp_dim=32,
        num_layers=1,
        num_classes=3,
    )
    optimizer = schedules.pretrain_optimizer(0.01, 20, 2, weight_decay=0.5, decay="cosine")
    model.compile(optimizer=optimizer, loss=losses.loss())
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
    y = np.array([0, 1, 2, 0])
    _fit_steps(model, x, y, 3)
    path = tmp_path / "mid.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    assert int(reloaded.optimizer.iterations.numpy()) == 3
    assert reloaded.optimizer.get_config() == model.optimizer.get_config()
    _fit_steps(model, x, y, 3)
    _fit_steps(reloaded, x, y, 3)
    for mine, theirs in zip(model.weights, reloaded.weights, strict=True):
        np.testing.assert_allclose(theirs.numpy(), mine.numpy(), atol=1e-6, err_msg=mine.path)
    # the exclusions are still in force after the reload (a zero-gradient step on a bias)
    bias = reloaded.get_layer("head").bias
    assert not reloaded.optimizer._use_weight_decay(bias)
    assert reloaded.optimizer._use_weight_decay(reloaded.get_layer("head").kernel)


def adamw_numpy(weights, grads_per_step, lrs, decays, wd, beta_1=0.9, beta_2=0.999, eps=1e-7):
    """AdamW from the equations in float64 (Loshchilov & Hutter 2019, decoupled decay scaled
    by the learning rate; Keras' epsilon outside the bias-corrected square root)."""
    weights = [w.astype("float64") for w in weights]
    m = [np.zeros_like(w) for w in weights]
    v = [np.zeros_like(w) for w in weights]
    for t, (grads, lr) in enumerate(zip(grads_per_step, lrs, strict=True), start=1):
        alpha = lr * math.sqrt(1 - beta_2**t) / (1 - beta_1**t)
        for i, g in enumerate(grads):
            if decays[i]:
                weights[i] = weights[i] - lr * wd * weights[i]
            m[i] = beta_1 * m[i] + (1 - beta_1) * g
            v[i] = beta_2 * v[i] + (1 - beta_2) * g * g
            weights[i] = weights[i] - alpha * m[i] / (np.sqrt(v[i]) + eps)
    return weights


@settings(max_examples=8, deadline=None)
@given(
    shapes=st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=2), min_size=1, max_size=4),
    steps=st.integers(1, 4),
    weight_decay=st.sampled_from([0.0, 0.3]),
    fused=st.booleans(),
    traced=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_vit_adamw_matches_the_equations(shapes, steps, weight_decay, fused, traced, seed):
    """Fused (one XLA program) and Keras' per-variable update both give NumPy's AdamW, with
    the exclusions honoured, eagerly and inside a traced train step."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    names = [("kernel" if i % 2 == 0 else "bias") for i in range(len(shapes))]
    start = [rng.normal(0, 1, s).astype("float32") for s in shapes]
    variables = [keras.Variable(w, name=n) for w, n in zip(start, names, strict=True)]
    schedule = schedules.warmup_schedule(0.05, 6, 0, "cosine")
    optimizer = optimizers.ViTAdamW(
        learning_rate=schedule, weight_decay=weight_decay, no_decay_pattern="bias", fused=fused
    )
    grads = [[rng.normal(0, 1, s).astype("float32") for s in shapes] for _ in range(steps)]
    optimizer.build(variables)

    def apply(*step_grads):
        optimizer.apply_gradients(zip(step_grads, variables, strict=True))

    if traced:
        apply = tf.function(apply)
    for step_grads in grads:
        apply(*[tf.constant(g) for g in step_grads])
    lrs = [float(schedule(t)) for t in range(steps)]
    decays = [n == "kernel" for n in names]
    expected = adamw_numpy(start, grads, lrs, decays, weight_decay)
    for variable, want, first in zip(variables, expected, start, strict=True):
        assert not np.allclose(want, first)
        np.testing.assert_allclose(variable.numpy(), want, rtol=2e-5, atol=2e-6)


def test_vit_adamw_fuses_only_where_it_can(monkeypatch):
    """One fused call per step on plain TensorFlow; Keras' own update under a strategy, with
    amsgrad, or with fused=False; the flag survives the config."""
    import tensorflow as tf

    from keras_vit.kernels import tensorflow as _tf_kernels

    calls = []
    real = _tf_kernels.AdamWUpdate.__call__
    monkeypatch.setattr(_tf_kernels.AdamWUpdate, "__call__", lambda *a: calls.append(1) or real(*a))

    def one_step(strategy=None, **kwargs):
        strategy = strategy or tf.distribute.get_strategy()
        with strategy.scope():
            variable = keras.Variable(np.ones((3,), "float32"), name="kernel")
            optimizer = optimizers.ViTAdamW(learning_rate=0.1, **kwargs)
        strategy.run(lambda: optimizer.apply_gradients([(tf.ones((3,)), variable)]))
        return variable.numpy()

    fused = one_step()
    assert len(calls) == 1
    for kwargs in ({"amsgrad": True}, {"fused": False}):
        one_step(**kwargs)
    keras_update = one_step(tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert len(calls) == 1
    np.testing.assert_allclose(fused, keras_update, rtol=1e-6)
    assert not np.allclose(fused, 1.0)
    config = optimizers.ViTAdamW(fused=False).get_config()
    assert config["fused"] is False
    assert optimizers.ViTAdamW.from_config(config).fused is False


def test_fused_update_outlives_an_earlier_optimizer_and_its_variables():
    """A second model fitted in the same process after the first one's variables are gone
    (CI ran `keras-vit train` twice per worker): each optimizer's fused program holds only its
    own variables, so a trace made for the first never runs on the second."""
    import gc

    def fit_once(seed):
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="head")])
        optimizer = optimizers.ViTAdamW(learning_rate=0.1, weight_decay=0.1)
        model.compile(optimizer=optimizer, loss="mse", jit_compile=False)
        x = np.random.default_rng(seed).normal(size=(8, 4)).astype("float32")
        start = model.get_layer("head").kernel.numpy()
        model.fit(x, np.zeros((8, 3), "float32"), epochs=1, verbose=0)
        return start, model.get_layer("head").kernel.numpy()

    for seed in (1, 2):
        start, trained = fit_once(seed)
        gc.collect()
        assert not np.allclose(start, trained)


def test_a_step_traced_for_checked_data_keeps_the_nan_factor_without_the_assert():
    """Within `labels_checked_upstream` (the data's labels were checked where it was made) a
    graph step has no Assert (on JAX: no host callback in every step) and a bad label that
    still got through gives NaN; outside it the same graph asserts."""
    import tensorflow as tf

    from keras_vit.train.losses import label_factor, labels_checked_upstream

    if keras.backend.backend() != "tensorflow":
        pytest.skip("TensorFlow graphs")

    def asserts():
        step = tf.function(lambda labels: label_factor(labels, 5), jit_compile=False)
        graph = step.get_concrete_function(tf.TensorSpec([4], tf.int32)).graph.as_graph_def()
        nodes = [*graph.node, *(n for f in graph.library.function for n in f.node_def)]
        return step, [node.name for node in nodes if node.op == "Assert"]

    with labels_checked_upstream():
        step, inside = asserts()
        factor = step(tf.constant([0, 7, 2, -1])).numpy()
    assert inside == [] and asserts()[1]
    assert np.isnan(factor[[1, 3]]).all() and (factor[[0, 2]] == 1).all()


@pytest.mark.parametrize("jit_compile", [False, True])
def test_the_label_check_leaves_no_assert_in_an_xla_step(jit_compile):
    """A graph step asserts on bad labels; an XLA step cannot compile an Assert (one in the
    default `keras-vit train` step made every epoch ~40x slower on CPU), so there the check
    is the NaN factor alone: bad labels give a NaN loss, never a finite one."""
    import tensorflow as tf

    from keras_vit.train.losses import label_factor

    if keras.backend.backend() != "tensorflow":
        pytest.skip("TensorFlow graphs")
    step = tf.function(lambda labels: label_factor(labels, 5), jit_compile=jit_compile)
    graph = step.get_concrete_function(tf.TensorSpec([4], tf.int32)).graph.as_graph_def()
    nodes = [*graph.node, *(n for f in graph.library.function for n in f.node_def)]
    asserts = [node.name for node in nodes if node.op == "Assert"]  # tf.debugging.Assert: in an If
    assert bool(asserts) is not jit_compile, asserts
    if jit_compile:
        factor = step(tf.constant([0, 7, 2, -1])).numpy()
        assert np.isnan(factor[[1, 3]]).all() and (factor[[0, 2]] == 1).all()
