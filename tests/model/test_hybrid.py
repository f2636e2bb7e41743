"""Hybrid ResNet + ViT builders (paper section 3.1 "Hybrid Architecture").

Expected numbers come from vit_facts.md section 1 (parameter counts, hybrid table) and
section 3 (official key names, shapes and counts); the official key set is constructed here
from those rules, independently of keras_vit.checkpoints.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import keras_vit
from keras_vit import HybridViT
from keras_vit.checkpoints import CheckpointError, load_weights, save_npz
from keras_vit.layers import ZeroPaddedMaxPool
from keras_vit.model.finetune import finetune
from keras_vit.model.hybrid import _same_max_pool
from keras_vit.spec.configs import HYBRID_CONFIGS
from tests.numpy_reference import hybrid_forward
from tests.output_checks import (
    assert_close_to_float32,
    assert_outputs_close,
    mixed_and_float32_models,
    randomize_weights,
)

TINY_HYBRID = dict(
    resnet_stages=(1,),
    resnet_width=32,
    patch_size=2,
    hidden_dim=32,
    num_heads=4,
    mlp_dim=64,
    num_layers=2,
    image_size=32,
    num_classes=10,
)

# vit_facts.md section 1 (params) and section 3 (key counts), 224 x 224, 1000 classes.
PUBLISHED = {
    "R_Ti16": (6_337_704, 203, (1, 50, 192)),
    "R26_S32": (36_431_912, 287, (1, 50, 384)),
    "R26_B32": (101_383_976, 287, (1, 50, 768)),
    "R50_B16": (98_659_112, 356, (1, 197, 768)),
    "R50_L32": (328_994_856, 551, (1, 50, 1024)),
}


def official_hybrid_shapes(
    stages, *, hidden, mlp, heads, layers, patch, tokens, classes, root_width=64
):
    """Official checkpoint keys and shapes of a BiT-ResNet hybrid (vit_facts.md sections 2-3)."""
    shapes = {
        "conv_root/kernel": (7, 7, 3, root_width),
        "gn_root/scale": (root_width,),
        "gn_root/bias": (root_width,),
    }
    channels = root_width
    for s, units in enumerate(stages, start=1):
        width = root_width * 2 ** (s - 1)
        for u in range(1, units + 1):
            p = f"block{s}/unit{u}/"
            shapes[p + "conv1/kernel"] = (1, 1, channels, width)
            shapes[p + "conv2/kernel"] = (3, 3, width, width)
            shapes[p + "conv3/kernel"] = (1, 1, width, 4 * width)
            norms = {"gn1": width, "gn2": width, "gn3": 4 * width}
            if u == 1:
                shapes[p + "conv_proj/kernel"] = (1, 1, channels, 4 * width)
                norms["gn_proj"] = 4 * width
            for gn, size in norms.items():
                shapes[p + gn + "/scale"] = shapes[p + gn + "/bias"] = (size,)
            channels = 4 * width
    shapes["embedding/kernel"] = (patch, patch, channels, hidden)
    shapes["embedding/bias"] = (hidden,)
    shapes["cls"] = (1, 1, hidden)
    shapes["Transformer/posembed_input/pos_embedding"] = (1, tokens, hidden)
    hd = hidden // heads
    for i in range(layers):
        p = f"Transformer/encoderblock_{i}/"
        for norm in ("LayerNorm_0", "LayerNorm_2"):
            shapes[p + norm + "/scale"] = shapes[p + norm + "/bias"] = (hidden,)
        a = p + "MultiHeadDotProductAttention_1/"
        for qkv in ("query", "key", "value"):
            shapes[a + qkv + "/kernel"] = (hidden, heads, hd)
            shapes[a + qkv + "/bias"] = (heads, hd)
        shapes[a + "out/kernel"] = (heads, hd, hidden)
        shapes[a + "out/bias"] = (hidden,)
        shapes[p + "MlpBlock_3/Dense_0/kernel"] = (hidden, mlp)
        shapes[p + "MlpBlock_3/Dense_0/bias"] = (mlp,)
        shapes[p + "MlpBlock_3/Dense_1/kernel"] = (mlp, hidden)
        shapes[p + "MlpBlock_3/Dense_1/bias"] = (hidden,)
    shapes["Transformer/encoder_norm/scale"] = shapes["Transformer/encoder_norm/bias"] = (hidden,)
    shapes["head/kernel"] = (hidden, classes)
    shapes["head/bias"] = (classes,)
    return shapes


def r50_b16_official_shapes(tokens=197):
    return official_hybrid_shapes(
        (3, 4, 9), hidden=768, mlp=3072, heads=12, layers=12, patch=1, tokens=tokens, classes=1000
    )


def resnet_paths_as_official(model):
    """The brief's naming contract for the ResNet part: Keras path -> official key."""
    out = {}
    for w in model.weights:
        head, *rest = w.path.split("/")
        if head.startswith("block"):
            stage, unit = head.split("_")
            head = f"{stage}/{unit}"
        elif head not in ("conv_root", "gn_root"):
            continue
        leaf = {"gamma": "scale", "beta": "bias"}.get(rest[-1], rest[-1])
        out["/".join([head, *rest[:-1], leaf])] = tuple(w.shape)
    return out


@pytest.fixture(scope="module")
def r50_b16():
    """R50+B/16 at 224 / 1000 classes, built once: counts, key set, checkpoint tests."""
    return keras_vit.R50_B16()


@pytest.fixture(scope="module")
def r50_b16_checkpoint(r50_b16, tmp_path_factory):
    """`save_npz` of R50+B/16 with non-zero head and gn3 scales (so logits use every weight)."""
    rng = np.random.default_rng(7)
    for w in r50_b16.weights:
        if w.path.startswith("head/") or w.path.endswith("gn3/gamma"):
            w.assign(rng.normal(0.0, 0.05, w.shape))
    path = tmp_path_factory.mktemp("r50_b16") / "R50+ViT-B_16.npz"
    written = save_npz(r50_b16, path)
    return path, written


def named_model(name, r50_b16):
    if name == "R50_B16":
        return r50_b16
    return getattr(keras_vit, name)()


@pytest.fixture(scope="module")
def tiny_hybrid_images():
    return np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)


# ------------------------------------------------------------------ named variants


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_parameter_counts_weight_counts_and_token_tables(r50_b16, name):
    params, num_keys, pos_shape = PUBLISHED[name]
    model = named_model(name, r50_b16)
    assert model.count_params() == params
    assert len(model.weights) == num_keys
    assert tuple(model.get_layer("posembed_input").pos_embedding.shape) == pos_shape
    assert model.name == name.lower()
    assert model.input.name == "images"


def test_r50_b16_resnet_names_and_shapes_follow_the_release(r50_b16):
    """The ResNet weights map by the naming rule onto the official keys with official shapes."""
    model = r50_b16
    official = r50_b16_official_shapes()
    resnet = resnet_paths_as_official(model)
    expected = {
        k: v for k, v in official.items() if k.startswith(("conv_root", "gn_root", "block"))
    }
    assert resnet == expected
    assert len(official) == 356
    embedding = model.get_layer("embedding").conv
    assert tuple(embedding.kernel.shape) == official["embedding/kernel"] == (1, 1, 1024, 768)


def test_r_ti16_uses_8x8_patches_on_the_root_feature_map():
    model = keras_vit.R_Ti16()
    assert tuple(model.get_layer("embedding").conv.kernel.shape) == (8, 8, 64, 192)
    assert not any(layer.name.startswith("block") for layer in model.layers)
    assert tuple(model.get_layer("pool_root").output.shape) == (None, 56, 56, 64)


def test_config_table_matches_the_release():
    assert set(HYBRID_CONFIGS) == {"R+Ti/16", "R26+S/32", "R26+B/32", "R50+B/16", "R50+L/32"}
    r50 = HYBRID_CONFIGS["R50+B/16"].as_kwargs()
    assert r50["resnet_stages"] == (3, 4, 9)
    assert (r50["hidden_dim"], r50["num_layers"], r50["dropout_rate"]) == (768, 12, 0.1)
    assert HYBRID_CONFIGS["R50+L/32"].as_kwargs()["resnet_stages"] == (3, 4, 6, 3)
    assert HYBRID_CONFIGS["R+Ti/16"].as_kwargs()["patch_size"] == 8


# ------------------------------------------------------------------ any image size


def test_non_square_320x224_input_runs(tmp_path):
    """Random weights (head included) against the NumPy hybrid on the 20 x 14 token grid."""
    model = keras_vit.R50_B16(
        image_size=(320, 224), num_layers=1, hidden_dim=64, num_heads=4, mlp_dim=64
    )
    assert model.get_layer("embedding").grid_size == (20, 14)
    assert tuple(model.get_layer("posembed_input").pos_embedding.shape) == (1, 281, 64)
    randomize_weights(model, seed=3)
    images = np.random.default_rng(0).uniform(-1, 1, (2, 320, 224, 3)).astype(np.float32)
    logits = np.asarray(model(images))
    assert logits.shape == (2, 1000)
    save_npz(model, tmp_path / "r50.npz")
    with np.load(tmp_path / "r50.npz", allow_pickle=False) as archive:
        params = dict(archive)
    expected = hybrid_forward(params, images, num_heads=4)
    assert_outputs_close(logits, expected, atol=1e-4 * np.abs(expected).max())


def test_feature_map_not_divisible_by_patch_is_rejected():
    # R+Ti/16 at 200: root gives 50 x 50, not a multiple of the 8 x 8 patch.
    with pytest.raises(ValueError, match=r"feature map of \(50, 50\).*patch size \(8, 8\)"):
        keras_vit.R_Ti16(image_size=200)


# ------------------------------------------------------------------ common arguments


def test_tiny_hybrid_common_arguments():
    base = {k: v for k, v in TINY_HYBRID.items() if k != "num_classes"}
    gap = HybridViT(**base, pooling="gap", num_classes=3, representation_size=16)
    assert "cls" not in [layer.name for layer in gap.layers]
    assert tuple(gap.output.shape) == (None, 3)
    assert gap.get_layer("pre_logits").units == 16
    features = HybridViT(**base, include_top=False)
    assert tuple(features.output.shape) == (None, 32)
    sequence = HybridViT(**base, include_top=False, return_sequence=True)
    assert tuple(sequence.output.shape) == (None, 17, 32)  # 4x4 grid + class token
    probs = HybridViT(**base, classifier_activation="softmax", channels=1)
    out = probs(np.zeros((1, 32, 32, 1), np.float32))
    np.testing.assert_allclose(np.asarray(out).sum(), 1.0, rtol=1e-5)
    rated = HybridViT(**TINY_HYBRID, dropout_rate=0.1, drop_path_rate=0.2, name="mine")
    assert rated.name == "mine"
    assert rated.get_layer("encoderblock_1").drop_path_rate == pytest.approx(0.2)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(resnet_stages=(3, 0)), "resnet_stages"),
        (dict(resnet_stages=3), "resnet_stages"),
        (dict(resnet_width=48), "divisible by `resnet_groups`"),
        (dict(hidden_dim=30), "divisible by num_heads"),
        (dict(pooling="max"), "pooling"),
        (dict(dropout_rate=1.0), "dropout_rate"),
        (dict(image_size=(32, 0)), "image_size"),
        (dict(backbone="resnet50"), "backbone"),
    ],
)
def test_bad_arguments_raise_before_building(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HybridViT(**{**TINY_HYBRID, **kwargs})


# ------------------------------------------------------------------ saving, precision


def test_tiny_hybrid_keras_round_trip_safe_mode(tmp_path, tiny_hybrid_images):
    model = HybridViT(**TINY_HYBRID)
    rng = np.random.default_rng(2)
    for w in model.weights:  # non-zero head and gn3 so the output depends on every weight
        w.assign(rng.normal(0, 0.05, w.shape) + np.asarray(w))
    expected = np.asarray(model(tiny_hybrid_images))
    path = tmp_path / "hybrid.keras"
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    np.testing.assert_allclose(np.asarray(loaded(tiny_hybrid_images)), expected, atol=1e-6)
    assert [w.path for w in loaded.weights] == [w.path for w in model.weights]


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_float16_tiny_hybrid(tiny_hybrid_images, policy):
    """Random weights under the mixed policy against a float32 twin (MIXED_TOLERANCE)."""
    model, reference = mixed_and_float32_models(lambda: HybridViT(**TINY_HYBRID), policy, seed=6)
    logits = model(tiny_hybrid_images)
    assert logits.dtype == "float32"
    assert all(w.dtype == "float32" for w in model.weights)
    assert model.get_layer("block1_unit1").compute_dtype == policy.split("_")[1]
    assert_close_to_float32(logits, reference(tiny_hybrid_images), policy)


# ------------------------------------------------------------------ any Keras CNN


@pytest.fixture(scope="module")
def resnet50_stem():
    """keras.applications.ResNet50 cut after its first stage (stride 4, 256 channels)."""
    base = keras.applications.ResNet50(include_top=False, weights=None, input_shape=(64, 64, 3))
    return keras.Model(base.input, base.get_layer("conv2_block3_out").output, name="r50_stem")


def test_backbone_hybrid_trains_and_round_trips(tmp_path, resnet50_stem):
    backbone = resnet50_stem
    model = HybridViT(
        backbone=backbone,
        patch_size=4,
        hidden_dim=32,
        num_heads=4,
        mlp_dim=64,
        num_layers=1,
        image_size=64,
        num_classes=5,
    )
    assert model.get_layer("embedding").grid_size == (4, 4)
    assert tuple(model.get_layer("embedding").conv.kernel.shape) == (4, 4, 256, 32)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (4, 64, 64, 3)).astype(np.float32)
    y = np.arange(4) % 5
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(True))
    before = np.asarray(model.get_layer("head").kernel).copy()
    history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert not np.array_equal(before, np.asarray(model.get_layer("head").kernel))
    expected = model.predict(x, verbose=0)
    path = tmp_path / "backbone_hybrid.keras"
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), expected, atol=1e-5)


def test_backbone_errors(resnet50_stem, tmp_path):
    stem = resnet50_stem
    args = dict(hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=1, num_classes=5)
    with pytest.raises(ValueError, match="either `backbone`"):
        HybridViT(backbone=stem, resnet_stages=(1,), image_size=64, **args)
    with pytest.raises(ValueError, match="height 96 != 64"):
        HybridViT(backbone=stem, image_size=96, **args)
    flat = keras.Sequential([keras.Input((64, 64, 3)), keras.layers.GlobalAveragePooling2D()])
    with pytest.raises(ValueError, match="feature map"):
        HybridViT(backbone=flat, image_size=64, **args)
    hybrid = HybridViT(backbone=stem, image_size=64, patch_size=4, **args)
    with pytest.raises(CheckpointError, match="no official key"):
        save_npz(hybrid, tmp_path / "unused.npz")  # the CNN's own weights have no release names


# ------------------------------------------------------------------ official checkpoints


def test_save_npz_writes_the_official_r50_b16_key_set(r50_b16_checkpoint):
    path, written = r50_b16_checkpoint
    expected = r50_b16_official_shapes()
    assert len(expected) == 356
    assert written.shapes == expected
    with np.load(path, allow_pickle=False) as archive:
        on_disk = {key: archive[key].shape for key in archive.files}
        assert archive["block3/unit9/gn3/scale"].dtype == np.float32
    assert on_disk == expected


def test_npz_round_trip_gives_identical_logits(r50_b16, r50_b16_checkpoint):
    path, _ = r50_b16_checkpoint
    images = np.random.default_rng(8).uniform(-1, 1, (1, 224, 224, 3)).astype(np.float32)
    expected = np.asarray(r50_b16(images))
    assert np.abs(expected).max() > 0
    fresh = keras_vit.R50_B16(weights=path)
    np.testing.assert_array_equal(np.asarray(fresh(images)), expected)
    conv = "block3_unit9/conv2/kernel"
    np.testing.assert_array_equal(
        *[next(w for w in m.weights if w.path == conv).numpy() for m in (fresh, r50_b16)]
    )


def corner_aligned_resize(grid, new):
    """The release's scipy.ndimage.zoom(order=1) on a (g, g, D) grid."""
    from scipy import ndimage

    factor = (new / grid.shape[0], new / grid.shape[1], 1)
    return ndimage.zoom(grid, factor, order=1)


def test_r50_b16_at_384_has_a_24x24_grid_and_loads_a_224_checkpoint(r50_b16, r50_b16_checkpoint):
    path, _ = r50_b16_checkpoint
    model = keras_vit.R50_B16(image_size=384)
    assert model.get_layer("embedding").grid_size == (24, 24)
    assert tuple(model.get_layer("block3_unit9").output.shape) == (None, 24, 24, 1024)
    assert tuple(model.get_layer("embedding").output.shape) == (None, 576, 768)
    report = load_weights(model, path)
    assert report.resized_grid == ((14, 14), (24, 24))
    table = np.asarray(model.get_layer("posembed_input").pos_embedding)
    source = np.asarray(r50_b16.get_layer("posembed_input").pos_embedding)
    assert table.shape == (1, 577, 768)
    np.testing.assert_array_equal(table[0, 0], source[0, 0])  # class-token row kept
    expected = corner_aligned_resize(source[0, 1:].reshape(14, 14, 768), 24)
    np.testing.assert_allclose(table[0, 1:].reshape(24, 24, 768), expected, atol=1e-5)
    root = model.get_layer("conv_root").kernel.numpy()
    np.testing.assert_array_equal(root, r50_b16.get_layer("conv_root").kernel.numpy())


def test_tiny_hybrid_npz_round_trip(tmp_path, tiny_hybrid_images):
    rng = np.random.default_rng(4)
    model = HybridViT(**TINY_HYBRID)
    for w in model.weights:
        w.assign(rng.normal(0, 0.05, w.shape) + np.asarray(w))
    path = tmp_path / "tiny.npz"
    written = save_npz(model, path)
    assert "block1/unit1/conv_proj/kernel" in written and "gn_root/scale" in written
    other = HybridViT(**TINY_HYBRID)
    load_weights(other, path)
    np.testing.assert_array_equal(
        np.asarray(other(tiny_hybrid_images)), np.asarray(model(tiny_hybrid_images))
    )


def test_an_official_layout_hybrid_file_gives_the_numpy_logits(tmp_path, tiny_hybrid_images):
    """A file built here from the official key names (no keras_vit code) against NumPy.

    Loading it must put each array where the BiT equations use it: swapping two keys of the
    same shape (gn1/gn2, conv3/conv_proj) changes the logits. save_npz must write it back
    unchanged.
    """
    shapes = official_hybrid_shapes(
        (1,), hidden=32, mlp=64, heads=4, layers=2, patch=2, tokens=17, classes=10, root_width=32
    )
    rng = np.random.default_rng(12)
    params = {
        key: (rng.normal(0.0, 0.3, shape) + key.endswith("/scale")).astype(np.float32)
        for key, shape in shapes.items()
    }
    path = tmp_path / "official_hybrid.npz"
    np.savez(path, **params)
    model = HybridViT(**TINY_HYBRID)
    load_weights(model, path)
    expected = hybrid_forward(params, tiny_hybrid_images, num_heads=4)
    assert_outputs_close(model.predict(tiny_hybrid_images, verbose=0), expected, atol=1e-4)
    assert save_npz(model, tmp_path / "again.npz").shapes == shapes
    with np.load(tmp_path / "again.npz", allow_pickle=False) as again:
        for key, value in params.items():
            np.testing.assert_array_equal(again[key], value, err_msg=key)


def test_finetune_a_hybrid_to_a_new_size_and_task(tiny_hybrid_images):
    rng = np.random.default_rng(5)
    model = HybridViT(**TINY_HYBRID)
    for w in model.weights:
        w.assign(rng.normal(0, 0.05, w.shape) + np.asarray(w))
    tuned = finetune(model, num_classes=3, image_size=64)
    assert tuned.get_layer("embedding").grid_size == (8, 8)
    head = tuned.get_layer("head")
    assert tuple(head.kernel.shape) == (32, 3)
    np.testing.assert_array_equal(head.kernel.numpy(), 0.0)
    for name in ("conv_root", "gn_root", "block1_unit1", "embedding", "encoderblock_1"):
        for new, old in zip(
            tuned.get_layer(name).weights, model.get_layer(name).weights, strict=True
        ):
            np.testing.assert_array_equal(new.numpy(), old.numpy())
    table = tuned.get_layer("posembed_input").pos_embedding.numpy()
    source = model.get_layer("posembed_input").pos_embedding.numpy()
    assert table.shape == (1, 65, 32)
    np.testing.assert_array_equal(table[0, 0], source[0, 0])
    expected = corner_aligned_resize(source[0, 1:].reshape(4, 4, 32), 8)
    np.testing.assert_allclose(table[0, 1:].reshape(8, 8, 32), expected, atol=1e-5)
    images = np.random.default_rng(6).uniform(-1, 1, (2, 64, 64, 3)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(tuned(images)), 0.0)  # zero head


@settings(max_examples=25, deadline=None)
@given(height=st.integers(3, 21), width=st.integers(3, 21), channels=st.integers(1, 4))
def test_the_root_pool_equals_keras_same_max_pool_on_relu_outputs(height, width, channels):
    """The root's zero-padded "valid" pool against Keras' own 3x3/2 "same" MaxPooling2D
    (which PyTorch's backend pads by replication), on odd and even sizes: the same values."""
    rng = np.random.default_rng(height * 100 + width * 10 + channels)
    x = np.maximum(rng.normal(size=(2, height, width, channels)), 0).astype("float32")
    expected = keras.layers.MaxPooling2D(3, strides=2, padding="same")(x)
    pooled = _same_max_pool(keras.ops.convert_to_tensor(x), explicit=True)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(pooled), np.asarray(expected))


def test_the_root_pool_pads_explicitly_on_pytorch_alone():
    """The zero-padded form is PyTorch's (torch.compile); other backends keep Keras' "same"
    pool and the graph `.keras` files saved before hold."""
    model = HybridViT(image_size=32, patch_size=1, hidden_dim=16, num_heads=2, mlp_dim=16,
                      num_layers=1, num_classes=3, resnet_stages=(1,))  # fmt: skip
    pool = model.get_layer("pool_root")
    assert isinstance(pool, ZeroPaddedMaxPool) is (keras.backend.backend() == "torch")


def test_one_zero_padded_pool_follows_each_inputs_parity():
    """The pads come from each call's size, so a model rebuilt at another size (finetune's
    clone of the layer config) pools as Keras' "same" pool does: 8x8 and 9x11 through one
    layer, and its config round trip."""
    layer = ZeroPaddedMaxPool(3, strides=2)
    clone = ZeroPaddedMaxPool.from_config(layer.get_config())
    rng = np.random.default_rng(0)
    for shape in ((2, 8, 8, 3), (2, 9, 11, 3), (1, 1, 2, 1)):
        x = np.maximum(rng.normal(size=shape), 0).astype("float32")
        expected = np.asarray(keras.layers.MaxPooling2D(3, strides=2, padding="same")(x))
        for pool in (layer, clone):
            got = keras.ops.convert_to_numpy(pool(keras.ops.convert_to_tensor(x)))
            np.testing.assert_array_equal(got, expected)
            assert pool.compute_output_shape(shape) == expected.shape
