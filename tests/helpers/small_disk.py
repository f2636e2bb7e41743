"""A small tmpfs for disk-full tests (root only; tests using it are skipped elsewhere)."""

import contextlib
import subprocess

import pytest


@contextlib.contextmanager
def small_disk(folder, size_kib: int):
    """Mounts a `size_kib` KiB tmpfs on `folder` (created) for the body, then unmounts it.

    Skips the calling test where mounting is not permitted (not root, no CAP_SYS_ADMIN).
    """
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
