"""Few-shot linear evaluation: the closed-form ridge against independent solvers and on cases
with a known answer."""

from __future__ import annotations

import numpy as np
import pytest

from keras_vit.evaluate import fewshot


def whitened_design(features, reference):
    """The design matrix written out from the definition (not through RidgeProbe)."""
    mean, std = reference.mean(0), reference.std(0) + 1e-5
    x = (features - mean) / std
    return np.hstack([x, np.full((len(x), 1), 100.0)])


@pytest.mark.parametrize("n, d", [(40, 6), (12, 30)])  # primal (n >= d) and dual (n < d) forms
@pytest.mark.parametrize("l2", [2.0**-10, 1.0, 2.0**10])
def test_weights_equal_numpy_lstsq_of_the_augmented_system(n, d, l2):
    rng = np.random.default_rng(n + d)
    features, labels = rng.normal(size=(n, d)) * 3 + 1, rng.integers(0, 4, n)
    probe = fewshot.RidgeProbe(features, labels, 4)
    x = whitened_design(features, features)
    y = 2.0 * np.eye(4)[labels] - 1.0
    # min ||x w - y||^2 + l2 ||w||^2  <=>  least squares of [x; sqrt(l2) I] w = [y; 0]
    stacked = np.vstack([x, np.sqrt(l2) * np.eye(d + 1)])
    target = np.vstack([y, np.zeros((d + 1, 4))])
    expected = np.linalg.lstsq(stacked, target, rcond=None)[0]
    np.testing.assert_allclose(
        probe.weights(l2), expected, rtol=1e-6, atol=1e-9 * abs(expected).max()
    )


def test_scores_equal_scikit_learn_ridge_classifier():
    sklearn_linear = pytest.importorskip("sklearn.linear_model")
    rng = np.random.default_rng(1)
    features, labels = rng.normal(size=(50, 8)), rng.integers(0, 5, 50)
    test = rng.normal(size=(20, 8))
    probe = fewshot.RidgeProbe(features, labels, 5)
    # RidgeClassifier maps labels to {-1, 1} targets itself; the bias column is a feature.
    reference = sklearn_linear.RidgeClassifier(alpha=0.5, fit_intercept=False, solver="svd")
    reference.fit(whitened_design(features, features), labels)
    expected = reference.decision_function(whitened_design(test, features))
    np.testing.assert_allclose(probe.scores(test, 0.5), expected, rtol=1e-6, atol=1e-10)


def test_one_feature_two_points_has_the_closed_form_answer():
    """x = (-1, 1): mean 0, std s = 1 + 1e-5, so the design is [[-1/s, 100], [1/s, 100]],
    X^T X = diag(2/s^2, 2 * 100^2) and X^T Y = [[-2/s, 2/s], [0, 0]]: the class weights are
    -+(2/s) / (2/s^2 + l2) and the bias weights 0."""
    probe = fewshot.RidgeProbe([[-1.0], [1.0]], [0, 1], 2)
    s, l2 = 1 + 1e-5, 3.0
    expected = np.array([[-2 / s, 2 / s], [0.0, 0.0]]) / (2 / s**2 + l2)
    np.testing.assert_allclose(probe.weights(l2), expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(probe.predict([[-0.5], [0.3], [4.0]], l2), [0, 1, 1])


def test_separable_clusters_are_classified_perfectly_and_chance_features_are_not():
    rng = np.random.default_rng(0)
    centres = np.eye(3) * 10
    labels = np.repeat(np.arange(3), 40)
    features = centres[labels] + rng.normal(size=(120, 3))
    test_labels = np.repeat(np.arange(3), 30)
    test = [(centres[test_labels] + rng.normal(size=(90, 3)), test_labels)]
    results = fewshot.fewshot_from_features(
        features, labels, test, num_classes=3, shots=(1, 5), seeds=2
    )
    assert [r.accuracies for r in results.values()] == [[1.0, 1.0], [1.0, 1.0]]
    noise = rng.normal(size=(120, 3))  # features unrelated to the labels
    chance = fewshot.fewshot_from_features(
        noise, labels, [(rng.normal(size=(900, 3)), np.resize(test_labels, 900))],
        num_classes=3, shots=(5,), seeds=3,
    )  # fmt: skip
    assert abs(chance[5].mean - 1 / 3) < 0.08


def test_shots_and_holdout_are_disjoint_seeded_and_per_class():
    labels = np.repeat(np.arange(4), 20)
    chosen, held = fewshot.sample_shots(labels, 5, 10, seed=0)
    assert not set(chosen) & set(held)
    np.testing.assert_array_equal(np.bincount(labels[chosen]), [5] * 4)
    np.testing.assert_array_equal(np.bincount(labels[held]), [10] * 4)
    again, _ = fewshot.sample_shots(labels, 5, 10, seed=0)
    other, _ = fewshot.sample_shots(labels, 5, 10, seed=1)
    np.testing.assert_array_equal(chosen, again)
    assert set(chosen) != set(other)
    with pytest.raises(ValueError, match="class 3 has 2"):
        fewshot.sample_shots(np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3]), 3, 0, seed=0)


def test_check_shots_per_class_or_from_the_pool_size():
    fewshot.check_shots([1, 5], {"cat": 5, "dog": 7})
    with pytest.raises(ValueError, match="^6-shot evaluation needs 6 .* class cat has 5.$"):
        fewshot.check_shots([6, 2], {"cat": 5, "dog": 7})
    fewshot.check_shots([5], num_examples=10, num_classes=2)  # only the size is known
    with pytest.raises(ValueError, match="each of the 2 classes, 12 in all; the pool has 10."):
        fewshot.check_shots([6], num_examples=10, num_classes=2)
    fewshot.check_shots([500])  # nothing known: nothing to check before extraction


def test_l2_is_chosen_on_the_held_out_training_images():
    """Every l2 of the grid classifies this holdout right: the tie goes to the largest; with
    no holdout, the middle of the grid."""
    probe = fewshot.RidgeProbe([[-1.0], [1.0]], [0, 1], 2)
    grid = [0.1, 1.0, 10.0]
    assert fewshot.choose_l2(probe, [[-2.0], [2.0]], [0, 1], grid) == 10.0  # tie: largest
    assert fewshot.choose_l2(probe, [], [], grid) == 1.0


def test_fewshot_evaluate_streams_test_batches_through_the_model(tiny_vit_kwargs):
    """On a tiny ViT with random weights: the features are the pool layer's; the result equals
    the probe fitted on features extracted here, scored on all test batches."""
    import keras

    import keras_vit

    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(**tiny_vit_kwargs)
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (60, 32, 32, 3)).astype("float32")
    labels = np.arange(60) % 3
    import tensorflow as tf

    train = tf.data.Dataset.from_tensor_slices((images[:30], labels[:30])).batch(7)
    test = tf.data.Dataset.from_tensor_slices((images[30:], labels[30:])).batch(8)
    results = keras_vit.fewshot_evaluate(
        model, train, test, shots=(2,), seeds=2, holdout_per_class=3
    )
    pool = keras.Model(model.inputs, model.get_layer("pool").output).predict(images, verbose=0)
    assert np.abs(pool).max() > 0
    for seed in range(2):
        chosen, _ = fewshot.sample_shots(labels[:30], 2, 3, seed)
        probe = fewshot.RidgeProbe(pool[:30][chosen], labels[:30][chosen], 3)
        predicted = probe.predict(pool[30:], results[2].l2[seed])
        assert results[2].accuracies[seed] == pytest.approx(np.mean(predicted == labels[30:]))
    assert results[2].num_test == 30


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="shots"):
        fewshot.fewshot_from_features(np.zeros((4, 2)), [0, 0, 1, 1], [], num_classes=2, shots=(0,))
    with pytest.raises(ValueError, match="l2_grid"):
        fewshot.fewshot_from_features(
            np.zeros((4, 2)), [0, 0, 1, 1], [], num_classes=2, shots=(1,), l2_grid=(0.0,)
        )
    with pytest.raises(ValueError, match="features"):
        fewshot.RidgeProbe(np.zeros((3,)), [0, 1, 2], 3)


@pytest.mark.parametrize("representation_size", [None, 12])
@pytest.mark.parametrize("final_norm", ["tokens", "pooled"])
@pytest.mark.parametrize("pooling", ["token", "gap", "map"])
def test_features_are_what_the_head_reads(
    tiny_vit_kwargs, pooling, final_norm, representation_size
):
    """Few-shot features and the export's `features` signature read the representation the
    head reads (after timm's fc_norm for final_norm="pooled", after pre_logits when there is
    one), for every pooling: the reference is the head layer's own input."""
    import keras

    import keras_vit
    from keras_vit import export
    from tests.output_checks import randomize_weights

    if pooling == "map" and final_norm == "pooled":
        pytest.skip("refused by the builder (fc_norm needs token or gap pooling)")
    kwargs = {**tiny_vit_kwargs, "num_layers": 1}
    model = keras_vit.ViT(
        **kwargs, pooling=pooling, final_norm=final_norm, representation_size=representation_size
    )
    randomize_weights(model)
    images = np.random.default_rng(1).uniform(-1, 1, (3, 32, 32, 3)).astype("float32")
    expected = keras.Model(model.inputs, model.get_layer("head").input).predict(images, verbose=0)
    assert np.abs(expected).max() > 0
    features = fewshot.feature_model(model).predict(images, verbose=0)
    np.testing.assert_allclose(features, expected, atol=1e-6)
    layer = export.find_feature_layer(model)
    exported = keras.Model(model.inputs, layer.output).predict(images, verbose=0)
    np.testing.assert_allclose(exported, expected, atol=1e-6)


@pytest.mark.parametrize(
    "switches, layer",
    [
        (dict(distilled=True, num_register_tokens=2), "pool"),
        (dict(distilled=True, distillation_head=False), "pool"),
        (dict(distilled=True, include_top=False, representation_size=8), "pre_logits"),
        (dict(pooling="gap", num_register_tokens=3, layer_scale_init=0.5), "pool"),
    ],
    ids=["distilled_registers", "class_head_only", "deit_model_pooler", "gap_registers"],
)
def test_family_features_are_the_class_token_or_the_patch_mean(switches, layer):
    """Few-shot features of a DeiT / DINOv2-reg model are the normalised class
    token (not the distillation token; also beside a distillation token without its head,
    HF DeiTForImageClassification), HF DeiTModel's pooler output (tanh(dense(class
    token)), its pre_logits), or for "gap" the mean of the patch tokens only (registers
    left out), as the NumPy reference of the equations computes them."""
    import keras_vit
    from keras_vit.checkpoints.base.naming import official_arrays
    from tests.checkpoints.random_models import images_for, randomise
    from tests.numpy_family_reference import family_forward

    model = randomise(
        keras_vit.ViT(
            hidden_dim=16,
            num_heads=2,
            mlp_dim=32,
            num_layers=1,
            num_classes=3,
            patch_size=4,
            image_size=(8, 12),
            **switches,
        )
    )
    images = images_for(model)
    assert fewshot.feature_layer_name(model) == layer
    features = fewshot.feature_model(model).predict(images, verbose=0)
    params = {k: v for k, v in official_arrays(model).items() if not k.startswith("head")}
    expected = family_forward(params, images, num_heads=2, pooling=switches.get("pooling", "token"))
    assert np.abs(expected).max() > 1e-3
    np.testing.assert_allclose(features, expected, atol=1e-5)
