"""load_weights / save_npz against the official layout (vit_facts.md section 3) and the NumPy
reference forward pass (tests/numpy_reference.py), plus user-report rows B22-B24, B26, B28,
B29, B30, B32, B33."""

from __future__ import annotations

import logging
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import WeightsWarning
from keras_vit.checkpoints import CheckpointError, load_weights, save_npz
from tests.numpy_reference import random_official_params, vit_forward

POS = "Transformer/posembed_input/pos_embedding"
TINY_ARCH = dict(patch_size=8, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2)


def _tiny_params(seed=0, image_size=32, **overrides):
    rng = np.random.default_rng(seed)
    kwargs = dict(image_size=image_size, channels=3, num_classes=10, **TINY_ARCH)
    kwargs.update(overrides)
    return random_official_params(rng, **kwargs)


def _write(tmp_path, params, name="ckpt.npz"):
    path = tmp_path / name
    np.savez(path, **params)  # written by the test itself, not by save_npz
    return path


def _images(seed, height=32, width=32, batch=2):
    return np.random.default_rng(seed).uniform(-1, 1, (batch, height, width, 3)).astype("float32")


def _keras_vit_logs(caplog):
    return [r for r in caplog.records if r.name.startswith("keras_vit")]


# --- B/16: the official key table (vit_facts.md section 3), built here independently ----


def _official_b16_table():
    d, heads, hd, mlp = 768, 12, 64, 3072
    table = {
        "embedding/kernel": (16, 16, 3, d),
        "embedding/bias": (d,),
        "cls": (1, 1, d),
        POS: (1, 197, d),
        "Transformer/encoder_norm/scale": (d,),
        "Transformer/encoder_norm/bias": (d,),
        "head/kernel": (d, 1000),
        "head/bias": (1000,),
    }
    for i in range(12):
        block = f"Transformer/encoderblock_{i}/"
        for norm in ("LayerNorm_0", "LayerNorm_2"):
            table[f"{block}{norm}/scale"] = (d,)
            table[f"{block}{norm}/bias"] = (d,)
        attention = block + "MultiHeadDotProductAttention_1/"
        for name in ("query", "key", "value"):
            table[f"{attention}{name}/kernel"] = (d, heads, hd)
            table[f"{attention}{name}/bias"] = (heads, hd)
        table[attention + "out/kernel"] = (heads, hd, d)
        table[attention + "out/bias"] = (d,)
        table[block + "MlpBlock_3/Dense_0/kernel"] = (d, mlp)
        table[block + "MlpBlock_3/Dense_0/bias"] = (mlp,)
        table[block + "MlpBlock_3/Dense_1/kernel"] = (mlp, d)
        table[block + "MlpBlock_3/Dense_1/bias"] = (d,)
    return table


@pytest.fixture(scope="module")
def b16_file(tmp_path_factory):
    """A B/16 checkpoint at 224 with random arrays under the official keys."""
    rng = np.random.default_rng(16)
    params = {
        key: rng.standard_normal(shape, dtype=np.float32)
        for key, shape in _official_b16_table().items()
    }
    path = tmp_path_factory.mktemp("b16") / "ViT-B_16.npz"
    np.savez(path, **params)
    return path, params


def test_b16_load_then_save_gives_the_official_200_key_table(b16_file, tmp_path):
    path, params = b16_file
    model = keras_vit.ViT_B16()
    report = load_weights(model, path)
    assert len(report.loaded) == 200
    out = tmp_path / "saved.npz"
    saved = save_npz(model, out)
    expected = _official_b16_table()
    assert len(expected) == 200
    assert saved.shapes == expected
    assert repr(saved) == f"SaveReport(path={str(out)!r}, arrays=200, parameters=86,567,656)"
    with np.load(out, allow_pickle=False) as saved:
        assert set(saved.files) == set(expected)
        for key in expected:
            assert saved[key].dtype == np.float32
            np.testing.assert_array_equal(saved[key], params[key])
    assert keras_vit.checkpoints.base.architecture.release_model_name(model) == "ViT-B_16"


def test_b22_224_checkpoint_loads_into_384_model(b16_file):
    """B22: pos table (1,197,768) -> ViT_B16(image_size=384): (1,577,768), class row intact."""
    path, params = b16_file
    model = keras_vit.ViT_B16(image_size=384)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = load_weights(model, path)
    table = model.get_layer("posembed_input").pos_embedding.numpy()
    assert table.shape == (1, 577, 768)
    np.testing.assert_array_equal(table[0, 0], params[POS][0, 0])
    assert report.resized_grid == ((14, 14), (24, 24))
    messages = [str(w.message) for w in caught if issubclass(w.category, WeightsWarning)]
    assert len(messages) == 1 and "14x14 -> 24x24" in messages[0]
    assert caught[0].filename == __file__  # attributed to the caller's line


def test_b24_224_checkpoint_into_non_square_model(b16_file):
    """B24: ViT_B16(image_size=(224, 320)) + 224x224 checkpoint; call on (2, 224, 320, 3)."""
    path, params = b16_file
    model = keras_vit.ViT_B16(num_classes=1000, image_size=(224, 320))
    load_weights(model, path)
    assert tuple(model.get_layer("posembed_input").pos_embedding.shape) == (1, 1 + 14 * 20, 768)
    out = model(_images(1, 224, 320), training=False)
    assert tuple(out.shape) == (2, 1000)
    assert np.isfinite(np.asarray(out)).all()


# --- independent check on a tiny official-layout file -------------------------------------


@pytest.mark.parametrize("pooling", ["token", "gap"])
def test_tiny_official_file_matches_numpy_reference(tmp_path, pooling):
    params = _tiny_params(pooling=pooling)
    path = _write(tmp_path, params)
    model = keras_vit.ViT(image_size=32, num_classes=10, pooling=pooling, **TINY_ARCH)
    load_weights(model, path)
    x = _images(1)
    expected = vit_forward(params, x, num_heads=4, pooling=pooling)
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-4)


def test_save_then_load_round_trip_gives_identical_logits(tmp_path):
    source = keras_vit.ViT(image_size=32, num_classes=10, representation_size=16, **TINY_ARCH)
    rng = np.random.default_rng(4)
    for variable in source.weights:
        variable.assign(rng.standard_normal(variable.shape).astype("float32") * 0.1)
    path = tmp_path / "roundtrip.npz"
    save_npz(source, path)
    target = keras_vit.ViT(image_size=32, num_classes=10, representation_size=16, **TINY_ARCH)
    load_weights(target, path)
    x = _images(2)
    np.testing.assert_array_equal(source.predict(x, verbose=0), target.predict(x, verbose=0))
    # and the saved arrays are what the reference expects under official names
    with np.load(path, allow_pickle=False) as saved:
        params = {k: saved[k] for k in saved.files}
    np.testing.assert_allclose(
        source.predict(x, verbose=0), vit_forward(params, x, num_heads=4), atol=1e-4
    )


def test_vit_nested_in_another_model_saves_and_loads(tmp_path):
    params = _tiny_params(seed=3)
    path = _write(tmp_path, params)
    inner = keras_vit.ViT(image_size=32, num_classes=10, **TINY_ARCH)
    images = keras.Input((32, 32, 3))
    outer = keras.Model(images, keras.layers.Softmax(name="probs")(inner(images)), name="outer")
    load_weights(outer, path)
    x = _images(5)
    expected = vit_forward(params, x, num_heads=4)
    np.testing.assert_allclose(inner.predict(x, verbose=0), expected, atol=1e-4)
    saved = save_npz(outer, tmp_path / "nested.npz")
    assert saved.shapes == {key: value.shape for key, value in params.items()}


# --- strictness and clear errors ----------------------------------------------------------


def test_missing_key_error_names_the_key_and_loads_nothing(tmp_path):
    params = _tiny_params()
    del params["Transformer/encoderblock_1/MlpBlock_3/Dense_0/bias"]
    path = _write(tmp_path, params)
    model = keras_vit.ViT(image_size=32, num_classes=10, **TINY_ARCH)
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(CheckpointError, match="encoderblock_1/MlpBlock_3/Dense_0/bias"):
        load_weights(model, path)
    for old, variable in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(old, variable.numpy())


def test_wrong_model_file_lists_mismatched_and_unexpected_keys(tmp_path):
    """A bigger model's file (wider, deeper: like L/16 into B/16) gives one clear error."""
    params = _tiny_params(hidden_dim=48, num_heads=4, num_layers=3, patch_size=8, mlp_dim=64)
    path = _write(tmp_path, params)
    model = keras_vit.ViT(image_size=32, num_classes=10, **TINY_ARCH)
    with pytest.raises(CheckpointError) as info:
        load_weights(model, path)
    message = str(info.value)
    assert "unexpected in the file" in message and "encoderblock_2" in message
    assert "shape mismatch" in message
    assert "embedding/kernel: file (8, 8, 3, 48) vs model (8, 8, 3, 32)" in message


def test_unexpected_key_error_and_non_strict_load(tmp_path):
    params = _tiny_params()
    params["extra/kernel"] = np.zeros(3, np.float32)
    path = _write(tmp_path, params)
    model = keras_vit.ViT(image_size=32, num_classes=10, **TINY_ARCH)
    with pytest.raises(CheckpointError, match="extra/kernel"):
        load_weights(model, path)
    with pytest.warns(WeightsWarning, match="(?s)partially.*extra/kernel"):
        report = load_weights(model, path, strict=False)
    assert report.unexpected == ["extra/kernel"]
    x = _images(0)
    np.testing.assert_allclose(
        model.predict(x, verbose=0), vit_forward(params, x, num_heads=4), atol=1e-4
    )


def test_head_options(tmp_path):
    params = _tiny_params(num_classes=21)
    path = _write(tmp_path, params)
    model = keras_vit.ViT(image_size=32, num_classes=10, **TINY_ARCH)
    with pytest.raises(CheckpointError, match=r"head/kernel: file \(32, 21\) vs model \(32, 10\)"):
        load_weights(model, path)
    report = load_weights(model, path, head="auto")
    assert set(report.skipped) == {"head/kernel", "head/bias"}
    assert not model.get_layer("head").kernel.numpy().any()
    report = load_weights(model, path, skip=("head",))
    assert "head/bias" in report.skipped
    same = keras_vit.ViT(image_size=32, num_classes=21, **TINY_ARCH)
    load_weights(same, path, head="auto")
    np.testing.assert_array_equal(same.get_layer("head").kernel.numpy(), params["head/kernel"])
    with pytest.raises(ValueError, match="head"):
        load_weights(same, path, head="maybe")
    # weights= uses head="auto": a headless model, and a headless file, both load the body
    features = keras_vit.ViT(image_size=32, include_top=False, **TINY_ARCH)
    assert "head/kernel" in load_weights(features, path, head="auto").skipped
    headless = _write(tmp_path, {k: v for k, v in params.items() if "head" not in k}, "body.npz")
    report = load_weights(model, headless, head="auto")
    assert report.missing == [] and "cls" in report.loaded


def test_gap_model_refuses_a_class_token_file(tmp_path):
    """The class-token decision comes from the model: a token file into a gap model fails."""
    path = _write(tmp_path, _tiny_params(pooling="token"))
    model = keras_vit.ViT(image_size=32, num_classes=10, pooling="gap", **TINY_ARCH)
    with pytest.raises(CheckpointError) as info:
        load_weights(model, path)
    assert "unexpected in the file (1): cls" in str(info.value)
    assert "not a square grid" in str(info.value)


# --- user-report rows -------------------------------------------------------------------


def test_b23_no_message_when_grids_match_one_when_they_differ(tmp_path, caplog):
    """B23: same grid -> nothing said; other grid -> exactly one 'old -> new' warning."""
    path = _write(tmp_path, _tiny_params())
    same = keras_vit.ViT(image_size=32, num_classes=10, **TINY_ARCH)
    with caplog.at_level(logging.DEBUG, logger="keras_vit"), warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the load
        load_weights(same, path)
    assert [r for r in _keras_vit_logs(caplog) if r.levelno >= logging.INFO] == []
    bigger = keras_vit.ViT(image_size=(32, 48), num_classes=10, **TINY_ARCH)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_weights(bigger, path)
    assert [w.category for w in caught] == [WeightsWarning]
    assert "4x4 -> 4x6" in str(caught[0].message)


def test_b26_loading_under_mixed_bfloat16_resizes_in_float32(tmp_path):
    """B26: with patch 16, target grid 14x30 under mixed_bfloat16: float32 table, 1+h*w rows."""
    keras.config.set_dtype_policy("mixed_bfloat16")
    params = _tiny_params(image_size=224, patch_size=16)
    path = _write(tmp_path, params)
    arch = {**TINY_ARCH, "patch_size": 16}
    model = keras_vit.ViT(image_size=(224, 480), num_classes=10, **arch)
    load_weights(model, path)
    variable = model.get_layer("posembed_input").pos_embedding
    assert variable.dtype == "float32" and tuple(variable.shape) == (1, 1 + 14 * 30, 32)
    import scipy.ndimage

    grid = params[POS][0, 1:].reshape(14, 14, 32)
    zoomed = scipy.ndimage.zoom(grid.astype(np.float64), (1, 30 / 14, 1), order=1)
    np.testing.assert_allclose(variable.numpy()[0, 1:], zoomed.reshape(-1, 32), atol=1e-6)


def _resized_tiny_model(tmp_path):
    """A 64-px tiny model loaded from a 32-px checkpoint (interpolated once at load time)."""
    path = _write(tmp_path, _tiny_params())
    model = keras_vit.ViT(image_size=64, num_classes=10, **TINY_ARCH)
    load_weights(model, path)
    return model


def test_b28_interpolated_model_fits_evaluates_and_predicts(tmp_path):
    """B28: 64-px model from a 32-px checkpoint: fit 1 step (batch 2), evaluate, predict."""
    model = _resized_tiny_model(tmp_path)
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    x, y = _images(2, 64, 64), np.array([1, 3])
    history = model.fit(x, y, batch_size=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    loss, accuracy = model.evaluate(x, y, verbose=0)
    assert np.isfinite(loss) and 0 <= accuracy <= 1
    assert model.predict(x, verbose=0).shape == (2, 10)


def test_b29_b30_interpolated_model_trains_under_xla(tmp_path):
    """B29: interpolation happens once at load time, so `compile(jit_compile=True)` + `fit`
    work on the resized model. B30: the patch embedding (a strided conv) compiles under XLA
    in training, and d(logits)/d(images) compiles under `tf.function(jit_compile=True)`."""
    model = _resized_tiny_model(tmp_path)
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    before = model.get_layer("posembed_input").pos_embedding.numpy().copy()
    history = model.fit(_images(3, 64, 64), np.array([0, 9]), batch_size=2, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert not np.array_equal(before, model.get_layer("posembed_input").pos_embedding.numpy())

    @tf.function(jit_compile=True)
    def input_gradient(images):
        with tf.GradientTape() as tape:
            tape.watch(images)
            loss = tf.reduce_sum(model(images, training=True))
        return tape.gradient(loss, images)

    gradient = input_gradient(tf.constant(_images(5, 64, 64))).numpy()
    assert gradient.shape == (2, 64, 64, 3)
    assert np.isfinite(gradient).all() and np.abs(gradient).sum() > 0


@pytest.mark.parametrize("file_has_pre_logits", [True, False])
@pytest.mark.parametrize("representation_size", [None, 16])
def test_b32_pre_logits_combinations(tmp_path, file_has_pre_logits, representation_size):
    """B32: pre_logits used when configured; dropped with a warning when the model has none;
    a missing-key error the other way; never a silent partial load."""
    params = _tiny_params(representation_size=16 if file_has_pre_logits else None)
    path = _write(tmp_path, params)
    model = keras_vit.ViT(
        image_size=32, num_classes=10, representation_size=representation_size, **TINY_ARCH
    )
    x = _images(6)
    if file_has_pre_logits and representation_size:
        load_weights(model, path)
        expected = vit_forward(params, x, num_heads=4)
        np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-4)
    elif file_has_pre_logits:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = load_weights(model, path)
        assert len(caught) == 1 and "pre_logits" in str(caught[0].message)
        assert caught[0].category is WeightsWarning
        assert {"pre_logits/kernel", "pre_logits/bias", "head/kernel"} <= set(report.skipped)
        assert not model.get_layer("head").kernel.numpy().any()
        body = {k: v for k, v in params.items() if not k.startswith(("pre_logits", "head"))}
        pooled = vit_forward(body, x, num_heads=4)
        features = keras.Model(model.inputs, model.get_layer("pool").output)
        np.testing.assert_allclose(features.predict(x, verbose=0), pooled, atol=1e-4)
    elif representation_size:
        with pytest.raises(CheckpointError, match="missing in the file.*pre_logits/kernel"):
            load_weights(model, path)
    else:
        load_weights(model, path)
        expected = vit_forward(params, x, num_heads=4)
        np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-4)


def test_b33_preprocessing_and_pooled_feature_is_class_token_of_final_norm(tmp_path):
    """B33: preprocess_inputs maps 0/127.5/255 to -1/0/+1; include_top=False gives the final
    LayerNorm's sequence[:, 0]; inputs are documented as [-1, 1] (raw 0-255 is not)."""
    scaled = np.asarray(keras_vit.preprocess_inputs(np.array([0.0, 127.5, 255.0])))
    np.testing.assert_array_equal(scaled, [-1.0, 0.0, 1.0])
    params = _tiny_params(seed=33)
    path = _write(tmp_path, params)
    features = keras_vit.ViT(image_size=32, include_top=False, **TINY_ARCH)
    sequence = keras_vit.ViT(image_size=32, include_top=False, return_sequence=True, **TINY_ARCH)
    load_weights(features, path, skip=("head",))
    load_weights(sequence, path, skip=("head",))
    x = _images(8)
    pooled = features.predict(x, verbose=0)
    np.testing.assert_allclose(pooled, sequence.predict(x, verbose=0)[:, 0], atol=1e-6)
    body = {k: v for k, v in params.items() if not k.startswith("head")}
    np.testing.assert_allclose(pooled, vit_forward(body, x, num_heads=4), atol=1e-4)
    assert "[-1, 1]" in keras_vit.ViT.__doc__ and "preprocess_inputs" in keras_vit.ViT.__doc__


# --- what changes results is said through `warnings` ---------------------------


def _weights_warnings(build):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = build()
    return model, [w for w in caught if w.category is WeightsWarning]


def test_weights_argument_with_another_head_size_warns_head_not_loaded(tmp_path):
    path = _write(tmp_path, _tiny_params())  # a 10-class head
    model, said = _weights_warnings(
        lambda: keras_vit.ViT(image_size=32, num_classes=37, weights=str(path), **TINY_ARCH)
    )
    assert len(said) == 1, [str(w.message) for w in said]
    assert "Head not loaded" in str(said[0].message) and "(32, 37)" in str(said[0].message)
    assert said[0].filename == __file__  # points at the user's line, not keras_vit's
    assert not model.get_layer("head").kernel.numpy().any()


def test_no_warning_for_a_full_fit_or_a_headless_model(tmp_path):
    path = _write(tmp_path, _tiny_params())
    _, said = _weights_warnings(
        lambda: keras_vit.ViT(image_size=32, num_classes=10, weights=str(path), **TINY_ARCH)
    )
    assert said == []
    _, said = _weights_warnings(
        lambda: keras_vit.ViT(image_size=32, include_top=False, weights=str(path), **TINY_ARCH)
    )
    assert said == []  # include_top=False: dropping the file's head is what was asked


def test_loading_an_all_zero_head_warns(tmp_path):
    params = _tiny_params()
    params["head/kernel"] = np.zeros_like(params["head/kernel"])
    path = _write(tmp_path, params)
    model = keras_vit.ViT(image_size=32, num_classes=10, **TINY_ARCH)
    with pytest.warns(WeightsWarning, match="all zero: every logit is 0"):
        load_weights(model, path)


def test_load_report_repr_is_one_short_line(b16_file):
    path, _ = b16_file
    report = load_weights(keras_vit.ViT_B16(image_size=384), path)
    text = repr(report)
    assert text == (
        f"LoadReport(path={str(path)!r}, loaded=200, skipped=0, missing=0, unexpected=0, "
        "mismatched=0, resized_grid=((14, 14), (24, 24)))"
    )
