"""Careless use of the checkpoint readers and writers (and the property
test): NaN/inf weights, quantized and float models, every format of the table.

The property: the correct result (a file that reloads to the model's outputs), or a one-line
`CheckpointError` naming the value and the rule, before any file is written.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.numpy import save_file

import keras_vit
from keras_vit.checkpoints import CheckpointError, read_checkpoint, write_checkpoint
from keras_vit.checkpoints.format_table import FORMAT_TABLE
from keras_vit.checkpoints.keras_files.model_io import model_contents
from tests.checkpoints.random_models import images_for, tiny_vit
from tests.fuzz import readers

WRITERS = ("npz", "timm", "hf")  # every format keras_vit writes from arrays
NON_FINITE = (np.nan, np.inf, -np.inf)


def _quiet():
    warnings.filterwarnings("ignore", message=".*GELU.*")
    warnings.filterwarnings("ignore", message=".*does not have a `quantize` method.*")
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="keras")  # NaN quantized


def _quantize(model, mode):
    """`model.quantize(mode)` without the `gc.collect()` Keras runs for each replaced kernel
    (~0.5 s each in a test process with many objects; nothing here needs collecting)."""
    with mock.patch("gc.collect", lambda *args: 0):
        model.quantize(mode)


def _write(model, path, fmt):
    """The writer of `fmt` (save_npz for the release's .npz, the table's writer else)."""
    if fmt == "npz":
        keras_vit.save_npz(model, path)
    else:
        write_checkpoint(model_contents(model), path, fmt)


def _target(tmp, fmt):
    return os.path.join(tmp, {"npz": "w.npz", "timm": "w.safetensors", "hf": "hf"}[fmt])


def _one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


def test_every_array_writer_of_the_table_is_covered():
    writable = {name for name, row in FORMAT_TABLE.items() if row.writer is not None}
    assert writable == {"npz", "timm", "hf"}  # "keras" is written by model.save


# ------------------------------------------------------------------ point 5: quantized


@pytest.mark.parametrize("fmt", WRITERS)
def test_an_int8_model_is_written_dequantized_and_reloads_within_int8_error(tmp_path, fmt):
    _quiet()
    model = tiny_vit(gelu_approximate=fmt == "npz")
    images = images_for(model, batch=4)
    _quantize(model, "int8")
    quantized = np.asarray(model(images))
    path = _target(tmp_path, fmt)
    _write(model, path, fmt)
    reloaded = keras_vit.from_checkpoint(path, num_heads=4)
    assert "kernel_scale" not in " ".join(read_checkpoint(path, num_heads=4).arrays)
    got = np.asarray(reloaded(images))
    error = np.abs(got - quantized).max()
    assert error < 0.1 * np.abs(quantized).max(), (error, np.abs(quantized).max())


def test_the_dequantized_kernel_is_kernel_over_scale_per_output_unit():
    from keras_vit.checkpoints.base.quantized import dequantized_kernel

    rng = np.random.default_rng(0)
    qkv = rng.integers(-127, 128, (6, 2, 3)).astype("int8")
    scale = rng.uniform(1, 2, (1, 1, 2, 3)).astype("float32")  # EinsumDense btnh output
    got = dequantized_kernel("x/query/kernel", qkv, scale)
    np.testing.assert_allclose(got[4, 1, 2], qkv[4, 1, 2] / scale[0, 0, 1, 2], rtol=1e-6)
    out = rng.integers(-127, 128, (2, 3, 6)).astype("int8")
    scale = rng.uniform(1, 2, (1, 1, 6)).astype("float32")
    got = dequantized_kernel("x/out/kernel", out, scale)
    np.testing.assert_allclose(got[1, 2, 5], out[1, 2, 5] / scale[0, 0, 5], rtol=1e-6)
    with pytest.raises(CheckpointError, match="has \\(6,\\) output units but its kernel_scale"):
        dequantized_kernel("x/out/kernel", out, np.ones(7, "float32"))


@pytest.mark.parametrize("mode", ["int4", "float8"])
@pytest.mark.parametrize("fmt", WRITERS)
def test_other_quantization_modes_are_refused_by_name_before_a_file(tmp_path, fmt, mode):
    _quiet()
    model = tiny_vit()
    _quantize(model, mode)
    path = _target(tmp_path, fmt)
    with pytest.raises(CheckpointError, match=f"is quantized \\('{mode}'") as error:
        _write(model, path, fmt)
    _one_line(error)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------ point 6: non-finite


@pytest.fixture(scope="module")
def valid(tmp_path_factory):
    files = readers.valid_files(tmp_path_factory.mktemp("valid"))
    from tests.numpy_reference import tiny_official_params

    folder = tmp_path_factory.mktemp("big_vision")
    files["big_vision"] = str(folder / "bv.npz")
    np.savez(files["big_vision"], **{f"params/{k}": v for k, v in tiny_official_params().items()})
    return files


def _tensor_file(valid, kind):
    path = valid[kind]
    return os.path.join(path, "model.safetensors") if os.path.isdir(path) else path


def _poison(path, value, pick):
    """Writes `value` into one element of the tensor/array `pick` chooses; returns its name."""
    if path.endswith(".npz"):
        with np.load(path) as archive:
            arrays = {key: archive[key] for key in archive.files}
        metadata = None
    else:
        with safe_open(path, framework="np") as stream:
            metadata = stream.metadata()
            arrays = {key: stream.get_tensor(key) for key in stream.keys()}
    floats = sorted(key for key, array in arrays.items() if array.dtype.kind == "f")
    name = floats[pick % len(floats)]
    array = arrays[name].copy()
    array.reshape(-1)[pick % array.size] = value
    arrays[name] = array
    if path.endswith(".npz"):
        np.savez(path, **arrays)
    else:
        save_file(arrays, path, metadata=metadata)
    return name


READ_KINDS = ("npz", "big_vision", "hf", "timm", "hf_family", "timm_family")


@pytest.mark.parametrize("kind", READ_KINDS)
def test_a_nan_weight_is_refused_at_load_naming_the_tensor(valid, tmp_path_factory, kind):
    work = str(tmp_path_factory.mktemp(f"nan_{kind}"))
    path = readers.copy_case(valid[kind], work)
    name = _poison(_tensor_file({kind: path}, kind), np.nan, 3)
    with pytest.raises(CheckpointError, match=f"'{name}' holds 1 non-finite value") as error:
        keras_vit.from_checkpoint(path, num_heads=4)
    assert "finite" in _one_line(error)


def test_a_non_finite_keras_file_is_refused_naming_the_weight(tmp_path):
    model = tiny_vit()
    model.get_layer("head").kernel.assign(np.full((32, 5), np.inf, "float32"))
    model.save(tmp_path / "inf.keras")
    with pytest.raises(CheckpointError, match="weight 'head/kernel' holds 160 non-finite") as e:
        read_checkpoint(tmp_path / "inf.keras")
    _one_line(e)


# ------------------------------------------------------------------ point 8: malformed HF


def test_an_hf_config_json_that_is_a_folder_is_named(valid, tmp_path_factory):
    folder = readers.copy_case(valid["hf"], str(tmp_path_factory.mktemp("cfg_dir")))
    os.remove(os.path.join(folder, "config.json"))
    os.mkdir(os.path.join(folder, "config.json"))
    with pytest.raises(CheckpointError, match=r"config.json is a folder") as error:
        keras_vit.from_checkpoint(folder)
    assert readers.outcome(keras_vit.from_checkpoint, folder).startswith("CheckpointError")
    _one_line(error)


@pytest.mark.parametrize("value", ["0.5", "[0.5, 0.5, 0.5]", True, [0.5, "0.5", 0.5], None])
def test_an_image_mean_that_is_no_number_is_named_with_its_file(valid, tmp_path_factory, value):
    folder = readers.copy_case(valid["hf"], str(tmp_path_factory.mktemp("mean")))
    processor = os.path.join(folder, "preprocessor_config.json")
    with open(processor, "w") as stream:
        json.dump({"image_mean": value, "image_std": [0.5, 0.5, 0.5]}, stream)
    rule = r"preprocessor_config.json: Input normalisation image_mean=.* is not a number"
    with pytest.raises(CheckpointError, match=rule) as error:
        keras_vit.from_checkpoint(folder)
    _one_line(error)


def test_a_preprocessor_config_that_is_no_object_is_named(valid, tmp_path_factory):
    folder = readers.copy_case(valid["hf"], str(tmp_path_factory.mktemp("list")))
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as stream:
        json.dump([0.5], stream)
    with pytest.raises(CheckpointError, match="preprocessor_config.json holds a JSON list"):
        keras_vit.from_checkpoint(folder)


# ------------------------------------------------------------------ the property

_FLOAT_MODELS = {}


def _float_model(grid, gelu_approximate):
    """A float tiny ViT to load the written file into (one per architecture)."""
    key = (grid, gelu_approximate)
    if key not in _FLOAT_MODELS:
        _FLOAT_MODELS[key] = tiny_vit(grid=grid, gelu_approximate=gelu_approximate, seed=9)
    return _FLOAT_MODELS[key]


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fmt=st.sampled_from(WRITERS),
    quantize=st.sampled_from([None, "int8", "int4"]),
    poison=st.sampled_from([None, *NON_FINITE]),
    pick=st.integers(0, 10_000),
    grid=st.sampled_from([(4, 4), (3, 5)]),
)
def test_writers_give_the_model_back_or_refuse_in_one_line_before_a_file(
    tmp_path_factory, fmt, quantize, poison, pick, grid
):
    """Write a (possibly quantized, possibly poisoned) model, read it back; or refuse."""
    _quiet()
    tmp = str(tmp_path_factory.mktemp("prop"))
    model = tiny_vit(grid=grid, gelu_approximate=fmt == "npz")
    images = images_for(model)
    if poison is not None:
        variable = model.weights[pick % len(model.weights)]
        value = np.array(variable.numpy())
        value.reshape(-1)[pick % value.size] = poison
        variable.assign(value)
    if quantize:
        _quantize(model, quantize)
    path = _target(tmp, fmt)
    expected_refusal = (
        "is quantized ('int4'" if quantize == "int4" else "non-finite" if poison else None
    )
    if expected_refusal:
        with pytest.raises(CheckpointError) as error:
            _write(model, path, fmt)
        assert expected_refusal in _one_line(error)
        assert os.listdir(tmp) == [], "a refused write left a file"
        return
    _write(model, path, fmt)
    reference = np.asarray(model(images))
    target = _float_model(grid, fmt == "npz")
    keras_vit.load_weights(target, path)
    got = np.asarray(target(images))
    bound = 0.1 * np.abs(reference).max() if quantize else 1e-5
    assert np.abs(got - reference).max() <= bound


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(READ_KINDS),
    value=st.sampled_from([*NON_FINITE, 1e30, -0.0]),
    pick=st.integers(0, 10_000),
)
def test_readers_load_finite_files_and_name_the_non_finite_tensor(valid, kind, value, pick):
    """Any float tensor of any reader's file: a NaN/inf is refused by the tensor's name (one
    line), a finite extreme still loads."""
    work = os.path.join(os.path.dirname(valid[kind]), f"prop_{kind}")
    path = readers.copy_case(valid[kind], work)
    name = _poison(_tensor_file({kind: path}, kind), value, pick)
    try:
        if np.isfinite(value):
            read_checkpoint(path, num_heads=4)
            return
        with pytest.raises(CheckpointError) as error:
            read_checkpoint(path, num_heads=4)
        message = _one_line(error)
        assert f"'{name}' holds 1 non-finite value(s) (the first, {value}," in message
    finally:
        shutil.rmtree(work)
