"""keras_vit._atomic: files written through `atomic_path` get the umask's mode, whatever the
writer (safetensors' writer created them 0600: unreadable to a server running as another
user)."""

import os
import stat

import numpy as np
import pytest

from keras_vit import _atomic
from keras_vit.checkpoints.base.safetensors_io import write_safetensors


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


LEFT_BEHIND = ["last.keras", "epoch-00003.state.npz", "latest.weights.h5", "best.json", "README"]


def test_leftovers_of_a_killed_writer_are_removed_and_nothing_else(tmp_path):
    """What a SIGKILL mid-write leaves: `atomic_path`'s own temporary names (taken from
    inside its `with`, as a killed process would leave them), beside files that stay."""
    killed = tmp_path / "killed"
    killed.mkdir()
    left = []
    for name in LEFT_BEHIND:
        with _atomic.atomic_path(tmp_path / name) as tmp:
            with open(tmp, "w") as f:
                f.write("partial")
            os.link(tmp, killed / os.path.basename(tmp))
            left.append(os.path.basename(tmp))
    stay = ["last.keras", ".lock", "notes.tmp", ".best.keras.tmp.keras", ".x.abc.tmp"]
    for name in stay:
        (killed / name).write_text("keep")
    (killed / ".backup-worker-1").mkdir()  # a folder is never removed
    assert sorted(_atomic.remove_leftovers(killed)) == sorted(left)
    assert sorted(os.listdir(killed)) == sorted([*stay, ".backup-worker-1"])
    assert _atomic.remove_leftovers(tmp_path / "missing") == []


def test_a_path_that_is_no_file_or_folder_is_never_replaced(tmp_path):
    # a FIFO stands for /dev/null, pipes and sockets; os.replace would swap it for a file
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="neither a file nor a folder"):
        with _atomic.atomic_path(fifo) as tmp:
            raise AssertionError(f"the write to {tmp} began")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe.json"]  # no temporary left
