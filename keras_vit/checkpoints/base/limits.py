"""Checks on checkpoint files from strangers, made before their arrays are read or a model
is built: every failure is a `CheckpointError` naming the file and the problem.

- safetensors (https://github.com/huggingface/safetensors, the format's README): each header
  entry has a known dtype, a shape of non-negative integers and `data_offsets [begin, end]`
  inside the data area, with `end - begin` = prod(shape) x itemsize; entries do not overlap.
  Reading then allocates no more than the file holds (float32 from bfloat16: twice that).
- `.npz` (a zip of `.npy` members, NumPy's `numpy.lib.format`): each member's declared
  uncompressed size is at most `MAX_EXPANSION` times the archive's size (a deflated stream
  of zeros can claim gigabytes in a few kilobytes), and its `.npy` header's shape x itemsize
  fits in the member (NumPy allocates the header's shape before reading a zip member).
- config.json (Hugging Face `ViTConfig` fields; timm's `model_args`): the sizes it names are
  positive integers below `MAX_SIZE`, and equal the array shapes where the arrays give them.

Allocation bound of the readers that use these checks: at most `ALLOCATION_FACTOR` x the
file's size, plus `ALLOCATION_SLACK` bytes.
"""

from __future__ import annotations

import math
import tokenize
import zipfile
import zlib

import numpy as np

from keras_vit.checkpoints.base.errors import CheckpointError

MAX_EXPANSION = 16
"""Largest uncompressed / file size ratio of an npz member (float weights deflate ~1.1x)."""
ZIP_SLACK = 1 << 20
ALLOCATION_FACTOR = 8
ALLOCATION_SLACK = 64 << 20
MAX_SIZE = 1 << 20
"""Largest width, depth, head count, patch or image side a config.json may name."""

SAFETENSORS_ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2,
    "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip


def check_safetensors_header(path, header: dict, data_size: int) -> None:
    """CheckpointError unless every tensor entry of a parsed safetensors `header` is sound
    (see the module docstring); `data_size` is the file's size after the header."""
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            if entry is not None and not (
                isinstance(entry, dict) and all(isinstance(v, str) for v in entry.values())
            ):
                raise CheckpointError(f"{path}: __metadata__ must map strings to strings.")
            continue
        spans.append((*_entry_span(path, name, entry, data_size), name))
    spans.sort()
    for (_, end, first), (begin, _, second) in zip(spans, spans[1:], strict=False):
        if begin < end:
            raise CheckpointError(
                f"{path}: tensors {first!r} and {second!r} overlap in the file (their "
                "data_offsets share bytes)."
            )


def _entry_span(path, name, entry, data_size: int) -> tuple[int, int]:
    if not isinstance(entry, dict):
        raise CheckpointError(f"{path}: header entry {name!r} is not an object.")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in SAFETENSORS_ITEMSIZE:
        raise CheckpointError(f"{path}: tensor {name!r} has an unknown dtype {dtype!r}.")
    if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
        raise CheckpointError(f"{path}: tensor {name!r} has an invalid shape {shape!r}.")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_int(o) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1] <= data_size
    ):
        raise CheckpointError(
            f"{path}: tensor {name!r} has data_offsets {offsets!r} outside the file's "
            f"{data_size} data bytes (truncated or corrupt)."
        )
    needed = math.prod(shape) * SAFETENSORS_ITEMSIZE[dtype]
    if offsets[1] - offsets[0] != needed:
        raise CheckpointError(
            f"{path}: tensor {name!r} ({dtype} {shape}) needs {needed} bytes, its "
            f"data_offsets {offsets} hold {offsets[1] - offsets[0]}."
        )
    return offsets[0], offsets[1]


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_npz_archive(path, file_size: int) -> None:
    """CheckpointError for an npz whose members would decompress or allocate far more than
    the file holds (see the module docstring); a file that is not a zip is left to NumPy."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        return  # not a zip (a pickle, a .npy, garbage): npz_io names it
    limit = MAX_EXPANSION * file_size + ZIP_SLACK
    with archive:
        for info in archive.infolist():
            if info.file_size > limit:
                raise CheckpointError(
                    f"{path}: zip entry {info.filename!r} declares {info.file_size} bytes "
                    f"uncompressed, more than {MAX_EXPANSION}x the file's {file_size} bytes; "
                    "refused (a decompression bomb or a corrupt archive)."
                )
            if info.filename.endswith(".npy"):
                _check_npy_member(path, archive, info)


def _check_npy_member(path, archive, info) -> None:
    try:
        with archive.open(info) as stream:
            version = np.lib.format.read_magic(stream)
            read = getattr(np.lib.format, f"read_array_header_{version[0]}_0")
            shape, _, dtype = read(stream, max_header_size=10000)
            header_bytes = stream.tell()
    except (
        ValueError,
        SyntaxError,
        tokenize.TokenError,
        zipfile.BadZipFile,
        OSError,
        EOFError,
        AttributeError,
    ) as error:  # TokenError, SyntaxError: NumPy parses the header as a Python literal
        raise CheckpointError(
            f"{path}: zip entry {info.filename!r} is not a readable .npy array "
            f"({type(error).__name__}: {' '.join(str(error).split())[:160]})."
        ) from None
    if dtype.hasobject:
        return  # refused without unpickling by npz_io
    needed = math.prod(shape) * dtype.itemsize
    if needed > info.file_size - header_bytes:
        raise CheckpointError(
            f"{path}: array {info.filename[:-4]!r} declares shape {shape} of {dtype} "
            f"({needed} bytes); its zip entry holds {info.file_size - header_bytes}."
        )


def positive_size(path, field: str, value, *, limit: int = MAX_SIZE) -> int:
    """`value` as an int in [1, limit], else CheckpointError naming `path` and `field`."""
    if not _is_int(value) or not 1 <= value <= limit:
        raise CheckpointError(f"{path}: {field}={value!r} must be an integer from 1 to {limit}.")
    return value


def check_config_sizes(path, config, array_sizes: dict, *, section: str = "") -> None:
    """CheckpointError unless the sizes a config.json names are sane and match the arrays.

    Args:
        path: the config.json (named in the errors).
        config: its parsed JSON (must be an object).
        array_sizes: {field: size the arrays give} for the fields the arrays determine
            (e.g. {"hidden_size": 192}); others are only range-checked.
        section: a key of `config` holding the fields (timm's "model_args"), or "".

    Fields checked when present: the keys of `array_sizes`, plus those of `SIZE_FIELDS`;
    `num_attention_heads`/`num_heads` must divide the width; `image_size` (an int or a pair)
    must be a multiple of `patch_size`; `layer_norm_eps` a positive finite number.
    """
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: config.json must hold a JSON object.")
    values = config.get(section) if section else config
    if values is None:
        return
    if not isinstance(values, dict):
        raise CheckpointError(f"{path}: {section} must be a JSON object.")
    for field in {*SIZE_FIELDS, *array_sizes} & set(values):
        if field == "num_classes" and values[field] == 0:
            continue  # timm's feature models (num_classes=0: no head)
        positive_size(path, field, values[field])
        if field in array_sizes and values[field] != array_sizes[field]:
            raise CheckpointError(
                f"{path}: {field}={values[field]} but the arrays give {array_sizes[field]}."
            )
    _check_heads(path, values, array_sizes)
    _check_image_size(path, values, array_sizes)
    eps = values.get("layer_norm_eps")
    if "layer_norm_eps" in values and not (
        isinstance(eps, (int, float)) and not isinstance(eps, bool) and 0 < eps < 1
    ):
        raise CheckpointError(f"{path}: layer_norm_eps={eps!r} must be a number in (0, 1).")


SIZE_FIELDS = (
    "hidden_size", "embed_dim", "num_hidden_layers", "depth", "num_attention_heads",
    "num_heads", "intermediate_size", "patch_size", "num_channels", "in_chans",
    "num_classes",
)  # fmt: skip


def _check_heads(path, values, array_sizes) -> None:
    width = array_sizes.get("hidden_size") or array_sizes.get("embed_dim")
    for field in ("num_attention_heads", "num_heads"):
        heads = values.get(field)
        if heads is not None and width and width % heads:
            raise CheckpointError(
                f"{path}: {field}={heads} does not divide the width {width} of the arrays."
            )


def _check_image_size(path, values, array_sizes) -> None:
    size = values.get("image_size", values.get("img_size"))
    if size is None:
        return
    sides = size if isinstance(size, list) and len(size) == 2 else [size]
    for side in sides:
        positive_size(path, "image_size", side)
    patch = array_sizes.get("patch_size") or values.get("patch_size")
    if _is_int(patch) and any(side % patch for side in sides):
        raise CheckpointError(
            f"{path}: image_size={size!r} is not a multiple of the patch size {patch}."
        )


def _shape_of(state: dict, key: str):
    array = state.get(key)
    return tuple(array.shape) if isinstance(array, np.ndarray) else None


def _conv_sizes(state: dict, key: str, width: str, channels: str) -> dict:
    """{width, patch_size, channels fields: sizes} of a torch conv weight (out, in, kh, kw)."""
    shape = _shape_of(state, key)
    if shape is None or len(shape) != 4:
        return {}
    sizes = {width: shape[0], channels: shape[1]}
    return {**sizes, "patch_size": shape[2]} if shape[2] == shape[3] else sizes


def check_hf_config(config_path, config, state: dict | None = None) -> None:
    """`check_config_sizes` for a Hugging Face ViT config.json (`ViTConfig` fields), whose
    `num_attention_heads` is required; with the folder's `state` (its safetensors arrays),
    the width, patch, channels and depth are compared with the arrays'."""
    if not isinstance(config, dict):
        raise CheckpointError(f"{config_path}: config.json must hold a JSON object.")
    if state is None:
        return
    prefixes = ("vit.", "deit.", "dinov2.", "dinov2_with_registers.")  # classification models
    prefix = next((p for p in prefixes if any(k.startswith(p) for k in state)), "")
    projection = prefix + "embeddings.patch_embeddings.projection.weight"
    sizes = _conv_sizes(state, projection, "hidden_size", "num_channels")
    layers = {
        k.split(".")[2 + bool(prefix)] for k in state if k.startswith(prefix + "encoder.layer.")
    }
    if layers:
        sizes["num_hidden_layers"] = len(layers)
    if "num_attention_heads" not in config:
        raise CheckpointError(f"{config_path}: num_attention_heads is missing (required).")
    check_config_sizes(config_path, config, sizes)


def check_timm_config(path, config: dict, state: dict, metadata: dict) -> None:
    """`check_config_sizes` for the timm config.json beside `path` (its "model_args") and
    the keras_vit metadata strings of a timm file (num_heads, layer_norm_epsilon)."""
    import os

    config_path = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
    sizes = _conv_sizes(state, "patch_embed.proj.weight", "embed_dim", "in_chans")
    blocks = {k.split(".")[1] for k in state if k.startswith("blocks.")}
    if blocks:
        sizes["depth"] = len(blocks)
    check_config_sizes(config_path, config, sizes, section="model_args")
    for key, kind in (("keras_vit.num_heads", int), ("keras_vit.layer_norm_epsilon", float)):
        if key in metadata:
            try:
                value = kind(metadata[key])
            except ValueError:
                value = None
            if value is None or not (0 < value < (MAX_SIZE if kind is int else 1)):
                raise CheckpointError(f"{path}: metadata {key}={metadata[key]!r} is invalid.")
    heads = metadata.get("keras_vit.num_heads")
    if heads and sizes.get("embed_dim") and sizes["embed_dim"] % int(heads):
        raise CheckpointError(f"{path}: metadata num_heads={heads} does not divide the width.")


def check_keras_archive(path) -> None:
    """CheckpointError unless `path` is a whole `.keras` zip: every member's declared size
    within `MAX_EXPANSION` x the file's and its CRC-32 right (a truncated download or flipped
    bytes are named here instead of failing inside Keras' loader)."""
    import os

    size = os.path.getsize(path)
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.file_size > MAX_EXPANSION * size + ZIP_SLACK:
                    raise CheckpointError(
                        f"{path}: zip entry {info.filename!r} declares {info.file_size} bytes "
                        f"uncompressed, more than {MAX_EXPANSION}x the file's {size} bytes."
                    )
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, zlib.error) as error:
        raise CheckpointError(
            f"{path} is not a readable .keras archive; it may be truncated or corrupt "
            f"({type(error).__name__}: {' '.join(str(error).split())[:160]})."
        ) from None
    if bad is not None:
        raise CheckpointError(f"{path}: zip entry {bad!r} is corrupt (its CRC-32 differs).")


# release-layout key suffix -> (rank, which axes hold the width: `hidden` of embedding/bias)
RELEASE_SHAPES = {
    "embedding/kernel": (4, (3,)),
    "embedding/bias": (1, (0,)),
    "cls": (3, (2,)),
    "posembed_input/pos_embedding": (3, (2,)),
    "encoder_norm/scale": (1, (0,)),
    "encoder_norm/bias": (1, (0,)),
    "LayerNorm_0/scale": (1, (0,)),
    "LayerNorm_0/bias": (1, (0,)),
    "LayerNorm_2/scale": (1, (0,)),
    "LayerNorm_2/bias": (1, (0,)),
    "query/kernel": (3, (0,)),
    "key/kernel": (3, (0,)),
    "value/kernel": (3, (0,)),
    "query/bias": (2, ()),
    "key/bias": (2, ()),
    "value/bias": (2, ()),
    "out/kernel": (3, (2,)),
    "out/bias": (1, (0,)),
    "Dense_0/kernel": (2, (0,)),
    "Dense_0/bias": (1, ()),
    "Dense_gate/kernel": (2, (0,)),
    "Dense_gate/bias": (1, ()),
    "Dense_1/kernel": (2, (1,)),
    "Dense_1/bias": (1, (0,)),
    "head/kernel": (2, ()),
    "head/bias": (1, ()),
    "pre_logits/kernel": (2, ()),
    "pre_logits/bias": (1, ()),
}


def check_release_arrays(path, arrays: dict) -> None:
    """CheckpointError unless the release-layout `arrays` a reader produced have the ranks of
    the release's layout (vit_jax/checkpoint.py), no empty dimension, and one Transformer
    width throughout (the embedding's output width), before an architecture is inferred.
    Keys of other parts (a hybrid's ResNet) are checked for empty dimensions only."""
    width = None
    kernel = arrays.get("embedding/kernel")
    if isinstance(kernel, np.ndarray) and kernel.ndim == 4:
        width = kernel.shape[3]
    for key, array in arrays.items():
        shape = tuple(getattr(array, "shape", ()))
        if any(side == 0 for side in shape):
            raise CheckpointError(f"{path}: array {key!r} has an empty dimension {shape}.")
        suffix = next((s for s in RELEASE_SHAPES if key == s or key.endswith("/" + s)), None)
        if suffix is None or "conv_root" in key or "block" in key and "encoderblock" not in key:
            continue
        rank, width_axes = RELEASE_SHAPES[suffix]
        if len(shape) != rank:
            raise CheckpointError(
                f"{path}: array {key!r} has shape {shape}; the release layout has {rank} axes."
            )
        if width is not None and any(shape[axis] != width for axis in width_axes):
            raise CheckpointError(
                f"{path}: array {key!r} has shape {shape}, not of the embedding's width {width}."
            )
    _check_mlp_and_heads(path, arrays)


def _check_mlp_and_heads(path, arrays: dict) -> None:
    for key, first in arrays.items():
        if key.endswith("MlpBlock_3/Dense_0/kernel"):
            gate = arrays.get(key.replace("Dense_0", "Dense_gate"))
            if getattr(gate, "shape", first.shape) != first.shape:
                raise CheckpointError(
                    f"{path}: {key!r} {first.shape} and its Dense_gate {gate.shape} disagree."
                )
            second = arrays.get(key.replace("Dense_0", "Dense_1"))
            if (
                getattr(second, "ndim", 0) == 2
                and first.ndim == 2
                and second.shape[0] != first.shape[1]
            ):
                raise CheckpointError(
                    f"{path}: {key!r} {first.shape} and its Dense_1 {second.shape} disagree."
                )
        if key.endswith("query/kernel") and first.ndim == 3:
            out = arrays.get(key.replace("query/kernel", "out/kernel"))
            if getattr(out, "ndim", 0) == 3 and out.shape[:2] != first.shape[1:]:
                raise CheckpointError(
                    f"{path}: {key!r} {first.shape} and its out/kernel {out.shape} disagree."
                )


def check_finite(path, arrays: dict, *, what: str = "tensor") -> None:
    """CheckpointError unless every float array of `arrays` holds finite numbers only.

    One check for every reader and writer (`read_npz`, `read_safetensors`, the `.keras`
    reader and the model writers through `naming.official_arrays`): a NaN or an infinity in
    a weight makes every output NaN without a word, so it is refused by the name the file
    (or the model) gives the array, with how many values are not finite and the first one.

    Args:
        path: the file, folder or model named in the message.
        arrays: `{name: array}`; integer and boolean arrays are always finite.
        what: how the message calls an array ("tensor", "array", "weight").
    """
    for name, array in arrays.items():
        array = np.asarray(array)
        if array.dtype.kind not in "fc":
            continue
        finite = np.isfinite(array)
        if finite.all():
            continue
        bad = np.flatnonzero(~finite.reshape(-1))
        first = array.reshape(-1)[bad[0]]
        raise CheckpointError(
            f"{path}: {what} {name!r} holds {bad.size} non-finite value(s) (the first, "
            f"{first}, at flat index {bad[0]}); weights must be finite numbers (a NaN or an "
            "infinity in a weight makes every output NaN)."
        )
