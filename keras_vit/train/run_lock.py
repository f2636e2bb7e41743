"""One writer per run directory: a lock file holding the owner's process id.

`keras_vit.train.runs.fit_run` holds `RUN_DIR/.lock` while it trains; a second process (a second
`keras-vit train --resume` on the same folder, say) is refused at once instead of writing the
same files. The lock file is JSON: `{"pid": ..., "host": ..., "started": <unix time>}`. A lock
left behind by a process that died (SIGKILL, power loss) is stale: if its host is this host
and no process has its pid, the next run takes it over (logged). A lock from another host
cannot be checked from here and counts as live; remove the file by hand if that host's run is
gone.

The lock is taken with `open(..., O_CREAT | O_EXCL)`, atomic on local and NFSv3+ file
systems; a stale lock is taken over by an atomic rename of a new lock file onto it, then read
back to make sure this process won any race with another taker.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time

from keras_vit import _atomic
from keras_vit.spec import run_files

logger = logging.getLogger(__name__)


class RunDirLockedError(RuntimeError):
    """Another live process holds the run directory's lock."""


def _owner_record() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": round(time.time(), 3)}


def _read(path) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # unreadable or half-written by a dead owner: stale
    return record if isinstance(record, dict) else {}


def pid_alive(pid) -> bool:
    """True if a process with id `pid` exists on this host."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


def is_stale(record: dict) -> bool:
    """True if the lock `record` belongs to a process of this host that no longer runs."""
    if record.get("host") not in (None, socket.gethostname()):
        return False
    return not pid_alive(record.get("pid"))


def acquire(run_dir) -> str:
    """Takes the lock of `run_dir` (which must exist) for this process.

    Returns:
        The path of the lock file.

    Raises:
        RunDirLockedError: a live process (named by pid and host) holds the lock.
    """
    path = os.path.join(os.fspath(run_dir), run_files.LOCK_FILE)
    mine = _owner_record()
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return _take_over(path, mine)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(mine, f)
    return path


def check_free(run_dir) -> None:
    """Raises `RunDirLockedError` if another live process holds the lock of `run_dir`."""
    path = os.path.join(os.fspath(run_dir), run_files.LOCK_FILE)
    record = _read(path)
    if record is not None and not is_stale(record) and not _is_mine(record):
        raise _locked_error(path, record)


def _is_mine(record: dict) -> bool:
    return record.get("pid") == os.getpid() and record.get("host") == socket.gethostname()


def _locked_error(path, record: dict) -> RunDirLockedError:
    return RunDirLockedError(
        f"Run directory {os.path.dirname(path)!r} is in use by process {record.get('pid')} "
        f"on {record.get('host')!r} (lock file {path}); wait for it to finish, or stop it, "
        "before training into this folder."
    )


def _take_over(path, mine: dict) -> str:
    record = _read(path)
    if record is not None and not is_stale(record):
        if _is_mine(record):
            return path
        raise _locked_error(path, record)
    logger.warning(
        "Taking over the stale lock %s of process %s (no longer running)",
        path,
        (record or {}).get("pid"),
    )
    _atomic.write_json(path, mine)
    if _read(path) != mine:  # another process took it over at the same moment
        return _take_over(path, mine)
    return path


def release(path) -> None:
    """Removes the lock file at `path` if this process still owns it."""
    record = _read(path)
    if record and record.get("pid") == os.getpid():
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


@contextlib.contextmanager
def locked(run_dir):
    """Holds the lock of `run_dir` for the body (see `acquire`)."""
    path = acquire(run_dir)
    try:
        yield path
    finally:
        release(path)
