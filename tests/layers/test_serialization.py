"""B02: every custom layer round-trips through get_config/from_config with name/trainable/dtype."""

import keras
import numpy as np
import pytest

from keras_vit import layers

CASES = [
    (layers.PatchEmbed, dict(patch_size=8, hidden_dim=16), (2, 16, 16, 3)),
    (layers.ClassToken, {}, (2, 4, 16)),
    (layers.AddPositionEmbs, {}, (2, 4, 16)),
    (layers.MultiHeadSelfAttention, dict(num_heads=4, attention_dropout_rate=0.1), (2, 4, 16)),
    (layers.MlpBlock, dict(mlp_dim=8, dropout_rate=0.1, gelu_approximate=False), (2, 4, 16)),
    (layers.TransformerBlock, dict(num_heads=4, mlp_dim=8, drop_path_rate=0.1), (2, 4, 16)),
    (layers.TokenPooling, dict(pooling="gap"), (2, 4, 16)),
]


@pytest.mark.parametrize("cls, kwargs, shape", CASES, ids=[c[0].__name__ for c in CASES])
def test_b02_config_round_trip(cls, kwargs, shape):
    layer = cls(**kwargs, name="custom_name", trainable=False, dtype="mixed_bfloat16")
    config = layer.get_config()
    clone = cls.from_config(config)
    assert clone.get_config() == config
    assert clone.name == "custom_name"
    assert clone.trainable is False
    assert clone.dtype_policy.name == "mixed_bfloat16"
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    layer(x)
    clone(x)
    assert [w.shape for w in clone.weights] == [w.shape for w in layer.weights]
    assert all(w.dtype == "float32" for w in clone.weights)


@pytest.mark.parametrize("cls", [c[0] for c in CASES], ids=[c[0].__name__ for c in CASES])
def test_b01_registered_under_keras_vit_package(cls):
    assert keras.saving.get_registered_name(cls) == f"keras_vit>{cls.__name__}"
    assert keras.saving.get_registered_object(f"keras_vit>{cls.__name__}") is cls
