"""keras_vit._atomic: files written through `atomic_path` get the umask's mode, whatever the
writer (safetensors' writer created them 0600: unreadable to a server running as another
user)."""

import os
import stat

import numpy as np
import pytest

from keras_vit import _atomic
from keras_vit.checkpoints.safetensors_io import write_safetensors


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_a_writer_that_creates_0600_files_still_gives_0644(tmp_path, umask_022):
    target = tmp_path / "private.txt"
    with _atomic.atomic_path(target) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_safetensors_files_are_readable_by_others(tmp_path, umask_022):
    target = tmp_path / "model.safetensors"
    write_safetensors(target, {"w": np.zeros((2, 2), np.float32)})
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
