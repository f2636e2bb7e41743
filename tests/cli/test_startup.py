"""cli/startup and the helpers it shares with keras_vit/_lazy: KERAS_VIT_VERBOSE parsing,
OS-level stderr (fd 2, where TensorFlow's C++ start-up block goes) silenced only inside the
block, and the quiet TensorFlow start."""

import logging
import os

import pytest

from keras_vit import _lazy
from keras_vit.cli import startup
from tests.import_order import imports_asked


@pytest.mark.parametrize(
    "value, verbose",
    [("1", True), ("true", True), (" YES ", True), ("True", True), ("0", False),
     ("no", False), ("", False), ("2", False), (None, False)],
)  # fmt: skip
def test_verbose_from_env(monkeypatch, value, verbose):
    if value is None:
        monkeypatch.delenv(_lazy.VERBOSE_ENV, raising=False)
    else:
        monkeypatch.setenv(_lazy.VERBOSE_ENV, value)
    assert _lazy.verbose_from_env() is verbose


def test_fd2_is_silenced_inside_the_block_only(capfd):
    os.write(2, b"before\n")
    with _lazy.stderr_fd_silenced():
        os.write(2, b"hidden C++ log\n")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "before\nafter\n"


def test_fd2_comes_back_when_the_block_raises(capfd):
    with pytest.raises(RuntimeError, match="boom"), _lazy.stderr_fd_silenced():
        os.write(2, b"hidden\n")
        raise RuntimeError("boom")
    os.write(2, b"visible\n")
    assert capfd.readouterr().err == "visible\n"


def test_quiet_start_raises_the_python_loggers(monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    for name in ("tensorflow", "absl"):
        monkeypatch.setattr(logging.getLogger(name), "level", logging.INFO)
    startup.start_tensorflow(verbose=False)
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "2"
    assert logging.getLogger("tensorflow").level == logging.ERROR
    assert logging.getLogger("absl").level == logging.ERROR


def test_the_users_cpp_log_level_wins(monkeypatch):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    startup.start_tensorflow(verbose=False)
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0"


def test_verbose_start_leaves_the_loggers(monkeypatch):
    monkeypatch.setattr(logging.getLogger("tensorflow"), "level", logging.INFO)
    startup.start_tensorflow(verbose=True)
    assert logging.getLogger("tensorflow").level == logging.INFO


@pytest.mark.parametrize("backend, seen", [("torch", "['keras', 'tensorflow']"),
                                           ("tensorflow", "['tensorflow', 'keras']")])  # fmt: skip
def test_under_pytorch_keras_is_imported_before_tensorflow(tmp_path, backend, seen):
    """In a fresh process under KERAS_BACKEND=torch the quiet start asks for `keras` before
    `tensorflow` (PyTorch imported after TensorFlow crashes the process); on TensorFlow it does
    not ask for Keras first. A stub `keras` package stands in (no torch needed here)."""
    code = "from keras_vit.cli import startup\nstartup.start_tensorflow(False)\n"
    assert imports_asked(tmp_path, backend, code) == seen
