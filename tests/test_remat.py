"""The `remat` option of the builders and `finetune`: every Transformer block recomputes its
activations in the backward pass; kept through get_config and a `.keras` round trip."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers import TransformerBlock
from tests.output_checks import randomize_weights

TINY = dict(image_size=16, patch_size=8, hidden_dim=16, num_heads=2, mlp_dim=32, num_layers=2)


def _remat_flags(model):
    return [
        layer.remat
        for layer in model._flatten_layers(include_self=False, recursive=True)
        if isinstance(layer, TransformerBlock)
    ]


@pytest.mark.parametrize("remat", [True, False])
def test_vit_remat_reaches_every_block_and_survives_a_keras_file(tmp_path, remat):
    model = keras_vit.ViT(num_classes=3, remat=remat, **TINY)
    assert _remat_flags(model) == [remat, remat]
    randomize_weights(model, seed=0)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert _remat_flags(loaded) == [remat, remat]
    x = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_named_and_hybrid_builders_take_remat():
    named = keras_vit.ViT_Ti16(num_classes=2, image_size=32, num_layers=1, remat=True)
    assert _remat_flags(named) == [True]
    hybrid = keras_vit.HybridViT(
        resnet_stages=(1,), num_classes=2, image_size=32, hidden_dim=16, num_heads=2,
        mlp_dim=32, num_layers=1, remat=True,
    )  # fmt: skip
    assert _remat_flags(hybrid) == [True]


def test_finetune_sets_or_keeps_remat():
    source = keras_vit.ViT(num_classes=3, **TINY)
    assert _remat_flags(keras_vit.finetune(source, 4)) == [False, False]
    assert _remat_flags(keras_vit.finetune(source, 4, remat=True)) == [True, True]
    tuned = keras_vit.finetune(keras_vit.ViT(num_classes=3, remat=True, **TINY), 4)
    assert _remat_flags(tuned) == [True, True]
    with pytest.raises(ValueError, match="`remat` must be None, True or False"):
        keras_vit.finetune(source, 4, remat=1)


def test_a_remat_model_fits_like_the_plain_one():
    x = np.random.default_rng(1).uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    y = np.arange(8) % 3
    losses = []
    for remat in (False, True):
        keras.utils.set_random_seed(2)
        model = keras_vit.ViT(num_classes=3, remat=remat, **TINY)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(keras.optimizers.SGD(0.1), loss)
        history = model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
        losses.append(history.history["loss"])
    assert np.isfinite(losses[0]).all() and losses[0][1] < losses[0][0]  # it trains
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
