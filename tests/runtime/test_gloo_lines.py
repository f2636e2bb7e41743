"""keras_vit.runtime.gloo_lines: gloo's "[Gloo] Rank N is connected to M peer ranks" lines
taken off file descriptor 1 while everything else written there, by Python or straight to
the file descriptor, arrives unchanged and in order; stderr untouched; output written just
before exit or before an uncaught error still arrives; a partial line passes at once.

Each check runs a small Python process (no TensorFlow, no JAX; ~0.2 s), since the filter
replaces its process's fd 1. The real gloo lines of a two-process JAX run are checked by
tests/runtime/test_jax_cluster.py."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import textwrap

import pytest

from keras_vit.runtime import gloo_lines
from tests.backends.subset import ROOT

CONNECTED = (
    "[Gloo] Rank 1 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1"
)


def run(body: str, **options) -> subprocess.CompletedProcess:
    """`body` run after `gloo_lines.hide()` in a fresh Python process."""
    script = "import os, sys\nfrom keras_vit.runtime import gloo_lines\n"
    script += "assert gloo_lines.hide()\n" + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60,
        **options,
    )  # fmt: skip


def test_connection_lines_are_dropped_and_everything_else_passes_in_order():
    done = run(f"""
        print("epoch 1", flush=True)
        os.write(1, b"{CONNECTED}\\n")
        os.write(1, b"[Gloo] Rank 0 is conn")  # one line in two writes
        os.write(1, b"ected to 3 peer ranks. Expected number of connected peer ranks is : 3\\n")
        os.write(1, b"loss 0.5\\n[Gloo] error: connection refused\\n")
        os.write(1, b"{CONNECTED} (more)\\n")
        os.write(1, b"[Gl")
        os.write(1, b"oo!]\\n")
        print("{CONNECTED}", file=sys.stderr)
        print("epoch 2")  # not flushed: drained at exit
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "epoch 1\nloss 0.5\n[Gloo] error: connection refused\n"
        f"{CONNECTED} (more)\n[Gloo!]\nepoch 2\n"
    )
    assert done.stderr == CONNECTED + "\n"  # only stdout is filtered


def test_an_uncaught_error_still_shows_with_the_output_before_it():
    done = run(f"""
        print("started")
        os.write(1, b"{CONNECTED}\\n")
        raise RuntimeError("gloo peer 1 went away")
    """)
    assert done.returncode == 1
    assert done.stdout == "started\n"
    assert "RuntimeError: gloo peer 1 went away" in done.stderr


def test_a_partial_line_passes_at_once():
    """A progress bar's line without its newline reaches the reader while the process
    still runs (it waits on stdin for the reader's answer)."""
    script = "import os, sys\nfrom keras_vit.runtime import gloo_lines\ngloo_lines.hide()\n"
    script += "os.write(1, b'\\r3/8 [==>   ]')\nsys.stdin.readline()\nprint(' done')\n"
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        seen = b""
        while b"]" not in seen:
            ready, _, _ = select.select([process.stdout], [], [], 20)
            assert ready, f"the partial line is held back: {seen} after 20 s"
            seen += os.read(process.stdout.fileno(), 100) or pytest.fail(f"EOF after {seen}")
        process.stdin.write(b"go\n")
        process.stdin.flush()
        rest = process.stdout.read()
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
    assert seen + rest == b"\r3/8 [==>   ] done\n"


@pytest.mark.parametrize(
    "data, written, held",
    [
        (b"loss 0.5\n", b"loss 0.5\n", b""),
        (b"loss\n[Gloo] Rank 0 is", b"loss\n", b"[Gloo] Rank 0 is"),
        (b"loss\n[Glo", b"loss\n", b"[Glo"),
        (b"[Gloo] Rank 0 is x\nok", b"[Gloo] Rank 0 is x\nok", b""),  # finished: the caller
        (b"x" * 3 + b"[Gloo] Rank " + b"y" * 600, b"x" * 3 + b"[Gloo] Rank " + b"y" * 600, b""),
    ],
)
def test_only_a_tail_that_may_become_a_connection_line_is_held(data, written, held):
    assert gloo_lines.split_pending(data) == (written, held)
