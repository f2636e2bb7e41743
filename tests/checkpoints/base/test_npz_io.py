"""Safe reading and atomic writing of .npz files (keras_vit.checkpoints.base.npz_io)."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.checkpoints.base.npz_io import read_npz, write_npz


class _Payload:
    """Unpickling this creates a marker file: proof that something was executed."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_object_array_is_refused_without_executing_anything(tmp_path):
    marker = tmp_path / "executed"
    path = tmp_path / "malicious.npz"
    payload = np.empty(1, dtype=object)
    payload[0] = _Payload(str(marker))
    np.savez(path, **{"embedding/kernel": np.zeros(3, np.float32), "evil": payload})
    with pytest.raises(CheckpointError, match="'evil'.*object"):
        read_npz(path)
    assert not marker.exists()


def test_pickle_file_is_refused_without_executing_anything(tmp_path):
    marker = tmp_path / "executed"
    path = tmp_path / "pickled.npz"
    path.write_bytes(pickle.dumps(_Payload(str(marker))))
    with pytest.raises(CheckpointError, match="not an .npz"):
        read_npz(path)
    assert not marker.exists()


def test_truncated_file_gives_clear_error(tmp_path):
    path = tmp_path / "full.npz"
    np.savez(path, a=np.arange(10000, dtype=np.float32), b=np.ones(5000, np.float32))
    data = path.read_bytes()
    cut = tmp_path / "truncated.npz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        read_npz(cut)


def test_single_npy_and_missing_file(tmp_path):
    path = tmp_path / "one.npz"
    with open(path, "wb") as handle:
        np.save(handle, np.zeros(3))
    with pytest.raises(CheckpointError, match="single .npy"):
        read_npz(path)
    with pytest.raises(FileNotFoundError):
        read_npz(tmp_path / "absent.npz")


def test_round_trip_keeps_flat_keys_and_values(tmp_path):
    arrays = {
        "Transformer/encoderblock_0/LayerNorm_0/scale": np.arange(4, dtype=np.float32),
        "cls": np.ones((1, 1, 4), np.float32),
    }
    path = tmp_path / "ckpt.npz"
    write_npz(path, arrays)
    back = read_npz(path)
    assert list(back) == list(arrays)
    for key in arrays:
        np.testing.assert_array_equal(back[key], arrays[key])


def test_write_is_atomic_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.npz"
    write_npz(path, {"a": np.zeros(2, np.float32)})
    before = path.read_bytes()

    def failing_savez(stream, **arrays):
        stream.write(b"partial")
        raise RuntimeError("disk full")

    monkeypatch.setattr(np, "savez", failing_savez)
    with pytest.raises(RuntimeError, match="disk full"):
        write_npz(path, {"a": np.ones(2, np.float32)})
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["ckpt.npz"]


def test_write_refuses_object_arrays(tmp_path):
    with pytest.raises(ValueError, match="numeric"):
        write_npz(tmp_path / "x.npz", {"a": np.array([object()], dtype=object)})


def test_text_file_is_named_as_not_an_npz_rather_than_a_pickle(tmp_path):
    path = tmp_path / "fake.npz"
    path.write_text("this is not a checkpoint\n")
    with pytest.raises(CheckpointError, match="is not an .npz archive") as info:
        read_npz(path)
    assert "pickle" not in str(info.value)


def test_written_file_has_the_usual_permissions(tmp_path):
    """Atomic writes must not leave the 0600 mode of a temporary file on the result."""
    umask = os.umask(0o022)
    try:
        write_npz(tmp_path / "a.npz", {"x": np.zeros(2, np.float32)})
    finally:
        os.umask(umask)
    assert oct((tmp_path / "a.npz").stat().st_mode & 0o777) == oct(0o644)
