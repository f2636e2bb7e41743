"""What the reader fuzz tests share: valid tiny files written by keras_vit, mutations of
them, and `outcome` (the one allowed result: loads, or a CheckpointError/ValueError naming
the file, within a time and allocation bound, without reading outside the folder).

Used by tests/fuzz/test_readers.py (bounded, the ci profile) and tests/fuzz/long_run.py
(the long run that counts inputs and distinct failures per reader).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import struct
import sys
import tracemalloc
import zipfile

import numpy as np
from hypothesis import strategies as st

TIME_LIMIT_S = 60
ALLOCATION_FACTOR = 8
ALLOCATION_SLACK = 64 << 20
"""The stated bound: a reader allocates at most 8 x the input's size + 64 MiB (Python and
NumPy allocations, as tracemalloc sees them)."""
SAFETENSORS_DTYPES = ("BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32", "F32",
                      "I64", "U64", "F64")  # fmt: skip
SIZE_FIELDS = ("hidden_size", "embed_dim", "num_hidden_layers", "depth", "num_attention_heads",
               "num_heads", "intermediate_size", "patch_size", "num_channels", "in_chans",
               "num_classes")  # fmt: skip
SECRET = "outside_secret.bin"
_opened: list[str] = []


def _audit(event, args):
    if event == "open" and args and isinstance(args[0], str) and SECRET in args[0]:
        _opened.append(args[0])


sys.addaudithook(_audit)  # once per process; it only records opens of SECRET


class Violation(AssertionError):
    """An input the readers did not handle as promised (the fuzz finding)."""


def valid_files(root) -> dict[str, str]:
    """{reader: path} of valid tiny checkpoints keras_vit writes under `root` (one folder
    each, beside a file the readers must never open): npz, hf, timm, keras."""
    import keras_vit
    from keras_vit.checkpoints import read_checkpoint, write_checkpoint
    from keras_vit.checkpoints.base.npz_io import write_npz
    from tests.numpy_reference import tiny_official_params

    root = os.fspath(root)
    paths = {}
    for name in ("npz", "hf", "timm", "keras"):
        os.makedirs(os.path.join(root, name), exist_ok=True)
    with open(os.path.join(root, SECRET), "wb") as stream:
        stream.write(b"not to be read")
    paths["npz"] = os.path.join(root, "npz", "vit.npz")
    write_npz(paths["npz"], tiny_official_params(seed=0))
    contents = read_checkpoint(paths["npz"])
    contents.num_heads = 4
    paths["hf"] = os.path.join(root, "hf", "folder")
    write_checkpoint(contents, paths["hf"], "hf")
    paths["timm"] = os.path.join(root, "timm", "model.safetensors")
    write_checkpoint(contents, paths["timm"], "timm")
    with open(os.path.join(root, "timm", "config.json"), "w") as stream:
        json.dump({"architecture": "vit_tiny", "model_args": {"num_heads": 4}}, stream)
    paths["keras"] = os.path.join(root, "keras", "vit.keras")
    keras_vit.from_checkpoint(paths["npz"]).save(paths["keras"])
    paths.update(_family_files(root))
    return paths


def _family_files(root) -> dict[str, str]:
    """The ViT family's layouts as the source libraries spell them (tests/checkpoints/
    family_state.py): a HF DINOv2 with registers folder and a timm distilled DeiT with
    LayerScale, norm_pre and no_embed_class."""
    from safetensors.numpy import save_file

    from tests.checkpoints import family_state as fs

    rng = np.random.default_rng(0)
    folder = os.path.join(root, "hf_family", "folder")
    os.makedirs(folder)
    dino = fs.random_params(rng, layer_scale=True, registers=2, head=False)
    save_file(fs.to_hf(dino, "dinov2_with_registers"), os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as stream:
        json.dump(fs.hf_config("dinov2_with_registers", registers=2), stream)
    os.makedirs(os.path.join(root, "timm_family"))
    deit = fs.random_params(rng, dist=True, layer_scale=True, norm_pre=True, no_embed_class=True)
    timm_path = os.path.join(root, "timm_family", "model.safetensors")
    save_file(fs.to_timm(deit), timm_path)
    with open(os.path.join(root, "timm_family", "config.json"), "w") as stream:
        json.dump(
            {"architecture": "deit3_tiny", "model_args": {"num_heads": 4, "no_embed_class": True}},
            stream,
        )
    return {"hf_family": folder, "timm_family": timm_path}


def copy_case(source: str, workdir: str) -> str:
    """A fresh copy of `source` (file or folder) in `workdir`; returns its path."""
    if os.path.exists(workdir):
        shutil.rmtree(workdir)
    os.makedirs(workdir)
    target = os.path.join(workdir, os.path.basename(source))
    if os.path.isdir(source):
        shutil.copytree(source, target)
    else:
        shutil.copy(source, target)
        sibling = os.path.join(os.path.dirname(source), "config.json")
        if os.path.isfile(sibling):
            shutil.copy(sibling, os.path.join(workdir, "config.json"))
    return target


# ------------------------------------------------------------------------ mutations

JSON_VALUES = st.one_of(
    st.integers(-(10**12), 10**12),
    st.sampled_from([0, -1, 1, 10**9, 2**63, 3]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.none(),
    st.booleans(),
    st.lists(st.integers(-5, 10**9), max_size=3),
)


@st.composite
def byte_mutation(draw, data: bytes) -> bytes:
    """Truncate, flip bytes or splice a region of `data`."""
    kind = draw(st.sampled_from(["truncate", "flip", "splice"]))
    size = len(data)
    at = draw(st.integers(0, max(size - 1, 0)))
    if kind == "truncate":
        return data[:at]
    if kind == "flip":
        flips = draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=8))
        out = bytearray(data)
        for index in flips:
            out[index] ^= draw(st.integers(1, 255))
        return bytes(out)
    chunk = draw(st.binary(min_size=1, max_size=64))
    return data[:at] + chunk + data[at + len(chunk) :]


@st.composite
def safetensors_header_mutation(draw, data: bytes) -> bytes:
    """Edit one tensor's dtype, shape or offsets (or the header length) in a safetensors."""
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    names = sorted(k for k in header if k != "__metadata__")
    name = draw(st.sampled_from(names))
    field = draw(st.sampled_from(["dtype", "shape", "data_offsets", "length", "entry"]))
    body = data[8 + length :]
    if field == "length":
        length = draw(st.sampled_from([0, 1, length - 1, length + 1, 2**40, 2**64 - 1]))
        return struct.pack("<Q", length) + data[8:]
    if field == "dtype":
        header[name]["dtype"] = draw(st.sampled_from([*SAFETENSORS_DTYPES, "X", 7]))
    elif field == "shape":
        header[name]["shape"] = draw(st.lists(st.integers(-2, 10**9), max_size=4) | JSON_VALUES)
    elif field == "data_offsets":
        other = header[draw(st.sampled_from(names))]["data_offsets"]
        header[name]["data_offsets"] = draw(
            st.sampled_from([other, [other[0], other[1] + 4]])
            | st.lists(st.integers(-10, 2 * len(body)), min_size=2, max_size=2)
            | JSON_VALUES
        )
    else:
        header[name] = draw(JSON_VALUES)
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


@st.composite
def json_field_mutation(draw, text: bytes, section: str = "") -> bytes:
    """Set one field (existing or a size field) of a config.json to a drawn value."""
    config = json.loads(text)
    target = config.setdefault(section, {}) if section else config
    fields = sorted({*target, *SIZE_FIELDS, "image_size", "layer_norm_eps"})
    for _ in range(draw(st.integers(1, 3))):
        target[draw(st.sampled_from(fields))] = draw(JSON_VALUES)
    if draw(st.booleans()):
        return json.dumps(draw(JSON_VALUES)).encode()  # not an object at all
    return json.dumps(config).encode()


@st.composite
def npz_member_mutation(draw, data: bytes) -> bytes:
    """Rewrite one .npy member's header (shape, dtype) or its declared zip sizes."""
    source = zipfile.ZipFile(io.BytesIO(data))
    names = source.namelist()
    victim = draw(st.sampled_from(names))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for name in names:
            payload = source.read(name)
            if name == victim:
                payload = _npy_with_header(draw, payload)
            target.writestr(name, payload)
    return out.getvalue()


def _npy_with_header(draw, payload: bytes) -> bytes:
    stream = io.BytesIO(payload)
    np.lib.format.read_magic(stream)
    shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    body = payload[stream.tell() :]
    shape = (
        tuple(draw(st.lists(st.integers(0, 10**7), max_size=3))) if draw(st.booleans()) else shape
    )
    dtype = (
        draw(st.sampled_from(["<f4", "<f8", "|u1", "<i8", "|V2", "<c8"]))
        if draw(st.booleans())
        else dtype.str
    )
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": dtype, "fortran_order": fortran, "shape": shape}
    )
    return header.getvalue() + body  # write_array_header_1_0 writes the magic too


# ------------------------------------------------------------------------ the outcome


def _on_alarm(signum, frame):
    raise Violation(f"no answer within {TIME_LIMIT_S} s (a hang)")


def outcome(load, path, *, names=None) -> str:
    """Runs `load(path)`; returns "loaded" or the error's type and first words. Raises
    `Violation` for another exception type, an error that names neither the file nor its
    folder, a hang, an allocation above the bound or a read of the file outside the folder.
    """
    names = names or [os.path.basename(path), os.path.dirname(os.path.abspath(path))]
    size = _size(path)
    _opened.clear()
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(TIME_LIMIT_S)
    tracemalloc.start()
    try:
        load(path)
        result = "loaded"
    except (ValueError, FileNotFoundError) as error:
        message = str(error)
        if not any(name in message for name in names):
            raise Violation(f"{type(error).__name__} naming no file: {message[:300]}") from error
        result = f"{type(error).__name__}: {' '.join(message.split()[:8])}"
    except Violation:
        raise
    except Exception as error:  # noqa: BLE001 - the finding itself
        raise Violation(f"{type(error).__name__}: {error}"[:400]) from error
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    bound = ALLOCATION_FACTOR * size + ALLOCATION_SLACK
    if peak > bound:
        raise Violation(f"allocated {peak} bytes for a {size}-byte input (bound {bound})")
    if _opened:
        raise Violation(f"read a file outside the checkpoint's folder: {_opened[0]}")
    return result


def _size(path) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    return os.path.getsize(path)


# ------------------------------------------------------------------------ campaigns


def read(path):
    """Everything before a model is built: read the file, infer the architecture."""
    from keras_vit.checkpoints import read_checkpoint
    from keras_vit.checkpoints.from_checkpoint import architecture_kwargs

    architecture_kwargs(read_checkpoint(path))


def _target(reader: str, path: str, part: str) -> str:
    """The file a campaign mutates: the weights, or the config.json beside them."""
    hf = reader.startswith("hf")
    folder = path if hf else os.path.dirname(path)
    if part == "config":
        return os.path.join(folder, "config.json")
    return os.path.join(path, "model.safetensors") if hf else path


CAMPAIGNS = {
    # name: (reader of valid_files, file mutated, mutation strategy of its bytes)
    "npz bytes": ("npz", "weights", byte_mutation),
    "npz members": ("npz", "weights", npz_member_mutation),
    "hf safetensors bytes": ("hf", "weights", byte_mutation),
    "hf safetensors header": ("hf", "weights", safetensors_header_mutation),
    "hf config.json": ("hf", "config", json_field_mutation),
    "timm safetensors bytes": ("timm", "weights", byte_mutation),
    "timm safetensors header": ("timm", "weights", safetensors_header_mutation),
    "timm config.json": ("timm", "config", lambda text: json_field_mutation(text, "model_args")),
    ".keras bytes": ("keras", "weights", byte_mutation),
    "hf family config.json": ("hf_family", "config", json_field_mutation),
    "timm family safetensors header": ("timm_family", "weights", safetensors_header_mutation),
}


def run_campaign_case(valid: dict, campaign: str, draw, workdir: str) -> str:
    """One input of `campaign`: a fresh copy of the valid file, mutated with `draw`, read;
    returns `outcome`'s answer (raises `Violation`)."""
    reader, part, mutation = CAMPAIGNS[campaign]
    path = copy_case(valid[reader], workdir)
    target = _target(reader, path, part)
    with open(target, "rb") as stream:
        original = stream.read()
    with open(target, "wb") as stream:
        stream.write(draw(mutation(original)))
    names = [os.path.basename(path), os.path.dirname(os.path.abspath(target))]
    return outcome(read, path, names=[*names, os.path.abspath(path)])


def run_image_case(draw, workdir: str) -> str:
    """One mutated PNG/JPEG/GIF/BMP: `image_check.image_problem` names a reason, or the
    file decodes as the pipeline decodes it."""
    import tensorflow as tf
    from PIL import Image

    from keras_vit.data import image_check

    os.makedirs(workdir, exist_ok=True)
    image = np.random.default_rng(0).integers(0, 256, (12, 10, 3), dtype=np.uint8)
    kind = draw(st.sampled_from(["PNG", "JPEG", "GIF", "BMP"]))
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format=kind)
    path = os.path.join(workdir, f"x.{kind.lower()}")
    with open(path, "wb") as stream:
        stream.write(draw(byte_mutation(buffer.getvalue())))

    def check(file):
        problem = image_check.image_problem(file)
        if problem is None:  # promised to decode
            tf.io.decode_image(tf.io.read_file(file), channels=3, expand_animations=False)
        elif not isinstance(problem, str):
            raise Violation(f"image_problem returned {problem!r}")

    return outcome(check, path)
