"""Reading and atomic writing of `.safetensors` files with the `safetensors` package's NumPy API.

safetensors (https://github.com/huggingface/safetensors) stores a JSON header of names,
dtypes, shapes and byte offsets followed by raw little-endian data, so reading it executes
nothing. No torch is needed. bfloat16 tensors (dtype "BF16", which NumPy lacks) are read
through `ml_dtypes` and returned as float32.
"""

from __future__ import annotations

import json
import logging
import os
import struct

import numpy as np

from keras_vit._atomic import atomic_path
from keras_vit.checkpoints.base import limits
from keras_vit.checkpoints.base.errors import CheckpointError

logger = logging.getLogger(__name__)

HEADER_LIMIT = 100 * 1024 * 1024  # safetensors' own bound on the JSON header


def read_header(path) -> dict | None:
    """The JSON header of a safetensors file, or None when the file is not one.

    Raises:
        CheckpointError: a safetensors header whose data lies past the end of the file
            (a truncated download).
    """
    size = os.path.getsize(path)
    with open(path, "rb") as stream:
        start = stream.read(9)
        if len(start) < 9 or start[8:9] != b"{":
            return None
        (length,) = struct.unpack("<Q", start[:8])
        if length > HEADER_LIMIT:
            return None
        if 8 + length > size:
            raise CheckpointError(
                f"{path} is a truncated safetensors file: its header needs {8 + length} bytes, "
                f"the file has {size}."
            )
        stream.seek(8)
        try:
            header = json.loads(stream.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
    if not isinstance(header, dict):
        return None
    ends = [
        entry["data_offsets"][1]
        for key, entry in header.items()
        if key != "__metadata__"
        and isinstance(entry, dict)
        and isinstance(entry.get("data_offsets"), list)
        and len(entry["data_offsets"]) == 2
        and isinstance(entry["data_offsets"][1], int)
    ]
    needed = 8 + length + max(ends, default=0)
    if needed > size:
        raise CheckpointError(
            f"{path} is a truncated safetensors file: its tensors need {needed} bytes, the "
            f"file has {size}. Download it again."
        )
    limits.check_safetensors_header(path, header, size - 8 - length)
    return header


def tensor_names(header: dict) -> list[str]:
    """The tensor names of a header (without `__metadata__`)."""
    return [key for key in header if key != "__metadata__"]


def read_safetensors(path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Reads every tensor of a safetensors file as NumPy arrays.

    Args:
        path: a local `.safetensors` file.

    Returns:
        `(arrays, metadata)`: `{name: array}` (bfloat16 converted to float32) and the header's
        `__metadata__` strings (empty when there are none).

    Raises:
        FileNotFoundError: `path` does not exist.
        CheckpointError: not a safetensors file, a truncated one, or a header whose
            entries are unsound (`keras_vit.checkpoints.base.limits.check_safetensors_header`:
            reading then allocates at most what the file holds, twice that for bfloat16),
            or a NaN or infinity in a tensor (named; `limits.check_finite`).
    """
    from safetensors import SafetensorError

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Checkpoint file not found: {path}")
    header = read_header(path)
    if header is None:
        raise CheckpointError(f"{path} is not a safetensors file.")
    metadata = dict(header.get("__metadata__") or {})
    names = tensor_names(header)
    try:
        arrays = _read_arrays(path, header, names)
    except SafetensorError as error:  # the checks above leave little; name the file
        raise CheckpointError(f"{path} is not a readable safetensors file ({error}).") from None
    limits.check_finite(path, arrays)
    logger.debug("Read %d tensors from %s", len(arrays), path)
    return arrays, metadata


def _read_arrays(path, header: dict, names: list) -> dict[str, np.ndarray]:
    """{name: array} of a checked safetensors file (bfloat16 as float32)."""
    from safetensors import deserialize, safe_open

    if any(header[name]["dtype"] == "BF16" for name in names):
        import ml_dtypes

        with open(path, "rb") as stream:
            entries = deserialize(stream.read())
        arrays = {}
        for name, entry in entries:
            dtype = ml_dtypes.bfloat16 if entry["dtype"] == "BF16" else _numpy_dtype(entry)
            array = np.frombuffer(bytes(entry["data"]), dtype=dtype).reshape(entry["shape"])
            arrays[name] = array.astype(np.float32) if entry["dtype"] == "BF16" else array
        arrays = {name: arrays[name] for name in names}
    else:
        with safe_open(path, framework="np") as stream:
            arrays = {name: stream.get_tensor(name) for name in names}
    return arrays


def _numpy_dtype(entry) -> np.dtype:
    from safetensors.numpy import _getdtype

    return np.dtype(_getdtype(entry["dtype"]))


def write_safetensors(path, arrays: dict[str, np.ndarray], metadata=None) -> None:
    """Writes `arrays` to `path` as safetensors, atomically (temporary file, then rename).

    Args:
        path: destination file.
        arrays: `{name: array}`; arrays are made C-contiguous.
        metadata: optional `{str: str}` stored in the header's `__metadata__`.
    """
    from safetensors.numpy import save_file

    tensors = {name: np.ascontiguousarray(value) for name, value in arrays.items()}
    with atomic_path(path) as temporary:
        save_file(tensors, temporary, metadata=metadata)
    logger.debug("Wrote %d tensors to %s", len(tensors), path)
