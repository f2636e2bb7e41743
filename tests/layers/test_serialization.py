"""B02: every custom layer round-trips through get_config/from_config with name/trainable/dtype."""

import inspect

import keras
import numpy as np
import pytest

from keras_vit import layers
from keras_vit.layers.resnet import BottleneckUnit, StdConv2D

CASES = [
    (layers.PatchEmbed, dict(patch_size=8, hidden_dim=16), (2, 16, 16, 3)),
    (layers.ClassToken, {}, (2, 4, 16)),
    (layers.AddPositionEmbs, {}, (2, 4, 16)),
    (layers.MultiHeadSelfAttention, dict(num_heads=4, attention_dropout_rate=0.1), (2, 4, 16)),
    (layers.MlpBlock, dict(mlp_dim=8, dropout_rate=0.1, gelu_approximate=False), (2, 4, 16)),
    (layers.TransformerBlock, dict(num_heads=4, mlp_dim=8, drop_path_rate=0.1), (2, 4, 16)),
    (layers.TokenPooling, dict(pooling="gap"), (2, 4, 16)),
    (layers.LayerScale, dict(init_value=1e-4), (2, 4, 16)),
    (layers.LearnedTokens, dict(num_tokens=3, insert_at=1, weight_name="reg"), (2, 4, 16)),
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


# Every constructor argument of every custom layer, each set to a value other than its default.
ROPE = {"num_prefix_tokens": 2, "grid_size": [3, 4], "patch_size": [8, 8], "temperature": 50.0}
EVERY_ARGUMENT = [
    (
        layers.PatchEmbed,
        dict(
            patch_size=4,
            hidden_dim=16,
            kernel_initializer="he_normal",
            bias_initializer="ones",
            input_preprocessing="imagenet",
            dynamic_image_size=True,
            image_size=(16, 16),
        ),
    ),
    (layers.ClassToken, dict(initializer="ones")),
    (
        layers.AddPositionEmbs,
        dict(
            initializer="ones",
            dynamic_image_size=True,
            grid_size=(2, 2),
            patch_size=(8, 8),
            num_prefix_tokens=1,
            resize_method="bicubic",
        ),
    ),
    (
        layers.MAPHead,
        dict(
            num_heads=4,
            mlp_dim=8,
            layer_norm_epsilon=1e-5,
            gelu_approximate=False,
            activation="quick_gelu",
        ),
    ),
    (
        layers.MultiHeadSelfAttention,
        dict(
            num_heads=4,
            attention_dropout_rate=0.1,
            qkv_bias="qv",
            rope=ROPE,
        ),
    ),
    (
        layers.MlpBlock,
        dict(mlp_dim=8, dropout_rate=0.1, gelu_approximate=False, activation="quick_gelu"),
    ),
    (layers.LayerScale, dict(init_value=1e-4)),
    (
        layers.LearnedTokens,
        dict(num_tokens=3, insert_at=1, weight_name="reg", initializer="ones"),
    ),
    (
        layers.TransformerBlock,
        dict(
            num_heads=4,
            mlp_dim=8,
            dropout_rate=0.1,
            attention_dropout_rate=0.2,
            drop_path_rate=0.3,
            layer_norm_epsilon=1e-5,
            gelu_approximate=False,
            num_output_tokens=1,
            layer_scale_init=1e-4,
            mlp_activation="quick_gelu",
            remat=True,
            qkv_bias="none",
            rope=ROPE,
            projection_quantization="int8",
        ),
    ),
    (layers.TokenPooling, dict(pooling="gap", token_index=1, num_prefix_tokens=2)),
    (
        StdConv2D,
        dict(
            filters=4,
            kernel_size=3,
            strides=2,
            padding="valid",
            epsilon=1e-4,
            kernel_initializer="he_normal",
        ),
    ),
    (BottleneckUnit, dict(features=64, strides=2, groups=4, norm_epsilon=1e-5, std_epsilon=1e-4)),
]


def constructor_arguments(cls):
    """Names and defaults of `cls.__init__`'s own arguments (not self / **kwargs)."""
    return {
        name: parameter.default
        for name, parameter in inspect.signature(cls.__init__).parameters.items()
        if name != "self" and parameter.kind is not parameter.VAR_KEYWORD
    }


def comparable(value):
    """Initializers compare by their serialised form, everything else as it is."""
    if isinstance(value, keras.initializers.Initializer):
        return keras.initializers.serialize(value)
    return value


@pytest.mark.parametrize("cls, kwargs", EVERY_ARGUMENT, ids=[c[0].__name__ for c in EVERY_ARGUMENT])
def test_every_constructor_argument_survives_the_config_round_trip(cls, kwargs):
    """A get_config that drops an argument makes the clone fall back to its default: caught."""
    arguments = constructor_arguments(cls)
    assert set(kwargs) == set(arguments), "the case must set every constructor argument"
    layer = cls(**kwargs)
    clone = cls.from_config(layer.get_config())
    for name, default in arguments.items():
        value = comparable(getattr(layer, name))
        if default is not inspect.Parameter.empty:
            try:
                without = cls(**{k: v for k, v in kwargs.items() if k != name})
            except ValueError:
                without = None  # required with the case's other arguments (dynamic sizes)
            assert without is None or value != comparable(getattr(without, name)), (
                f"{cls.__name__}: the case's {name} equals the default"
            )
        assert comparable(getattr(clone, name)) == value, f"{cls.__name__}.{name} was lost"
