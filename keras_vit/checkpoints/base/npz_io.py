"""Safe reading and atomic writing of `.npz` checkpoint files (flat keys joined by "/").

Reading never unpickles (`allow_pickle=False`); bfloat16 arrays (stored by NumPy as raw
2-byte void, as big_vision writes them) are read as float32. Object arrays, pickled
payloads, files that are not zip archives and truncated archives all raise
`CheckpointError` naming the file and the array. Writing goes to a temporary file in the
destination folder, then `os.replace`.
"""

from __future__ import annotations

import logging
import os
import zipfile
import zlib

import numpy as np

from keras_vit._atomic import atomic_path
from keras_vit.checkpoints.base import limits
from keras_vit.checkpoints.base.errors import CheckpointError

__all__ = ["read_npz", "write_npz"]

logger = logging.getLogger(__name__)


def _read_member(archive, path, key):
    try:
        array = archive[key]
    except ValueError as error:  # object arrays / pickled members with allow_pickle=False
        raise CheckpointError(
            f"Array {key!r} in {path} holds Python objects (dtype=object), which would need "
            f"unpickling; checkpoints must contain numeric arrays only. ({error})"
        ) from None
    except (zipfile.BadZipFile, EOFError, OSError, zlib.error, KeyError) as error:
        raise CheckpointError(
            f"Array {key!r} in {path} cannot be read; the file is truncated or corrupt "
            f"({type(error).__name__}: {error})."
        ) from None
    if isinstance(array, np.ndarray) and array.dtype.kind == "V" and array.dtype.itemsize == 2:
        # bfloat16 (big_vision saves them): NumPy stores the ml_dtypes type as raw 2 bytes.
        import ml_dtypes

        array = array.view(ml_dtypes.bfloat16).astype(np.float32)
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "fiub":
        raise CheckpointError(
            f"Array {key!r} in {path} has dtype {getattr(array, 'dtype', type(array))}; "
            "expected a numeric (float) array."
        )
    return array


def _not_npz_message(path, error) -> str:
    """Says whether a refused file is a pickle or simply not an array file at all."""
    with open(path, "rb") as stream:
        is_pickle = stream.read(1) == b"\x80"
    if is_pickle:
        return f"{path} is a pickle, not an .npz archive of arrays; it was not unpickled ({error})."
    return (
        f"{path} is not an .npz archive (a zip of .npy arrays) nor a .npy file; "
        "check that it is an official checkpoint and was fully downloaded."
    )


def read_npz(path) -> dict[str, np.ndarray]:
    """Reads every array of an `.npz` file into a dict, without unpickling anything.

    Args:
        path: a local file path (str or os.PathLike).

    Returns:
        `{key: array}` with the file's own keys and dtypes, in the file's order.

    Raises:
        FileNotFoundError: if `path` does not exist.
        CheckpointError: not a zip-based npz (e.g. a pickle or a single `.npy`), a truncated
            or corrupt archive, an object array, a non-numeric array, or a NaN or infinity
            in an array (named; `limits.check_finite`).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Checkpoint file not found: {path}")
    limits.check_npz_archive(path, os.path.getsize(path))  # zip bombs, lying .npy headers
    try:
        archive = np.load(path, allow_pickle=False)
    except ValueError as error:  # neither zip nor .npy: numpy would have to unpickle it
        raise CheckpointError(_not_npz_message(path, error)) from None
    except (zipfile.BadZipFile, EOFError, OSError) as error:
        raise CheckpointError(
            f"{path} is not a readable .npz archive; it may be truncated or corrupt "
            f"({type(error).__name__}: {error})."
        ) from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise CheckpointError(
            f"{path} holds a single .npy array, not an .npz archive of named arrays."
        )
    with archive:
        arrays = {key: _read_member(archive, path, key) for key in archive.files}
    limits.check_finite(path, arrays, what="array")
    logger.debug("Read %d arrays from %s", len(arrays), path)
    return arrays


def write_npz(path, arrays: dict[str, np.ndarray]) -> None:
    """Writes `arrays` to `path` as an uncompressed `.npz`, atomically.

    The data goes to a temporary file in the same folder, which is then renamed over `path`
    (`os.replace`), so a crash never leaves a half-written checkpoint under the final name.
    The name is used as given (no ".npz" is appended).

    Raises:
        ValueError: if a key is empty or an array is not numeric.
    """
    path = os.fspath(path)
    for key, array in arrays.items():
        if not key or np.asarray(array).dtype.kind not in "fiub":
            raise ValueError(f"Cannot write array {key!r}: keys must be non-empty and numeric.")
    with atomic_path(path) as temporary, open(temporary, "wb") as stream:
        np.savez(stream, **arrays)
    logger.debug("Wrote %d arrays to %s", len(arrays), path)
