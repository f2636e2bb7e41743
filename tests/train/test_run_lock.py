"""Tests of keras_vit.train.run_lock: one live writer per run directory, stale locks taken over."""

import json
import os
import socket
import subprocess
import sys

import pytest

from keras_vit.cli.main import main
from keras_vit.spec import run_files
from keras_vit.train import run_lock


@pytest.fixture
def other_process():
    """A live process that is not this one (its pid goes into a hand-written lock file)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield process
    if process.poll() is None:
        process.kill()
    process.wait()


def write_lock(run_dir, pid):
    record = {"pid": pid, "host": socket.gethostname(), "started": 0.0}
    (run_dir / run_files.LOCK_FILE).write_text(json.dumps(record))


def test_lock_of_a_live_process_refuses_then_a_dead_ones_is_taken_over(tmp_path, other_process):
    write_lock(tmp_path, other_process.pid)
    with pytest.raises(run_lock.RunDirLockedError, match=f"in use by process {other_process.pid}"):
        run_lock.acquire(tmp_path)
    other_process.kill()
    other_process.wait()
    path = run_lock.acquire(tmp_path)  # stale now: taken over
    assert json.loads(open(path).read())["pid"] == os.getpid()
    run_lock.release(path)
    assert os.listdir(tmp_path) == []


def test_fresh_lock_and_release(tmp_path):
    with run_lock.locked(tmp_path) as path:
        assert json.loads(open(path).read())["pid"] == os.getpid()
        assert run_lock.acquire(tmp_path) == path  # the owner may take it again
    assert not os.path.exists(path)


def test_half_written_lock_is_stale(tmp_path):
    (tmp_path / run_files.LOCK_FILE).write_text('{"pid": 12')
    run_lock.release(run_lock.acquire(tmp_path))


def test_lock_of_another_host_counts_as_live(tmp_path):
    record = {"pid": 1, "host": "another-host.invalid", "started": 0.0}
    (tmp_path / run_files.LOCK_FILE).write_text(json.dumps(record))
    with pytest.raises(run_lock.RunDirLockedError, match="another-host.invalid"):
        run_lock.acquire(tmp_path)


def test_second_train_resume_on_a_live_run_exits_2_in_one_line(tmp_path, other_process, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / run_files.CONFIG_FILE).write_text(json.dumps({"run": {}}))
    write_lock(run_dir, other_process.pid)
    assert main(["train", "--resume", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("keras-vit train: error:") and len(err.splitlines()) == 1, err
    assert f"in use by process {other_process.pid}" in err
    assert json.loads((run_dir / run_files.LOCK_FILE).read_text())["pid"] == other_process.pid
