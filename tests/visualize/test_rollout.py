"""Attention rollout and mean attention distance on hand-made attention maps.

Expected values are worked out by hand from the definitions (Abnar & Zuidema 2020 section 3;
ViT paper section 4.5 / fig. 7), written next to each case.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from keras_vit.visualize import (
    TokenGrid,
    attention_rollout,
    block_attention_map,
    mean_attention_distance,
)


def identity_maps(num_layers, tokens, batch=1, heads=2):
    eye = np.broadcast_to(np.eye(tokens), (batch, heads, tokens, tokens))
    return [eye.copy() for _ in range(num_layers)]


def test_identity_attention_gives_a_uniform_map_with_class_token():
    # A = I in every layer -> R = I: the class token keeps everything, each patch gets 0.
    maps = identity_maps(3, 1 + 2 * 3)
    rollout = attention_rollout(maps, (2, 3))
    assert rollout.shape == (1, 2, 3)
    np.testing.assert_array_equal(rollout, np.zeros((1, 2, 3)))


def test_identity_attention_gives_a_uniform_map_without_class_token():
    # gap: mean over queries of the rows of R = I -> 1/N for every patch.
    maps = identity_maps(2, 2 * 3)
    rollout = attention_rollout(maps, (2, 3))
    np.testing.assert_allclose(rollout, np.full((1, 2, 3), 1 / 6), atol=1e-7)


def test_uniform_attention_gives_a_uniform_map():
    # W = U (all 1/T): A = (U + I)/2, A^2 = 0.75 U + 0.25 I -> R[0, patch] = 0.75 / T.
    tokens = 5
    uniform = np.full((1, 2, tokens, tokens), 1 / tokens)
    rollout = attention_rollout([uniform, uniform], (2, 2))
    np.testing.assert_allclose(rollout, np.full((1, 2, 2), 0.75 / tokens), atol=1e-7)


def test_class_token_attending_to_one_patch_peaks_there():
    # Layer maps: identity except the class token row, which is e_3 (patch 2 = grid (1, 0)).
    # A row 0 = 0.5 e0 + 0.5 e3; (A A) row 0 = 0.25 e0 + 0.75 e3.
    tokens = 5
    maps = identity_maps(2, tokens)
    for layer in maps:
        layer[:, :, 0] = np.eye(tokens)[3]
    rollout = attention_rollout(maps, (2, 2))
    expected = np.array([[[0.0, 0.0], [0.75, 0.0]]])
    np.testing.assert_allclose(rollout, expected, atol=1e-7)
    assert np.unravel_index(rollout[0].argmax(), (2, 2)) == (1, 0)


def test_head_fusion_max_and_mean_differ_as_computed_by_hand():
    # Head 0 identity, head 1: class token -> patch token 2. One layer.
    # mean: row 0 = 0.5 e0 + 0.5 e2, + e0 -> /2 -> 0.25 at token 2.
    # max:  row 0 = e0 + e2, + e0 -> /3 -> 1/3 at token 2.
    tokens = 5
    maps = np.broadcast_to(np.eye(tokens), (1, 2, tokens, tokens)).copy()
    maps[0, 1, 0] = np.eye(tokens)[2]
    mean = attention_rollout([maps], (2, 2))
    peak = attention_rollout([maps], (2, 2), head_fusion="max")
    assert mean[0, 0, 1] == pytest.approx(0.25)
    assert peak[0, 0, 1] == pytest.approx(1 / 3)


def test_discard_ratio_drops_the_weakest_weights():
    # gap, grid (1, 2). W = [[.9, .1], [.3, .7]]; off-diagonal 0.1 and 0.3.
    # ratio 0: (W + I)/2 = [[.95, .05], [.15, .85]] -> query mean [.55, .45]
    # ratio .5 drops 0.1: [[1.9, 0], [.3, 1.7]] -> [[1, 0], [.15, .85]] -> [.575, .425]
    maps = [np.array([[[[0.9, 0.1], [0.3, 0.7]]]])]
    np.testing.assert_allclose(attention_rollout(maps, (1, 2))[0, 0], [0.55, 0.45], atol=1e-7)
    dropped = attention_rollout(maps, (1, 2), discard_ratio=0.5)
    np.testing.assert_allclose(dropped[0, 0], [0.575, 0.425], atol=1e-7)


def test_grid_must_match_the_number_of_tokens():
    maps = identity_maps(1, 7)
    with pytest.raises(ValueError, match="grid"):
        attention_rollout(maps, (2, 2))
    with pytest.raises(ValueError, match="grid"):
        mean_attention_distance(maps, (3, 3), 16)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"head_fusion": "median"}, "head_fusion"),
        ({"discard_ratio": 1.0}, "discard_ratio"),
        ({"discard_ratio": -0.1}, "discard_ratio"),
    ],
)
def test_bad_options_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        attention_rollout(identity_maps(1, 5), (2, 2), **kwargs)


def test_maps_of_different_shapes_raise():
    with pytest.raises(ValueError, match="same shape"):
        attention_rollout([np.ones((1, 2, 5, 5)), np.ones((1, 2, 4, 4))], (2, 2))
    with pytest.raises(ValueError, match="at least one"):
        attention_rollout([], (2, 2))


def gap_maps_2x2():
    """One layer, grid (2, 2) patches 0 1 / 2 3, three heads:
    head 0: identity; head 1: each patch attends to its horizontal neighbour;
    head 2: uniform over the four patches."""
    eye = np.eye(4)
    horizontal = eye[[1, 0, 3, 2]]
    uniform = np.full((4, 4), 0.25)
    return [np.stack([eye, horizontal, uniform])[None]]


def test_mean_attention_distance_by_hand_square_patches():
    # Patch 16: head 0 -> 0 px; head 1 -> 16 px; head 2 -> (0 + 16 + 16 + 16*sqrt 2) / 4.
    distance = mean_attention_distance(gap_maps_2x2(), (2, 2), 16)
    assert distance.shape == (1, 3)
    np.testing.assert_allclose(distance[0], [0.0, 16.0, 8 + 4 * math.sqrt(2)], rtol=1e-6)


def test_mean_attention_distance_by_hand_rectangular_patches():
    # Patch (16 high, 8 wide): horizontal neighbours are 8 px apart; uniform head:
    # (0 + 8 + 16 + sqrt(8^2 + 16^2)) / 4.
    distance = mean_attention_distance(gap_maps_2x2(), (2, 2), (16, 8))
    np.testing.assert_allclose(distance[0], [0.0, 8.0, (24 + math.sqrt(320)) / 4], rtol=1e-6)


def test_mean_attention_distance_drops_the_class_token_and_renormalises():
    # Class token model, grid (1, 2), patch 10. Each patch puts 0.5 on the class token and 0.5
    # on the other patch: over patches alone that is 1.0 on a patch 10 px away -> 10 px.
    # Second layer: patches attend to themselves -> 0 px. The class-token row is ignored.
    first = np.array([[0.2, 0.4, 0.4], [0.5, 0.0, 0.5], [0.5, 0.5, 0.0]])
    second = np.array([[0.2, 0.4, 0.4], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    maps = [first[None, None], second[None, None]]
    distance = mean_attention_distance(maps, TokenGrid((1, 2), (10, 10), 1))
    np.testing.assert_allclose(distance, [[10.0], [0.0]], atol=1e-6)


def test_mean_attention_distance_needs_a_patch_size_for_a_bare_grid():
    with pytest.raises(ValueError, match="patch_size"):
        mean_attention_distance(gap_maps_2x2(), (2, 2))


def test_block_attention_map_by_hand():
    # Class token, grid (1, 2): head 0 row 0 = [.2, .2, .6], head 1 row 0 = [.0, .6, .4]
    # -> mean over heads, patches only: [.4, .5].
    layer = np.broadcast_to(np.eye(3), (1, 2, 3, 3)).copy()
    layer[0, 0, 0] = [0.2, 0.2, 0.6]
    layer[0, 1, 0] = [0.0, 0.6, 0.4]
    np.testing.assert_allclose(block_attention_map(layer, (1, 2)), [[[0.4, 0.5]]], atol=1e-7)
    # gap, grid (1, 2), one head: queries [.9, .1] and [.3, .7] -> mean [.6, .4].
    gap = np.array([[[[0.9, 0.1], [0.3, 0.7]]]])
    np.testing.assert_allclose(block_attention_map(gap, (1, 2)), [[[0.6, 0.4]]], atol=1e-7)


@pytest.mark.parametrize(
    "switches, prefix, has_class",
    [
        (dict(distilled=True, num_register_tokens=2), 4, True),
        (dict(pooling="gap", num_register_tokens=3), 3, False),
    ],
    ids=["distilled_registers", "gap_registers"],
)
def test_family_maps_leave_out_distillation_and_register_tokens(switches, prefix, has_class):
    """The rollout and per-block grids of a model with a distillation token and
    registers cover the patch tokens only ([cls][dist][registers][patches]); the reference
    is the rollout written here from Abnar & Zuidema's section 3."""
    import keras_vit
    from tests.checkpoints.random_models import images_for, randomise

    model = randomise(
        keras_vit.ViT(
            hidden_dim=16,
            num_heads=2,
            mlp_dim=32,
            num_layers=2,
            num_classes=3,
            patch_size=4,
            image_size=(8, 12),
            **switches,
        )
    )
    maps = keras_vit.attention_maps(model, images_for(model))
    assert maps[0].shape[-1] == prefix + 6
    rollout = None
    for layer in maps:
        fused = layer.astype(np.float64).mean(axis=1) + np.eye(prefix + 6)
        fused /= fused.sum(axis=-1, keepdims=True)
        rollout = fused if rollout is None else fused @ rollout
    rows = rollout[:, :1] if has_class else rollout[:, prefix:]
    expected = rows[:, :, prefix:].mean(axis=1).reshape(-1, 2, 3)
    np.testing.assert_allclose(attention_rollout(maps, model), expected, atol=1e-6)
    first = maps[0].mean(axis=1)
    rows = first[:, :1] if has_class else first[:, prefix:]
    per_block = rows[:, :, prefix:].mean(axis=1).reshape(-1, 2, 3)
    np.testing.assert_allclose(block_attention_map(maps[0], model), per_block, atol=1e-6)
