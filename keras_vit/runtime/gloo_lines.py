"""gloo's connection lines kept off standard output.

JAX's CPU collectives over gloo (`keras_vit.runtime.jax_cluster`) print one line to stdout
from C++ (`std::cout`, gloo's `tcp/context.cc`) each time a process connects to its peers,
at the first collective of every new group of processes, during training:

    [Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1

gloo has no switch for it (jaxlib 0.10's gloo reads no `GLOO_LOG_LEVEL`), and it comes
after `jax.distributed.initialize`, whenever a compiled step first reaches across
processes. `hide()` therefore routes file descriptor 1 through a pipe for the rest of the
process: a thread copies every byte to the real stdout except whole lines matching
`GLOO_LINE` exactly. Only stdout is filtered (errors, tracebacks and C++ logs go to stderr,
untouched); a line that merely mentions gloo, or ends differently, passes; a partial line
(a progress bar redrawn with a carriage return) is passed at once unless it could be the
start of a connection line. At interpreter exit the pipe is drained and fd 1 restored.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import sys
import threading

logger = logging.getLogger(__name__)

GLOO_LINE = re.compile(
    rb"\[Gloo\] Rank \d+ is connected to \d+ peer ranks\. "
    rb"Expected number of connected peer ranks is : \d+\r?\n"
)
PREFIX = b"[Gloo] Rank "
HELD_AT_MOST = 512  # bytes of an unfinished candidate line held back before passing them
DRAIN_TIMEOUT_S = 5.0

_installed: _Filter | None = None


class _Filter:
    """Fd 1 replaced by a pipe whose reader thread writes to the saved original fd."""

    def __init__(self):
        sys.stdout.flush()
        self.original = os.dup(1)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 1)
        os.close(write_end)
        self.read_end = read_end
        self.hidden = 0
        self.thread = threading.Thread(target=self._copy, name="gloo-lines", daemon=True)
        self.thread.start()

    def _copy(self) -> None:
        pending = b""
        while chunk := os.read(self.read_end, 65536):
            passed, pending = split_pending(pending + chunk)
            self._write(passed)
        self._write(GLOO_LINE.sub(b"", pending))
        os.close(self.read_end)

    def _write(self, data: bytes) -> None:
        kept = GLOO_LINE.sub(b"", data)
        self.hidden += data.count(PREFIX) - kept.count(PREFIX)
        while kept:
            kept = kept[os.write(self.original, kept) :]

    def close(self) -> None:
        """Drains the pipe and puts the original stdout back on fd 1."""
        try:
            sys.stdout.flush()
        except (OSError, ValueError):  # stdout closed already
            pass
        os.dup2(self.original, 1)  # closes the pipe's last write end: the reader sees EOF
        self.thread.join(DRAIN_TIMEOUT_S)
        if not self.thread.is_alive():  # else a child holds the pipe: the thread writes on
            os.close(self.original)


def split_pending(data: bytes) -> tuple[bytes, bytes]:
    """(what can be written now, what to hold): held is an unfinished tail that could still
    become a connection line (a prefix of `PREFIX`, or `PREFIX` and no newline yet, under
    `HELD_AT_MOST` bytes). Whole connection lines are left in the written part (removed by
    the caller)."""
    start = data.rfind(PREFIX)
    if start >= 0 and b"\n" not in data[start:] and len(data) - start < HELD_AT_MOST:
        return data[:start], data[start:]
    for size in range(min(len(PREFIX) - 1, len(data)), 0, -1):
        if data.endswith(PREFIX[:size]):
            return data[:-size], data[-size:]
    return data, b""


def hide() -> bool:
    """Filters gloo's connection lines out of this process's fd 1 from now on (idempotent).
    Returns False, changing nothing, where fd 1 is closed or not a file descriptor."""
    global _installed
    if _installed is not None:
        return True
    try:
        os.fstat(1)
        _installed = _Filter()
    except OSError as error:
        logger.debug("gloo's connection lines stay on stdout: %s", error)
        return False
    atexit.register(restore)
    return True


def restore() -> int:
    """Ends the filtering (at exit by `hide`'s atexit hook): the pipe drained, fd 1 back to
    the original stdout. Returns how many connection lines were hidden (0 when none were)."""
    global _installed
    if _installed is None:
        return 0
    installed, _installed = _installed, None
    installed.close()
    logger.debug("hid %d gloo connection line(s) from stdout", installed.hidden)
    return installed.hidden
