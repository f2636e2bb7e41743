"""Fuzzed and hostile checkpoint files: every reader either loads the input or raises a
CheckpointError/ValueError naming the file, within a time and allocation bound, never
reading outside the checkpoint's folder (`tests.fuzz.readers.outcome`).

Property tests mutate valid tiny files written by keras_vit (the ci profile draws 10 each);
the hand-made files are the issue's cases. tests/fuzz/long_run.py runs the same
mutations longer and counts the findings.
"""

from __future__ import annotations

import json
import os
import struct
import zipfile
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import keras_vit
from keras_vit.checkpoints import CheckpointError, read_checkpoint
from tests.fuzz import readers


@pytest.fixture(scope="module")
def valid(tmp_path_factory):
    return readers.valid_files(tmp_path_factory.mktemp("valid"))


def _case(valid, reader, tmp_path_factory):
    work = os.path.join(str(tmp_path_factory.getbasetemp()), f"fuzz_{reader}")
    return readers.copy_case(valid[reader], work)


def _write(path, data: bytes):
    with open(path, "wb") as stream:
        stream.write(data)


def load(path):
    """The whole path a user takes: read, check against the arrays, build, load."""
    keras_vit.from_checkpoint(path)


def test_the_valid_files_load(valid):
    for reader in ("npz", "hf", "timm", "keras", "hf_family", "timm_family"):
        assert readers.outcome(load, valid[reader]) == "loaded", reader


@pytest.mark.parametrize("campaign", sorted(readers.CAMPAIGNS))
@given(data=st.data())
def test_mutated_files_load_or_are_named(valid, tmp_path_factory, campaign, data):
    """Truncated, flipped, spliced bytes; edited safetensors headers (dtype, shape, offsets,
    length), config.json fields, npz members (shape, dtype): see `readers.CAMPAIGNS`."""
    work = os.path.join(str(tmp_path_factory.getbasetemp()), "fuzz_case")
    readers.run_campaign_case(valid, campaign, data.draw, work)


@given(data=st.data())
def test_mutated_image_headers_are_named_or_decode(tmp_path_factory, data):
    work = os.path.join(str(tmp_path_factory.getbasetemp()), "fuzz_image")
    readers.run_image_case(data.draw, work)


# ---------------------------------------------------------------- hand-made hostile files


def _safetensors(header: dict, body: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


def _expect(path, match, load_fn=load):
    with pytest.raises(CheckpointError, match=match):
        load_fn(path)
    assert readers.outcome(load_fn, path).split(":")[0].endswith("CheckpointError")


def test_a_safetensors_header_declaring_more_bytes_than_the_file_holds(tmp_path):
    path = tmp_path / "model.safetensors"
    header = {
        "pos_embed": {"dtype": "F32", "shape": [1, 10**6, 64], "data_offsets": [0, 256 * 10**6]}
    }
    _write(path, _safetensors(header, b"\0" * 64))
    _expect(path, "truncated safetensors file: its tensors need")


def test_safetensors_offsets_that_overlap_or_do_not_fit_the_shape(tmp_path):
    path = tmp_path / "model.safetensors"
    header = {
        "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
        "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]},
    }
    _write(path, _safetensors(header, b"\0" * 24))
    _expect(path, "tensors 'a' and 'b' overlap")
    header["b"] = {"dtype": "F32", "shape": [10**9], "data_offsets": [16, 24]}
    _write(path, _safetensors(header, b"\0" * 24))
    _expect(path, r"tensor 'b' \(F32 \[1000000000\]\) needs 4000000000 bytes")


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("hidden_size", 10**9, "hidden_size=1000000000 must be an integer from 1 to"),
        ("patch_size", 0, "patch_size=0 must be an integer from 1 to"),
        ("num_attention_heads", -4, "num_attention_heads=-4 must be an integer"),
        ("num_attention_heads", 5, "num_attention_heads=5 does not divide the width 32"),
        ("hidden_size", 48, "hidden_size=48 but the arrays give 32"),
        ("image_size", 30, "image_size=30 is not a multiple of the patch size 8"),
        ("layer_norm_eps", "tiny", "layer_norm_eps='tiny' must be a number"),
    ],
)
def test_absurd_hf_config_sizes_are_refused_before_a_model_is_built(
    valid, tmp_path_factory, monkeypatch, field, value, match
):
    from keras_vit.model import from_kwargs

    def no_build(*args, **kwargs):
        raise AssertionError("a model was built before the config was checked")

    monkeypatch.setattr(from_kwargs, "build", no_build)
    folder = _case(valid, "hf", tmp_path_factory)
    config = json.loads(open(os.path.join(folder, "config.json")).read())
    config[field] = value
    _write(os.path.join(folder, "config.json"), json.dumps(config).encode())
    _expect(folder, match)


def test_absurd_timm_model_args_are_refused(valid, tmp_path_factory):
    path = _case(valid, "timm", tmp_path_factory)
    config = os.path.join(os.path.dirname(path), "config.json")
    for args, match in (
        ({"num_heads": -4}, "num_heads=-4 must be an integer"),
        ({"embed_dim": 10**9}, "embed_dim=1000000000 must be an integer"),
        ({"num_heads": 4, "depth": 7}, "depth=7 but the arrays give 2"),
    ):
        _write(config, json.dumps({"model_args": args}).encode())
        _expect(path, match)


def _zip_bomb(path, declared=3 << 30):
    """An npz whose one member claims `declared` bytes (a deflated stream of zeros, ~1 KiB
    of it: nothing large is ever written or allocated)."""
    descr = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({declared // 4},), }}"
    header = b"\x93NUMPY\x01\x00" + struct.pack("<H", 118) + descr.encode().ljust(117) + b"\n"
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    stream = compressor.compress(header + b"\0" * 4096) + compressor.flush()
    info = zipfile.ZipInfo("embedding/kernel.npy")
    info.compress_type = zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(info, b"")
    data = bytearray(open(path, "rb").read())
    # patch the sizes of the (empty) member: local header and central directory
    local = data.index(b"PK\x03\x04")
    central = data.index(b"PK\x01\x02")
    crc = 0
    data[local + 14 : local + 26] = struct.pack("<III", crc, len(stream), declared)
    data[central + 16 : central + 28] = struct.pack("<III", crc, len(stream), declared)
    name_end = local + 30 + len(info.filename)
    data[name_end:name_end] = stream
    offset = central + len(stream)
    data[offset + 16 : offset + 28] = struct.pack("<III", crc, len(stream), declared)
    end = data.index(b"PK\x05\x06")
    struct.pack_into("<I", data, end + 16, offset)
    _write(path, bytes(data))


def test_an_npz_whose_entry_decompresses_to_gigabytes_is_refused_unread(tmp_path):
    path = tmp_path / "bomb.npz"
    _zip_bomb(path)
    assert os.path.getsize(path) < 4096
    _expect(path, r"zip entry 'embedding/kernel.npy' declares 3221225472 bytes uncompressed")


def test_an_npy_header_larger_than_its_member_is_refused(tmp_path):
    """NumPy allocates the header's shape before reading a zip member: 4 GB for 1 KB."""
    import io

    path = tmp_path / "liar.npz"
    header = io.BytesIO()
    shape = (1, 10**9, 1)
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": shape}
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("cls.npy", header.getvalue() + b"\0" * 1024)
    _expect(path, r"array 'cls' declares shape \(1, 1000000000, 1\) of float32", read_checkpoint)


def test_an_hf_config_naming_a_file_outside_the_folder_is_not_followed(valid, tmp_path_factory):
    folder = _case(valid, "hf", tmp_path_factory)
    config = json.loads(open(os.path.join(folder, "config.json")).read())
    outside = os.path.join(os.path.dirname(folder), readers.SECRET)
    _write(outside, b"secret")
    for key in ("_name_or_path", "weights", "model_file", "safetensors"):
        config[key] = os.path.relpath(outside, folder)
    _write(os.path.join(folder, "config.json"), json.dumps(config).encode())
    assert readers.outcome(load, folder) == "loaded"  # and the secret was never opened


def test_a_truncated_keras_zip_is_named(valid, tmp_path_factory):
    path = _case(valid, "keras", tmp_path_factory)
    data = open(path, "rb").read()
    for cut in (len(data) // 2, len(data) - 30, 100):
        _write(path, data[:cut])
        assert readers.outcome(load, path).split(":")[0].endswith("CheckpointError"), cut


def test_an_npy_header_cut_inside_its_dict_is_named(tmp_path):
    """Found by tests/fuzz/long_run.py: NumPy's header parser raised tokenize's
    TokenError ('EOF in multi-line statement') or a SyntaxError, naming no file."""
    import struct

    path = tmp_path / "cut.npz"
    text = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1,".ljust(117) + b"\n"
    member = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + b"\0" * 4
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("cls.npy", member)
    _expect(path, r"zip entry 'cls.npy' is not a readable .npy array", read_checkpoint)


def test_release_arrays_of_the_wrong_rank_are_named_before_the_architecture(tmp_path):
    """Found by tests/fuzz/long_run.py: a head kernel of one axis raised IndexError in
    the architecture inference; a config.json "layer_norm_eps": null raised TypeError."""
    from keras_vit.checkpoints.base.npz_io import write_npz
    from tests.numpy_reference import tiny_official_params

    params = tiny_official_params(seed=0)
    params["head/kernel"] = params["head/kernel"][:, 0]
    write_npz(tmp_path / "rank.npz", params)
    _expect(tmp_path / "rank.npz", r"array 'head/kernel' has shape \(32,\); the release layout")


def test_a_null_layer_norm_eps_is_named(valid, tmp_path_factory):
    folder = _case(valid, "hf", tmp_path_factory)
    config = json.loads(open(os.path.join(folder, "config.json")).read())
    config["layer_norm_eps"] = None
    _write(os.path.join(folder, "config.json"), json.dumps(config).encode())
    _expect(folder, "layer_norm_eps=None must be a number in")
