"""keras_vit.export: the TF Serving SavedModel, read back without keras_vit or Keras.

One export of a tiny ViT (random weights, class names) is shared by the module; a single
fresh Python process with Keras and keras_vit hidden (TensorFlow only) loads it and calls
every signature. References: `model.predict` on images resized by a NumPy bilinear resize
written here from TF's half-pixel-centre convention and scaled by (x - 127.5) / 127.5; NumPy
softmax and argsort for the top-k outputs; PIL for the encoded PNG/JPEG bytes.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
import unittest.mock

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import keras_vit
from keras_vit.export import (
    export_saved_model,
    find_head,
    head_activation_name,
    next_version,
    resize_and_scale,
)
from tests.conftest import TINY_VIT
from tests.output_checks import randomize_weights

CLASS_NAMES = [f"class_{i}" for i in range(TINY_VIT["num_classes"])]
TOP_K = 3
SERVING_OUTPUTS = {"logits", "probabilities", "top_k_indices", "top_k_scores", "top_k_classes"}
SUBPROCESS_TIMEOUT_S = 240

# Runs in a fresh interpreter: Keras and keras_vit are made unimportable before TensorFlow
# is imported, as if only TensorFlow were installed.
TF_ONLY_SCRIPT = textwrap.dedent(
    """
    import json, sys
    for name in ("keras", "keras_vit", "tf_keras"):
        sys.modules[name] = None
    import numpy as np
    import tensorflow as tf

    export_path, inputs_path, outputs_path = sys.argv[1:4]
    data = np.load(inputs_path)
    loaded = tf.saved_model.load(export_path)
    results = {}
    for batch in (1, 3):
        images = tf.constant(data["images"][:batch].astype(np.float32))
        out = loaded.signatures["serving_default"](images=images)
        for key, value in out.items():
            results[f"default_{batch}_{key}"] = value.numpy()
        encoded = tf.constant([data[f"png_{i}"].tobytes() for i in range(batch)])
        out = loaded.signatures["serving_bytes"](image_bytes=encoded)
        for key, value in out.items():
            results[f"bytes_{batch}_{key}"] = value.numpy()
        out = loaded.signatures["features"](images=images)
        results[f"features_{batch}"] = out["features"].numpy()
    corrupt = tf.constant([data["png_0"].tobytes(), data["corrupt_jpeg"].tobytes(),
                           data["png_1"].tobytes()])
    try:
        loaded.signatures["serving_bytes"](image_bytes=corrupt)
        error = None
    except tf.errors.InvalidArgumentError as e:
        error = {"type": type(e).__name__, "message": e.message}
    after = loaded.signatures["serving_bytes"](image_bytes=tf.constant([data["png_0"].tobytes()]))
    info = {
        "corrupt_error": error,
        "logits_after_error": after["logits"].numpy().tolist(),
        "keras_importable": any(sys.modules.get(n) is not None for n in ("keras", "keras_vit")),
        "output_dtypes": {k: v.dtype.name for k, v in
                          loaded.signatures["serving_default"].structured_outputs.items()},
    }
    for key, value in results.items():
        if value.dtype == object:
            results[key] = np.array([[b.decode() for b in row] for row in value])
    np.savez(outputs_path, **results)
    with open(outputs_path + ".json", "w") as f:
        json.dump(info, f)
    """
)


def numpy_bilinear_resize(images, height, width):
    """TF2's bilinear resize (half-pixel centres, no antialiasing), written from its rule.

    Output pixel i samples the input at (i + 0.5) * in / out - 0.5, linearly interpolated
    between the floor and ceil neighbours, indices clamped to the image.
    """
    images = images.astype(np.float64)

    def axis_weights(in_size, out_size):
        position = (np.arange(out_size) + 0.5) * in_size / out_size - 0.5
        lower = np.floor(position)
        fraction = position - lower
        lower_index = np.clip(lower, 0, in_size - 1).astype(int)
        upper_index = np.clip(lower + 1, 0, in_size - 1).astype(int)
        return lower_index, upper_index, fraction

    top, bottom, fy = axis_weights(images.shape[1], height)
    left, right, fx = axis_weights(images.shape[2], width)
    rows = (
        images[:, top] * (1 - fy)[None, :, None, None] + images[:, bottom] * fy[None, :, None, None]
    )
    return (
        rows[:, :, left] * (1 - fx)[None, None, :, None]
        + rows[:, :, right] * fx[None, None, :, None]
    )


def preprocess_reference(images, size):
    """The evaluation preprocessing, from its definition: resize, then (x - 127.5) / 127.5."""
    return ((numpy_bilinear_resize(images, *size) - 127.5) / 127.5).astype(np.float32)


def encode(images, image_format, **kwargs):
    """Encodes uint8 `(h, w, c)` arrays with PIL (independent of TensorFlow's encoders)."""
    encoded = []
    for image in images:
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format=image_format, **kwargs)
        encoded.append(buffer.getvalue())
    return encoded


def tiny_vit(seed=0, **overrides):
    return randomize_weights(keras_vit.ViT(**{**TINY_VIT, **overrides}), seed)


def feature_model(model, layer_name="pool"):
    return keras.Model(model.inputs, model.get_layer(layer_name).output)


def tree_listing(path):
    """(relative path, size, mtime) of every file under `path`: detects any change."""
    listing = []
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            stat = os.stat(full)
            listing.append((os.path.relpath(full, path), stat.st_size, stat.st_mtime_ns))
    return sorted(listing)


@pytest.fixture(scope="module")
def images():
    """Three uint8 RGB images of 45x37 pixels (not the model's 32x32)."""
    return np.random.default_rng(7).integers(0, 256, (3, 45, 37, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def exported(tmp_path_factory, images):
    """The tiny ViT, its export at serving/1 and the fresh TensorFlow-only process's results."""
    model = tiny_vit()
    root = tmp_path_factory.mktemp("serving")
    path = export_saved_model(model, root, class_names=CLASS_NAMES, top_k=TOP_K)

    truncated_jpeg = encode(images[:1], "JPEG", quality=90)[0]
    truncated_jpeg = truncated_jpeg[: len(truncated_jpeg) // 2]
    png = encode(images, "PNG")
    inputs_path = str(root.parent / "serving_inputs.npz")
    outputs_path = str(root.parent / "serving_outputs.npz")
    np.savez(
        inputs_path,
        images=images,
        corrupt_jpeg=np.frombuffer(truncated_jpeg, np.uint8),
        **{f"png_{i}": np.frombuffer(data, np.uint8) for i, data in enumerate(png)},
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ""}
    completed = subprocess.run(
        [sys.executable, "-c", TF_ONLY_SCRIPT, path, inputs_path, outputs_path],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env=env,
        cwd=str(root.parent),
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    with np.load(outputs_path) as data:
        outputs = dict(data)
    with open(outputs_path + ".json") as handle:
        info = json.load(handle)
    return {"model": model, "root": root, "path": path, "outputs": outputs, "info": info}


def test_export_writes_tf_serving_version_layout(exported):
    assert exported["path"] == os.path.join(str(exported["root"]), "1")
    assert sorted(os.listdir(exported["root"])) == ["1"]  # the temporary folder is gone
    assert os.path.isfile(os.path.join(exported["path"], "saved_model.pb"))
    assert os.path.isdir(os.path.join(exported["path"], "variables"))


def test_runs_with_tensorflow_only(exported):
    assert exported["info"]["keras_importable"] is False
    assert exported["info"]["output_dtypes"] == {
        "logits": "float32",
        "probabilities": "float32",
        "top_k_indices": "int32",
        "top_k_scores": "float32",
        "top_k_classes": "string",
    }


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("signature", ["default", "bytes"])
def test_logits_equal_model_predict_on_preprocessed_images(exported, images, signature, batch):
    """Both serving signatures, batch 1 and 3, 45x37 images into a 32x32 model."""
    scaled = preprocess_reference(images[:batch], (32, 32))
    expected = exported["model"].predict(scaled, verbose=0)
    served = exported["outputs"][f"{signature}_{batch}_logits"]
    assert served.shape == (batch, TINY_VIT["num_classes"])
    assert np.abs(expected).max() > 0.1  # random weights: logits are not trivially zero
    np.testing.assert_allclose(served, expected, atol=1e-4)


@pytest.mark.parametrize("signature", ["default", "bytes"])
def test_probabilities_and_top_k(exported, signature):
    logits = exported["outputs"][f"{signature}_3_logits"].astype(np.float64)
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = shifted / shifted.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(
        exported["outputs"][f"{signature}_3_probabilities"], probabilities, atol=1e-6
    )
    order = np.argsort(-probabilities, axis=1)[:, :TOP_K]
    np.testing.assert_array_equal(exported["outputs"][f"{signature}_3_top_k_indices"], order)
    np.testing.assert_allclose(
        exported["outputs"][f"{signature}_3_top_k_scores"],
        np.take_along_axis(probabilities, order, axis=1),
        atol=1e-6,
    )
    classes = exported["outputs"][f"{signature}_3_top_k_classes"]
    assert classes.tolist() == [[CLASS_NAMES[i] for i in row] for row in order]


@pytest.mark.parametrize("batch", [1, 3])
def test_features_equal_pool_output(exported, images, batch):
    scaled = preprocess_reference(images[:batch], (32, 32))
    expected = feature_model(exported["model"]).predict(scaled, verbose=0)
    served = exported["outputs"][f"features_{batch}"]
    assert served.shape == (batch, TINY_VIT["hidden_dim"])
    np.testing.assert_allclose(served, expected, atol=1e-4)


def test_corrupt_jpeg_in_batch_raises_invalid_argument(exported):
    """A truncated JPEG between two good PNGs: a clear error, and the process goes on."""
    error = exported["info"]["corrupt_error"]
    assert error is not None and error["type"] == "InvalidArgumentError"
    assert "Invalid JPEG data" in error["message"]
    np.testing.assert_allclose(
        exported["info"]["logits_after_error"], exported["outputs"]["bytes_1_logits"], atol=1e-6
    )


def test_saved_model_cli_lists_three_signatures(exported):
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "tensorflow.python.tools.saved_model_cli",
            "show",
            "--dir",
            exported["path"],
            "--all",
        ],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    text = completed.stdout
    sections = {}
    for block in text.split("signature_def['")[1:]:
        name, body = block.split("']", 1)
        sections[name] = body.split("Method name is")[0]
    assert {"serving_default", "serving_bytes", "features"} <= set(sections)
    assert "inputs['images'] tensor_info:" in sections["serving_default"]
    assert "inputs['image_bytes'] tensor_info:" in sections["serving_bytes"]
    assert "inputs['images'] tensor_info:" in sections["features"]
    assert "shape: (-1, -1, -1, 3)" in sections["serving_default"]
    assert "shape: (-1)" in sections["serving_bytes"]
    for name in ("serving_default", "serving_bytes"):
        for output in SERVING_OUTPUTS:
            assert f"outputs['{output}'] tensor_info:" in sections[name]
        assert "shape: (-1, 10)" in sections[name]
        assert f"shape: (-1, {TOP_K})" in sections[name]
    assert "outputs['features'] tensor_info:" in sections["features"]
    assert "shape: (-1, 32)" in sections["features"]


def test_existing_version_without_overwrite_fails_and_is_untouched(exported):
    before = tree_listing(exported["root"])
    with pytest.raises(FileExistsError, match="version 1 already exists.*overwrite=True"):
        export_saved_model(exported["model"], exported["root"], version=1)
    assert tree_listing(exported["root"]) == before


def test_next_version_is_one_more_than_the_highest_integer(tmp_path):
    assert next_version(str(tmp_path)) == 1
    for name in ("1", "3", "notes", ".tmp-4-x"):
        (tmp_path / name).mkdir()
    (tmp_path / "7").write_text("a file, not a version folder")
    assert next_version(str(tmp_path)) == 4


@pytest.fixture(scope="module")
def mixed_export(exported, tmp_path_factory):
    """B14: a mixed_float16 tiny ViT exported with overwrite=True over a copy of `exported`."""
    root = tmp_path_factory.mktemp("mixed") / "serving"
    shutil.copytree(exported["root"], root)
    old_listing = tree_listing(root / "1")
    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        model = tiny_vit(seed=1)
        assert model.get_layer("encoderblock_0").compute_dtype == "float16"
        path = export_saved_model(model, root, version=1, overwrite=True)
    finally:
        keras.config.set_dtype_policy(policy)
    return {"model": model, "root": root, "path": path, "old_listing": old_listing}


def test_b14_mixed_float16_model_exports_and_serves_float32(mixed_export, images):
    """B14: mixed_float16 -> tiny ViT -> export -> load -> serving_default with float32."""
    loaded = tf.saved_model.load(mixed_export["path"])
    signature = loaded.signatures["serving_default"]
    assert signature.structured_input_signature[1]["images"].dtype == tf.float32
    out = signature(images=tf.constant(images, tf.float32))
    assert out["logits"].dtype == tf.float32 and out["probabilities"].dtype == tf.float32
    features = loaded.signatures["features"](images=tf.constant(images, tf.float32))
    assert features["features"].dtype == tf.float32
    scaled = preprocess_reference(images, (32, 32))
    expected = mixed_export["model"].predict(scaled, verbose=0)
    assert np.abs(expected).max() > 0.1
    np.testing.assert_allclose(out["logits"].numpy(), expected, atol=2e-2, rtol=2e-2)


def test_overwrite_true_replaces_the_version(mixed_export):
    assert sorted(os.listdir(mixed_export["root"])) == ["1"]  # no temporary or retired folder
    assert tree_listing(mixed_export["root"] / "1") != mixed_export["old_listing"]
    loaded = tf.saved_model.load(mixed_export["path"])
    assert "top_k_classes" not in loaded.signatures["serving_default"].structured_outputs


def instances_to_inputs(payload, signature):
    """Builds a signature's input tensors from a TF Serving REST `{"instances": [...]}` body.

    TF Serving's row format: each instance is a dict keyed by input name, or, when the
    signature has one input, the bare value; `{"b64": "..."}` stands for bytes. Instances are
    stacked along a new batch dimension and cast to the signature's dtype.
    """
    specs = signature.structured_input_signature[1]
    instances = payload["instances"]
    if all(isinstance(row, dict) and set(row) != {"b64"} for row in instances):
        rows = instances
    elif len(specs) == 1:
        (only_key,) = specs
        rows = [{only_key: row} for row in instances]
    else:
        raise ValueError("bare instances need a single-input signature")

    def decode(value):
        if isinstance(value, dict) and set(value) == {"b64"}:
            return base64.b64decode(value["b64"])
        if isinstance(value, list):
            return [decode(v) for v in value]
        return value

    return {
        key: tf.constant([decode(row[key]) for row in rows], dtype=spec.dtype)
        for key, spec in specs.items()
    }


def test_b43_serving_default_and_instances_payload(exported, images):
    """B43: serving_default present, one documented input key, stable outputs, REST payload."""
    loaded = tf.saved_model.load(exported["path"])
    assert "serving_default" in loaded.signatures
    default = loaded.signatures["serving_default"]
    by_bytes = loaded.signatures["serving_bytes"]
    assert list(default.structured_input_signature[1]) == ["images"]
    assert list(by_bytes.structured_input_signature[1]) == ["image_bytes"]
    assert set(default.structured_outputs) == SERVING_OUTPUTS
    assert set(by_bytes.structured_outputs) == SERVING_OUTPUTS

    named = {"instances": [{"images": image.tolist()} for image in images[:2]]}
    bare = {"instances": [image.tolist() for image in images[:2]]}
    png_b64 = [base64.b64encode(b).decode("ascii") for b in encode(images[:2], "PNG")]
    encoded = {"instances": [{"image_bytes": {"b64": b}} for b in png_b64]}
    bare_encoded = {"instances": [{"b64": b} for b in png_b64]}
    expected = exported["outputs"]["default_3_logits"][:2]
    cases = ((named, default), (bare, default), (encoded, by_bytes), (bare_encoded, by_bytes))
    for payload, signature in cases:
        inputs = instances_to_inputs(payload, signature)
        np.testing.assert_allclose(signature(**inputs)["logits"].numpy(), expected, atol=1e-4)


def test_grayscale_hybrid_vit_exports(tmp_path, images):
    """A tiny one-channel hybrid (ResNet root + Transformer) serves the logits of predict."""
    model = randomize_weights(
        keras_vit.HybridViT(
            resnet_stages=(),
            resnet_width=8,
            resnet_groups=4,
            patch_size=2,
            channels=1,
            **{k: v for k, v in TINY_VIT.items() if k != "patch_size"},
        ),
        seed=2,
    )
    path = export_saved_model(model, tmp_path, version=3)
    assert path == os.path.join(str(tmp_path), "3")
    gray = images[..., :1]
    expected = model.predict(preprocess_reference(gray, (32, 32)), verbose=0)
    assert np.abs(expected).max() > 0.1
    loaded = tf.saved_model.load(path)
    out = loaded.signatures["serving_default"](images=tf.constant(gray, tf.float32))
    np.testing.assert_allclose(out["logits"].numpy(), expected, atol=1e-4)
    encoded = tf.constant(encode(gray[..., 0], "PNG"))
    out = loaded.signatures["serving_bytes"](image_bytes=encoded)
    np.testing.assert_allclose(out["logits"].numpy(), expected, atol=1e-4)


def test_preprocessing_matches_the_data_evaluation_path(images):
    """The graph's resize + scale equals keras_vit.data's eval_preprocess, image by image."""
    from keras_vit.data.preprocess import eval_preprocess

    served = resize_and_scale(tf.constant(images), (32, 24)).numpy()
    for image, result in zip(images, served, strict=True):
        np.testing.assert_allclose(result, eval_preprocess(image, (32, 24), 3).numpy(), atol=1e-6)
    np.testing.assert_allclose(served, preprocess_reference(images, (32, 24)), atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"top_k": 0}, "top_k"),
        ({"version": 0}, "version"),
        ({"class_names": ["a", "b"]}, "class_names.*10 strings"),
    ],
)
def test_bad_arguments_raise_before_writing(tmp_path, kwargs, match):
    model = keras_vit.ViT(**TINY_VIT)
    with pytest.raises(ValueError, match=match):
        export_saved_model(model, tmp_path / "serving", **kwargs)
    assert not (tmp_path / "serving").exists()


def test_headless_model_is_rejected(tmp_path):
    model = keras_vit.ViT(**TINY_VIT, include_top=False)
    with pytest.raises(ValueError, match="`head` layer"):
        export_saved_model(model, tmp_path / "serving")


def test_head_activation_must_be_linear_or_softmax():
    assert head_activation_name(keras.layers.Dense(3)) == "linear"
    assert head_activation_name(keras.layers.Dense(3, activation="softmax")) == "softmax"
    with pytest.raises(ValueError, match="activation='sigmoid'"):
        head_activation_name(keras.layers.Dense(3, activation="sigmoid"))


def test_overwrite_swaps_in_one_rename_while_a_reader_keeps_working(exported, tmp_path, images):
    """`--overwrite` while a server reads version 1: the version folder always holds a
    complete SavedModel (the old version is never moved away first), a model loaded before
    the swap keeps answering, and the new version is the new model."""
    root = tmp_path / "serving"
    shutil.copytree(exported["root"], root)
    version = root / "1"
    served = tf.saved_model.load(str(version))
    before = served.signatures["serving_default"](images=tf.constant(images, tf.float32))[
        "logits"
    ].numpy()
    renames, real_rename = [], os.rename
    stop, reads, failures = threading.Event(), [], []

    def read_forever():
        while not stop.is_set():
            try:
                with open(version / "saved_model.pb", "rb") as handle:
                    assert len(handle.read()) > 0
                assert os.listdir(version / "variables")
                reads.append(1)
            except (OSError, AssertionError) as error:
                failures.append(repr(error))

    def spy_rename(source, target, *args, **kwargs):
        renames.append((os.fspath(source), os.fspath(target)))
        return real_rename(source, target, *args, **kwargs)

    reader = threading.Thread(target=read_forever)
    reader.start()
    try:
        with unittest.mock.patch.object(os, "rename", spy_rename):
            export_saved_model(tiny_vit(seed=5), root, version=1, overwrite=True)
    finally:
        stop.set()
        reader.join(timeout=30)
    assert failures == [] and reads, failures[:3]
    assert str(version) not in [source for source, _ in renames]  # never moved aside
    assert sorted(os.listdir(root)) == ["1"]  # no temporary or retired folder left
    after = served.signatures["serving_default"](images=tf.constant(images, tf.float32))[
        "logits"
    ].numpy()
    np.testing.assert_array_equal(after, before)  # the loaded old version keeps working
    new = tf.saved_model.load(str(version)).signatures["serving_default"]
    assert not np.allclose(new(images=tf.constant(images, tf.float32))["logits"].numpy(), before)


def test_version_folder_is_readable_by_other_users_under_umask_022(tmp_path):
    """A serving process running as another user must read the export (mkdtemp's 0o700
    used to survive the rename)."""
    old = os.umask(0o022)
    try:
        path = export_saved_model(tiny_vit(seed=2), tmp_path / "serving", version=1)
    finally:
        os.umask(old)
    for folder, _, files in os.walk(path):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o755, folder
        for name in files:
            mode = stat.S_IMODE(os.stat(os.path.join(folder, name)).st_mode)
            assert mode & 0o044 == 0o044, (name, oct(mode))


def test_disk_full_export_leaves_the_old_version_and_no_temporary_folder(exported, tmp_path):
    """A full disk during `--overwrite` of version 1: WriteError naming the version folder
    and the cause; version 1 is the old export, unchanged; no temporary folder is left."""
    from tests.helpers.small_disk import small_disk

    version_size = sum(
        os.path.getsize(os.path.join(folder, name))
        for folder, _, names in os.walk(exported["path"])
        for name in names
    )
    # Room for the old version and a little more, not for a second copy of it.
    with small_disk(tmp_path / "disk", version_size // 1024 + 64) as disk:
        root = disk / "serving"
        shutil.copytree(exported["root"], root)
        before = tree_listing(root)
        with pytest.raises(OSError) as info:
            export_saved_model(tiny_vit(seed=7), root, version=1, overwrite=True)
        assert str(info.value) == f"cannot write {root / '1'}: No space left on device"
        assert tree_listing(root) == before
        assert sorted(os.listdir(root)) == ["1"]


def test_one_output_head_is_refused(tmp_path):
    """A 1-output head's softmax is 1.0 for every image: refused, naming the spellings."""
    body = keras_vit.ViT(
        image_size=16,
        patch_size=8,
        hidden_dim=16,
        num_heads=2,
        mlp_dim=32,
        num_layers=1,
        include_top=False,
    )
    model = keras.Model(body.input, keras.layers.Dense(1, name="head")(body.output))
    with pytest.raises(ValueError, match="num_classes=2.*sigmoid"):
        export_saved_model(model, tmp_path / "one")
    assert not (tmp_path / "one").exists()


@pytest.mark.parametrize("distillation_head", [True, False])
def test_a_distilled_softmax_model_exports_its_mean_of_heads(tmp_path, distillation_head):
    """DeiT: the classifier output is `head_activation` on the mean of `head` and
    `head_dist` (or, with `distillation_head=False`, HF DeiTForImageClassification, the
    softmax `head` on the class token); the export reads it as probabilities (not softmax
    applied twice), and the `features` signature gives the pooled class token."""
    model = tiny_vit(
        distilled=True,
        distillation_head=distillation_head,
        num_register_tokens=1,
        classifier_activation="softmax",
    )
    assert find_head(model).name == ("head_activation" if distillation_head else "head")
    path = export_saved_model(model, tmp_path, top_k=2)
    served = tf.saved_model.load(path)
    values = np.random.default_rng(3).integers(0, 256, (2, 32, 32, 3)).astype(np.float32)
    images = tf.constant(values)  # pixel values, at the model's size
    pixels = values / 127.5 - 1.0
    expected = np.asarray(model(pixels, training=False))
    assert np.abs(expected - expected.mean()).max() > 1e-4  # not uniform: heads randomised
    out = served.signatures["serving_default"](images=images)
    np.testing.assert_allclose(out["probabilities"].numpy(), expected, atol=1e-5)
    features = served.signatures["features"](images=images)
    pooled = feature_model(model).predict(pixels, verbose=0)
    np.testing.assert_allclose(features["features"].numpy(), pooled, atol=1e-5)
