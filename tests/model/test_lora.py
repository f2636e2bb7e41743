"""LoRA fine-tuning (`keras_vit.finetune(..., lora_rank=R)`, keras_vit.model.lora): what trains,
what the parameter count is, and fine-tuning a model that already has adapters."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.model.lora import apply_lora, check_lora_rank, lora_projections, trainable_count

ARCH = dict(patch_size=8, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2)


def _randomised(model, seed=0):
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.standard_normal(variable.shape).astype("float32") * 0.1)
    return model


def _b16_lora_parameters(rank, num_classes, position_rows=0):
    """Trainable parameters of a LoRA B/16 from the paper's adapter shapes (A `(d, R)`,
    B `(R, k)` for a `d x k` projection): per block q, k, v and out 768 x 768, MLP 768 <-> 3072;
    plus 25 LayerNorms (2 x 768 each), the head and the position rows."""
    d, mlp = 768, 3072
    attention = 4 * (d * rank + rank * d)
    mlp_pair = (d * rank + rank * mlp) + (mlp * rank + rank * d)
    norms = (2 * 12 + 1) * 2 * d
    return 12 * (attention + mlp_pair) + norms + d * num_classes + num_classes + position_rows * d


def test_b16_at_rank_8_trains_under_5_percent_of_full_fine_tuning():
    source = keras_vit.ViT_B16(num_classes=1000, image_size=224)
    tuned = keras_vit.finetune(source, num_classes=10, lora_rank=8)
    full = sum(np.prod(w.shape) for w in tuned.weights if "lora_kernel" not in w.path)
    assert full == source.count_params() - 1000 * 768 - 1000 + 10 * 768 + 10
    assert trainable_count(tuned) == _b16_lora_parameters(8, 10)
    assert trainable_count(tuned) < 0.05 * full
    resized = keras_vit.finetune(source, num_classes=10, image_size=256, lora_rank=8)
    assert trainable_count(resized) == _b16_lora_parameters(8, 10, position_rows=1 + 16 * 16)
    assert trainable_count(resized) < 0.05 * full
    imagenet = keras_vit.finetune(source, num_classes=1000, lora_rank=8)
    assert trainable_count(imagenet) == _b16_lora_parameters(8, 1000)
    assert trainable_count(imagenet) < 0.05 * source.count_params()


def test_only_adapters_head_and_norms_move_in_a_training_step():
    source = _randomised(keras_vit.ViT(image_size=32, num_classes=5, **ARCH))
    model = keras_vit.finetune(source, num_classes=3, lora_rank=2)
    before = {w.path: keras.ops.convert_to_numpy(w) for w in model.weights}
    x = np.random.default_rng(1).uniform(-1, 1, (4, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(model.predict(x, verbose=0), 0.0)  # zero head, B = 0
    model.compile(
        optimizer=keras.optimizers.SGD(0.5),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(x, np.array([0, 1, 2, 0]), batch_size=4, epochs=2, verbose=0)
    after = {w.path: keras.ops.convert_to_numpy(w) for w in model.weights}
    moved = {path for path, value in before.items() if not np.array_equal(value, after[path])}
    for path in moved:
        assert (
            "lora_kernel" in path
            or path.startswith("head/")
            or "LayerNorm" in path
            or path.startswith("encoder_norm/")
        ), path
    assert any("lora_kernel_b" in path for path in moved)
    assert {"head/kernel", "head/bias"} <= moved


def test_finetune_of_an_adapted_model_merges_its_adapters():
    source = keras_vit.ViT(image_size=32, num_classes=5, **ARCH)
    for layer in lora_projections(source):
        layer.enable_lora(4, lora_alpha=2)
    _randomised(source, seed=2)
    x = np.random.default_rng(3).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    pooled = keras.Model(source.input, source.get_layer("pool").output).predict(x, verbose=0)
    for lora_rank in (None, 2):
        tuned = keras_vit.finetune(source, num_classes=3, lora_rank=lora_rank)
        features = keras.Model(tuned.input, tuned.get_layer("pool").output)
        np.testing.assert_allclose(features.predict(x, verbose=0), pooled, atol=1e-5)


def test_a_hybrid_gets_adapters_on_its_blocks_only():
    source = keras_vit.HybridViT(
        resnet_stages=(1,), resnet_width=32, image_size=32, num_classes=5, **ARCH
    )
    tuned = keras_vit.finetune(source, num_classes=3, lora_rank=2)
    trainable = {w.path for w in tuned.trainable_weights}
    assert not [path for path in trainable if path.startswith(("conv_root", "block1", "embedding"))]
    assert sum("lora_kernel" in path for path in trainable) == 2 * 6 * 2


@pytest.mark.parametrize(
    "rank, alpha, match",
    [(0, None, "lora_rank"), (2.5, None, "lora_rank"), (True, None, "lora_rank"),
     (None, 4, "needs `lora_rank`"), (4, -1, "lora_alpha"), (4, float("nan"), "lora_alpha")],
)  # fmt: skip
def test_bad_ranks_are_refused(rank, alpha, match):
    with pytest.raises(ValueError, match=match):
        check_lora_rank(rank, alpha)


def test_adapters_twice_are_refused():
    model = keras_vit.ViT(image_size=32, num_classes=5, **ARCH)
    apply_lora(model, 2)
    with pytest.raises(ValueError, match="already has LoRA adapters"):
        apply_lora(model, 2)
