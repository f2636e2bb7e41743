import keras
import numpy as np
import pytest

import keras_vit
from tests.model_helpers import assign_official_params, random_images
from tests.numpy_reference import random_official_params, vit_forward
from tests.output_checks import (
    assert_close_to_float32,
    assert_outputs_close,
    mixed_and_float32_models,
    randomize_weights,
)

# Parameter counts of the release (vit_facts.md section 1; 224x224, 1000 classes).
RELEASE_PARAMS = {
    "ViT_Ti16": 5_717_416,
    "ViT_S16": 22_050_664,
    "ViT_S32": 22_878_952,
    "ViT_B8": 86_576_872,
    "ViT_B16": 86_567_656,
    "ViT_B32": 88_224_232,
    "ViT_L16": 304_326_632,
    "ViT_L32": 306_535_400,
    "ViT_H14": 632_045_800,
    # Patch-14 rows of DINOv2 / CLIP (not release files): counted by `_hand_count` below.
    "ViT_S14": 22_004_584,
    "ViT_B14": 86_475_496,
    "ViT_L14": 304_203_752,
}


def _hand_count(patch, hidden, mlp, layers, image=224, classes=1000, channels=3):
    """Parameters of a class-token ViT from paper section 3.1, term by term."""
    tokens = (image // patch) ** 2
    embedding = patch * patch * channels * hidden + hidden
    block = 2 * 2 * hidden + 4 * (hidden * hidden + hidden) + 2 * hidden * mlp + mlp + hidden
    return (
        embedding
        + hidden
        + (1 + tokens) * hidden
        + layers * block
        + 2 * hidden
        + (hidden * classes + classes)
    )


def test_the_hand_count_gives_the_release_counts_and_the_patch14_rows():
    assert _hand_count(16, 768, 3072, 12) == RELEASE_PARAMS["ViT_B16"]
    assert _hand_count(14, 1280, 5120, 32) == RELEASE_PARAMS["ViT_H14"]
    assert _hand_count(14, 384, 1536, 12) == RELEASE_PARAMS["ViT_S14"]
    assert _hand_count(14, 768, 3072, 12) == RELEASE_PARAMS["ViT_B14"]
    assert _hand_count(14, 1024, 4096, 24) == RELEASE_PARAMS["ViT_L14"]


RELEASE_GAP_PARAMS = {
    "ViT_S16": 22_049_896,
    "ViT_B16": 86_566_120,
    "ViT_S32": 22_878_184,
    "ViT_B32": 88_222_696,
}


# H/14 (632M parameters, ~40 s to build on 2 cores) runs in the large lane; the hand count
# above checks its figure in every run.
@pytest.mark.slow
@pytest.mark.parametrize(
    "builder, expected",
    [
        pytest.param(b, n, marks=[pytest.mark.large] if b == "ViT_H14" else [])
        for b, n in RELEASE_PARAMS.items()
    ],
)
def test_b20_parameter_count_equals_release(builder, expected):
    """B20: exact counts for all nine variants (hidden size vs per-head size not confused)."""
    assert getattr(keras_vit, builder)().count_params() == expected


@pytest.mark.slow
@pytest.mark.parametrize("builder, expected", RELEASE_GAP_PARAMS.items())
def test_parameter_count_of_gap_variants(builder, expected):
    assert getattr(keras_vit, builder)(pooling="gap").count_params() == expected


# timm's counts of its SigLIP towers (timm 1.0.31, `timm.create_model(name,
# pretrained=False, num_classes=...)`; num_classes=0 is no head): no class token, MAP
# pooling (`*_siglip_*`, `global_pool="map"`) or the mean (`*_siglip_gap_*`,
# `global_pool="avg"`, `fc_norm=False`: keras_vit's "gap").
# (builder, pooling, image size, classes or None): (timm model, its count)
TIMM_SIGLIP_PARAMS = {
    ("ViT_So400m14", "map", 224, None): ("vit_so400m_patch14_siglip_224", 427_680_704),
    ("ViT_So400m14", "map", 224, 1000): ("vit_so400m_patch14_siglip_224", 428_833_704),
    ("ViT_So400m14", "gap", 224, None): ("vit_so400m_patch14_siglip_gap_224", 412_442_352),
    ("ViT_So400m16", "map", 256, None): ("vit_so400m_patch16_siglip_256", 427_888_064),
    ("ViT_So400m16", "map", 256, 1000): ("vit_so400m_patch16_siglip_256", 429_041_064),
    ("ViT_So400m16", "gap", 256, 1000): ("vit_so400m_patch16_siglip_gap_256", 413_802_712),
    ("ViT_gopt16", "map", 256, None): ("vit_giantopt_patch16_siglip_256", 1_163_168_256),
    ("ViT_gopt16", "map", 256, 1000): ("vit_giantopt_patch16_siglip_256", 1_164_705_256),
    ("ViT_gopt16", "gap", 256, None): ("vit_giantopt_patch16_siglip_gap_256", 1_134_838_272),
}


def _case_id(case):
    return "-".join(str(part) for part in case)


def _siglip_tower(builder, pooling, size, classes, **kwargs):
    head = dict(num_classes=classes) if classes else dict(include_top=False)
    return getattr(keras_vit, builder)(image_size=size, pooling=pooling, **head, **kwargs)


# One case per builder in the default run (~6 s each on 2 cores), the others in the slow lane.
FAST_SIGLIP_CASES = (
    ("ViT_So400m14", "map", 224, 1000),
    ("ViT_So400m16", "gap", 256, 1000),
    ("ViT_gopt16", "map", 256, None),
)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=[] if c in FAST_SIGLIP_CASES else [pytest.mark.slow])
        for c in TIMM_SIGLIP_PARAMS
    ],
    ids=_case_id,
)
def test_siglip_variant_counts_equal_timms_by_depth(case):
    """Built at 1 and 2 blocks (the count is affine in the depth), extrapolated to the
    variant's depth; the full builds run in the slow lanes."""
    from keras_vit.spec import configs

    depth = configs.get_config(case[0]).num_layers
    one, two = (_siglip_tower(*case, num_layers=n).count_params() for n in (1, 2))
    assert one + (depth - 1) * (two - one) == TIMM_SIGLIP_PARAMS[case][1]
    keras.backend.clear_session()


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=[pytest.mark.large] if c[0] == "ViT_gopt16" else [])
        for c in TIMM_SIGLIP_PARAMS
        if c[3] is None
    ],
    ids=_case_id,
)
def test_siglip_variant_parameter_count_equals_timm(case):
    assert _siglip_tower(*case).count_params() == TIMM_SIGLIP_PARAMS[case][1]


def _tiny_with_random_params(tiny, pooling="token", representation_size=None, **kwargs):
    rng = np.random.default_rng(7)
    model = keras_vit.ViT(
        **tiny, pooling=pooling, representation_size=representation_size, **kwargs
    )
    params = random_official_params(
        rng,
        channels=3,
        pooling=pooling,
        representation_size=representation_size,
        final_norm=kwargs.get("final_norm", "tokens"),
        **tiny,
    )
    assign_official_params(model, params)
    return model, params


@pytest.mark.parametrize("pooling", ["token", "gap"])
@pytest.mark.parametrize("representation_size", [None, 16])
def test_logits_match_numpy_forward_pass(tiny_vit_kwargs, pooling, representation_size):
    model, params = _tiny_with_random_params(tiny_vit_kwargs, pooling, representation_size)
    images = random_images(np.random.default_rng(0), 3, 32, 32)
    expected = vit_forward(params, images, num_heads=4, pooling=pooling)
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, atol=1e-4)


@pytest.mark.parametrize("pooling", ["token", "gap"])
def test_pooled_final_norm_matches_numpy_and_survives_keras_files(
    tiny_vit_kwargs, pooling, tmp_path
):
    model, params = _tiny_with_random_params(
        tiny_vit_kwargs, pooling, final_norm="pooled", gelu_approximate=False
    )
    assert "encoder_norm" not in {layer.name for layer in model.layers}
    images = random_images(np.random.default_rng(1), 2, 32, 32)
    expected = vit_forward(params, images, num_heads=4, pooling=pooling, gelu_approximate=False)
    assert np.abs(expected).max() > 1e-2
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, atol=1e-4, rtol=0)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    assert loaded.get_layer("fc_norm").epsilon == 1e-6
    np.testing.assert_array_equal(
        loaded.predict(images, verbose=0), model.predict(images, verbose=0)
    )


def test_exact_gelu_option_matches_numpy(tiny_vit_kwargs):
    model, params = _tiny_with_random_params(tiny_vit_kwargs, gelu_approximate=False)
    images = random_images(np.random.default_rng(1), 2, 32, 32)
    expected = vit_forward(params, images, num_heads=4, gelu_approximate=False)
    np.testing.assert_allclose(model(images), expected, atol=1e-4)


def test_b17_static_shapes_through_the_stages(tiny_vit_kwargs):
    """B17: the sequence length stays static (not None) through every stage."""
    model = keras_vit.ViT(**tiny_vit_kwargs)
    assert model.get_layer("embedding").output.shape == (None, 16, 32)
    assert model.get_layer("cls").output.shape == (None, 17, 32)
    assert model.get_layer("encoderblock_0").output.shape == (None, 17, 32)
    # The last block of a class-token classifier computes only the class token.
    assert model.get_layer("encoderblock_1").output.shape == (None, 1, 32)
    assert model.get_layer("encoder_norm").output.shape == (None, 1, 32)
    assert model.output.shape == (None, 10)
    sequence = keras_vit.ViT(**tiny_vit_kwargs, include_top=False, return_sequence=True)
    assert sequence.get_layer("encoder_norm").output.shape == (None, 17, 32)
    assert model.inputs[0].name == "images"


def test_b18_input_dtypes_float64_float32_uint8(tiny_vit_kwargs):
    """B18: float64, float32 and uint8 images all run; float64 equals float32."""
    model, _ = _tiny_with_random_params(tiny_vit_kwargs)
    pixels = np.random.default_rng(2).integers(0, 256, (2, 32, 32, 3))
    out32 = model.predict(pixels.astype(np.float32), verbose=0)
    out64 = model.predict(pixels.astype(np.float64), verbose=0)
    out8 = model.predict(pixels.astype(np.uint8), verbose=0)
    np.testing.assert_allclose(out64, out32, atol=1e-5)
    np.testing.assert_allclose(out8, out32, atol=1e-5)
    assert np.isfinite(out32).all()


def test_non_square_images_end_to_end(tiny_vit_kwargs):
    tiny_vit_kwargs["image_size"] = (32, 48)
    model = keras_vit.ViT(**tiny_vit_kwargs)
    assert model.get_layer("posembed_input").pos_embedding.shape == (1, 1 + 4 * 6, 32)
    model.compile(
        optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    x = random_images(np.random.default_rng(3), 4, 32, 48)
    model.fit(x, np.arange(4), epochs=1, verbose=0)
    assert model.predict(x, verbose=0).shape == (4, 10)


def test_dropout_active_only_in_training(tiny_vit_kwargs):
    model, _ = _tiny_with_random_params(tiny_vit_kwargs, dropout_rate=0.5)
    x = random_images(np.random.default_rng(4), 2, 32, 32)
    np.testing.assert_array_equal(model(x), model(x))
    np.testing.assert_allclose(model(x), model.predict(x, verbose=0), atol=1e-5)
    assert not np.allclose(model(x, training=True), model(x))


def test_include_top_false_returns_pooled_feature_and_sequence(tiny_vit_kwargs):
    """B33: the pooled feature is the final-LayerNorm output at the class-token position."""
    model, params = _tiny_with_random_params(tiny_vit_kwargs)
    tiny = dict(tiny_vit_kwargs)
    features = keras_vit.ViT(**tiny, include_top=False)
    sequence = keras_vit.ViT(**tiny, include_top=False, return_sequence=True)
    params.pop("head/kernel"), params.pop("head/bias")
    assign_official_params(features, params)
    assign_official_params(sequence, params)
    x = random_images(np.random.default_rng(5), 2, 32, 32)
    pooled, tokens = np.asarray(features(x)), np.asarray(sequence(x))
    assert pooled.shape == (2, 32) and tokens.shape == (2, 17, 32)
    np.testing.assert_allclose(pooled, tokens[:, 0], atol=1e-6)
    np.testing.assert_allclose(pooled, vit_forward(params, x, num_heads=4), atol=1e-4)


def test_class_token_only_last_block_gives_the_full_models_gradients(tiny_vit_kwargs):
    """The classifier (last block: class token only) has the same loss gradients as the
    full sequence model with the same head applied to token 0."""
    import tensorflow as tf

    model, params = _tiny_with_random_params(tiny_vit_kwargs)
    assert model.get_layer("encoderblock_1").num_output_tokens == 1
    sequence = keras_vit.ViT(**tiny_vit_kwargs, include_top=False, return_sequence=True)
    head = params.pop("head/kernel"), params.pop("head/bias")
    assign_official_params(sequence, params)
    kernel, bias = (tf.constant(a, tf.float32) for a in head)
    images = random_images(np.random.default_rng(8), 3, 32, 32)
    labels = tf.constant([1, 4, 7])

    def loss_and_grads(net, logits_of):
        with tf.GradientTape() as tape:
            logits = logits_of(net(images, training=True))
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            )
        body = [w for w in net.trainable_weights if not w.path.startswith("head/")]
        grads = tape.gradient(loss, [w.value for w in body])
        return float(loss), {w.path: g.numpy() for w, g in zip(body, grads, strict=True)}

    loss_a, grads_a = loss_and_grads(model, lambda out: out)
    loss_b, grads_b = loss_and_grads(sequence, lambda seq: seq[:, 0] @ kernel + bias)
    assert loss_a == pytest.approx(loss_b, abs=1e-5)
    assert sorted(grads_a) == sorted(grads_b) and len(grads_a) == 2 * 16 + 6
    for path, grad in grads_a.items():
        np.testing.assert_allclose(grad, grads_b[path], atol=1e-5, err_msg=path)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(class_token_only="yes"), "class_token_only"),
        (dict(class_token_only=True, pooling="gap"), "pooling='gap'"),
        (dict(num_layers=0), "num_layers"),
    ],
)
def test_encode_tokens_rejects_bad_arguments(kwargs, message):
    from keras_vit.model.builder import encode_tokens

    arguments = {**dict(num_heads=4, mlp_dim=64, num_layers=1), **kwargs}
    with pytest.raises(ValueError, match=message):
        encode_tokens(keras.Input((4, 32)), **arguments)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_b10_mixed_precision_runs_and_fits_with_xla(tiny_vit_kwargs, policy):
    """Mixed precision: variables float32, activations in the compute dtype, logits float32.

    Logits of random weights (head included) are compared with a float32 model holding the
    same weights, within MIXED_TOLERANCE (tests/output_checks.py).
    """
    mixed, reference = mixed_and_float32_models(
        lambda: keras_vit.ViT(**tiny_vit_kwargs), policy, seed=5
    )
    assert all(w.dtype == "float32" for w in mixed.weights)
    assert mixed.get_layer("encoderblock_0").output.dtype == policy.split("_")[1]
    x = random_images(np.random.default_rng(6), 4, 32, 32)
    logits = mixed(x)
    assert logits.dtype == "float32"
    assert_close_to_float32(logits, reference(x), policy)
    mixed.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    history = mixed.fit(x, np.arange(4), epochs=1, batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_b30_xla_fit_and_input_gradient(tiny_vit_kwargs):
    """B30: patch embedding compiles under XLA in training, including the input gradient.

    The XLA input gradient of a labelled loss (random weights, head included) equals the
    eager one, and is not zero.
    """
    import tensorflow as tf

    model = randomize_weights(keras_vit.ViT(**tiny_vit_kwargs), seed=8)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer="sgd", loss=loss_fn, jit_compile=True)
    x = random_images(np.random.default_rng(7), 2, 32, 32)
    labels = np.array([1, 2])
    model.fit(x, labels, epochs=1, verbose=0)

    def input_gradient(images):
        with tf.GradientTape() as tape:
            tape.watch(images)
            loss = loss_fn(labels, model(images, training=True))
        return tape.gradient(loss, images)

    eager = input_gradient(tf.constant(x))
    compiled = tf.function(input_gradient, jit_compile=True)(tf.constant(x))
    assert compiled.shape == x.shape
    assert_outputs_close(compiled, eager, rtol=1e-4, atol=1e-6, what="input gradient")


def test_b16_image_size_not_divisible_by_patch():
    """B16: a clear ValueError at build time naming image size, patch size and the rule."""
    with pytest.raises(
        ValueError, match=r"\(220, 220\) is not divisible by the patch size \(16, 16\)"
    ):
        keras_vit.ViT_B16(image_size=(220, 220))


def test_b16_model_called_on_other_size(tiny_vit_kwargs):
    model = keras_vit.ViT(**tiny_vit_kwargs)
    for size in (36, 40):
        with pytest.raises(ValueError, match=r"expected shape=\(None, 32, 32, 3\)"):
            model(np.zeros((1, size, size, 3), np.float32))


@pytest.mark.parametrize(
    "override, message",
    [
        (dict(hidden_dim=30), r"hidden_dim=30, num_heads=4"),
        (dict(pooling="max"), r"pooling.*'max'"),
        (dict(num_classes=0), r"num_classes=0"),
        (dict(image_size=-32), r"image_size=-32"),
        (dict(num_layers=0), r"num_layers=0"),
        (dict(channels=0), r"channels=0"),
        (dict(dropout_rate=1.0), r"dropout_rate=1.0"),
        (dict(include_top=True, return_sequence=True), "return_sequence"),
        (dict(final_norm="pool"), r"final_norm.*'pool'"),
        (dict(final_norm="pooled", pooling="map"), r"final_norm='pooled'.*pooling='map'"),
        (
            dict(final_norm="pooled", include_top=False, return_sequence=True),
            r"final_norm='pooled'.*return_sequence=True",
        ),
    ],
)
def test_bad_arguments_raise_before_building(tiny_vit_kwargs, override, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.ViT(**{**tiny_vit_kwargs, **override})


def test_channels_mismatch_is_a_clear_error(tiny_vit_kwargs):
    model = keras_vit.ViT(**tiny_vit_kwargs, channels=1)
    with pytest.raises(ValueError, match="built for 1 channels"):
        model(np.zeros((1, 32, 32, 3), np.float32))


def test_named_builder_uses_table_and_accepts_overrides():
    model = keras_vit.ViT_Ti16(num_classes=5, image_size=(32, 48), num_layers=1)
    assert model.name == "vit_ti16"
    assert model.output.shape == (None, 5)
    block = model.get_layer("encoderblock_0")
    assert (block.num_heads, block.mlp_dim) == (3, 768)
    assert model.get_layer("embedding").hidden_dim == 192


def test_release_initialisers(tiny_vit_kwargs):
    model = keras_vit.ViT(**{**tiny_vit_kwargs, "hidden_dim": 64, "mlp_dim": 256})
    np.testing.assert_array_equal(model.get_layer("cls").cls, 0)
    np.testing.assert_array_equal(model.get_layer("head").kernel, 0)
    np.testing.assert_array_equal(model.get_layer("head").bias, 0)
    np.testing.assert_array_equal(model.get_layer("embedding").conv.bias, 0)
    mlp_bias = np.asarray(model.get_layer("encoderblock_0").mlp.dense_0.bias)
    assert 0 < np.abs(mlp_bias).max() < 1e-5


def test_preprocess_inputs_maps_to_minus_one_one():
    """B33: 0 -> -1, 127.5 -> 0, 255 -> 1 exactly."""
    out = np.asarray(keras_vit.preprocess_inputs(np.array([0.0, 127.5, 255.0])))
    np.testing.assert_array_equal(out, [-1.0, 0.0, 1.0])
    assert np.asarray(keras_vit.preprocess_inputs(np.array([0, 255], np.uint8))).dtype == np.float32


def test_image_shape_of_fixed_and_dynamic_models():
    """The fixed input size, or a dynamic model's position-table size; ValueError without."""
    from keras_vit.model.vit import image_shape_of

    kwargs = dict(patch_size=8, hidden_dim=16, num_heads=2, mlp_dim=32, num_layers=1)
    fixed = keras_vit.ViT(image_size=16, channels=1, num_classes=3, **kwargs)
    dynamic = keras_vit.ViT(image_size=(16, 24), num_classes=3, dynamic_image_size=True, **kwargs)
    assert image_shape_of(fixed) == (16, 16, 1)
    assert image_shape_of(dynamic) == (16, 24, 3)
    no_table = keras.Model(dynamic.inputs, dynamic.inputs[0])
    with pytest.raises(ValueError, match="no fixed size"):
        image_shape_of(no_table)


@pytest.mark.parametrize("builder", ["ViT", "HybridViT"])
def test_one_class_head_is_refused_naming_both_working_spellings(builder):
    """num_classes=1 built a head whose softmax is 1.0 for every image."""
    kwargs = dict(
        image_size=16,
        patch_size=8,
        hidden_dim=16,
        num_heads=2,
        mlp_dim=32,
        num_layers=1,
        num_classes=1,
    )
    if builder == "HybridViT":
        kwargs.update(resnet_stages=(1,), patch_size=1)
    with pytest.raises(ValueError, match="num_classes=2") as info:
        getattr(keras_vit, builder)(**kwargs)
    assert "sigmoid" in str(info.value) and "num_classes=1" in str(info.value)
    headless = getattr(keras_vit, builder)(**{**kwargs, "include_top": False})
    assert headless.output.shape[-1] == 16
