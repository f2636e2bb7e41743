"""Atomic file writes: write to a temporary path in the same folder, then `os.replace`.

A process killed at any moment (even SIGKILL) leaves either the old file or the new one,
never a half-written file under the final name: `os.replace` is atomic on POSIX and Windows
when source and target are on the same file system, which a sibling temp path guarantees.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile

# `atomic_path`'s temporary names: ".<name>.<8 random characters of mkstemp>.tmp<suffix>"
TEMP_NAME = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp(\.[\w.]+)?$")


class WriteError(OSError):
    """A file could not be written (disk full, I/O error, ...); the previous file is intact.

    `filename` is the final path (not the temporary one), `errno`/`strerror` the cause.
    """

    def __init__(self, path, cause: OSError):
        errno = cause.errno if cause.errno is not None else 0
        super().__init__(errno, cause.strerror or str(cause), os.fspath(path))

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"


def replace_problem(path) -> str | None:
    """Why `path` must not be replaced by a written file or folder, or None when it may be:
    an existing path that is neither a file nor a folder (a device such as /dev/null, a
    pipe, a socket) would be swapped for a regular file by `os.replace`."""
    path = os.fspath(path)
    if os.path.exists(path) and not (os.path.isfile(path) or os.path.isdir(path)):
        return (
            f"{path!r} exists and is neither a file nor a folder (a device, pipe or socket); "
            "keras_vit writes and replaces only files and folders"
        )
    return None


@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary sibling of `path` (same suffix) that replaces `path` on success.

    Keras and NumPy pick the format from the file name (`.keras`, `.weights.h5`, `.npz`,
    `.png`), so the temp name keeps the full suffix of `path`. If the body raises, the temp
    file is removed and `path` is left as it was; an `OSError` (disk full, I/O error) is
    raised again as `WriteError` naming `path`. A `path` that is neither a file nor a folder
    (`replace_problem`: /dev/null, a pipe) raises ValueError before anything is written.

    Example:
        with atomic_path("run/best.keras") as tmp:
            model.save(tmp)
    """
    path = os.fspath(path)
    problem = replace_problem(path)
    if problem:
        raise ValueError(problem)
    folder, name = os.path.split(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    suffix = _full_suffix(name)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=f".tmp{suffix}", dir=folder)
    os.close(fd)
    os.remove(tmp)  # writers such as h5py/zipfile create the file themselves
    try:
        yield tmp
        if os.path.isfile(tmp):  # some writers create 0600 files; give the umask's mode
            set_default_permissions(tmp)
        os.replace(tmp, path)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        if isinstance(error, OSError) and not isinstance(error, WriteError):
            raise WriteError(path, error) from error
        raise


def remove_leftovers(folder) -> list[str]:
    """Removes the temporary files `atomic_path` left in `folder` (not in its sub-folders)
    when its process was killed mid-write (SIGKILL runs no cleanup); returns their names.

    Call it only while no other process may be writing there (a run directory's lock held):
    a live writer's temporary file has the same form. A missing folder is no error.
    """
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    removed = []
    for name in sorted(names):
        path = os.path.join(folder, name)
        if TEMP_NAME.match(name) and os.path.isfile(path):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
                removed.append(name)
    return removed


def set_default_permissions(path: str) -> None:
    """chmod `path` (a file, or a folder and everything in it) to the mode a new file gets
    under the current umask: folders 0o777 & ~umask, files at least 0o666 & ~umask (execute
    bits kept). Writers that create their files 0600 (temporary-file APIs) would otherwise
    leave them unreadable to a serving process running as another user."""
    umask = os.umask(0)
    os.umask(umask)

    def widen(file_path):
        os.chmod(file_path, os.stat(file_path).st_mode & 0o777 | (0o666 & ~umask))

    if os.path.isfile(path):
        widen(path)
        return
    for root, _, files in os.walk(path):
        os.chmod(root, 0o777 & ~umask)
        for name in files:
            widen(os.path.join(root, name))


def _full_suffix(name: str) -> str:
    """`.weights.h5` for `latest.weights.h5`, `.keras` for `best.keras`, '' for no suffix."""
    if name.endswith(".weights.h5"):
        return ".weights.h5"
    return os.path.splitext(name)[1]


def write_text(path, text: str) -> None:
    """Writes `text` (UTF-8) to `path` atomically, flushed to disk before the rename."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())


def write_json(path, data) -> None:
    """Writes `data` as indented JSON to `path` atomically."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def read_json(path, default=None):
    """Reads JSON from `path`, or returns `default` if the file does not exist."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return default
