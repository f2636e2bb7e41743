"""JAX's persistent compilation cache for the command line (keras_vit.runtime.jax_compile_cache):
where it lives, how it is turned off, and on JAX that a compiled program lands there."""

from __future__ import annotations

import os
import subprocess
import sys

import keras
import pytest

from keras_vit.runtime import jax_compile_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_cache_sits_in_the_user_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("KERAS_VIT_CACHE_DIR", str(tmp_path))
    assert jax_compile_cache.cache_dir() == str(tmp_path / "jax_compilation_cache")
    monkeypatch.delenv("KERAS_VIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert jax_compile_cache.cache_dir() == str(
        tmp_path / "xdg" / "keras_vit" / "jax_compilation_cache"
    )


@pytest.mark.parametrize(
    "value, wanted", [(None, True), ("", True), ("1", True), ("off", False), ("OFF", False),
                      ("0", False), ("false", False), ("no", False)],
)  # fmt: skip
def test_the_environment_variable_turns_it_off(value, wanted):
    environ = {} if value is None else {jax_compile_cache.ENV: value}
    assert jax_compile_cache.wanted(environ) is wanted


def test_nothing_changes_on_other_backends():
    if keras.backend.backend() == "jax":
        pytest.skip("another backend")
    assert jax_compile_cache.enable({}) is None


CHILD = """
import json, os, sys
import jax, jax.numpy as jnp
from keras_vit.runtime import jax_compile_cache
jax_compile_cache.MIN_COMPILE_TIME_S = 0.0  # every program, however fast it compiles
folder = jax_compile_cache.enable()
x = jnp.arange(256.0).reshape(16, 16)
jax.jit(lambda a: jnp.tanh(a @ a.T).sum())(x).block_until_ready()
print(json.dumps({"folder": folder}))
"""


def _run_child(tmp_path, **env):
    path = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    cache = str(tmp_path / "cache")
    environment = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu",
                   "KERAS_VIT_CACHE_DIR": cache, "PYTHONPATH": path, **env}  # fmt: skip
    environment.pop("JAX_COMPILATION_CACHE_DIR", None)
    if "KERAS_VIT_JAX_COMPILE_CACHE" not in env:  # tests/conftest.py turns it off
        environment.pop("KERAS_VIT_JAX_COMPILE_CACHE", None)
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          env=environment, cwd=tmp_path, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.jax
def test_on_jax_a_compiled_program_is_written_to_the_user_cache_folder(tmp_path):
    pytest.importorskip("jax")
    folder = tmp_path / "cache" / "jax_compilation_cache"
    assert str(folder) in _run_child(tmp_path)
    assert folder.is_dir() and os.listdir(folder)
    # the working folder (a run directory's place) holds nothing of it
    assert sorted(os.listdir(tmp_path)) == ["cache"]
    off = tmp_path / "off"
    off.mkdir()
    assert '"folder": null' in _run_child(off, KERAS_VIT_JAX_COMPILE_CACHE="off")
    assert not (off / "cache").exists()
