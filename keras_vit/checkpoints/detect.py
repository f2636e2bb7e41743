"""Which checkpoint format a path holds, decided by its content (never by its name).

Formats read by keras_vit (rows of `format_table.FORMAT_TABLE`, each with its own
`recognise`; this module gives the container's names to them and words the refusals):

- "npz": the release's `.npz`, a zip of `.npy` arrays; "big_vision": big_vision's
  (`params/...` members);
- "hf": a Hugging Face `transformers` ViT: a folder with `config.json` and
  `model.safetensors`, or such a `.safetensors` file with `config.json` beside it;
- "timm": a timm ViT state dict saved as `.safetensors` (keys `patch_embed.proj.weight`,
  `blocks.0.attn.qkv.weight`, ...);
- "keras": a Keras `.keras` model file (a zip with `config.json` and `model.weights.h5`).

PyTorch pickles (`pytorch_model.bin`, `.pth`, `.pt`, the torch zip format) are refused
without being opened by pickle: unpickling can run arbitrary code. Anything else (an HTML
error page saved under a checkpoint's name, a truncated download, an HDF5 file) raises a
`CheckpointError` that names what the file is.
"""

from __future__ import annotations

import os
import zipfile

from keras_vit.checkpoints.base import safetensors_io
from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.checkpoints.base.format_options import Probe
from keras_vit.checkpoints.format_table import recognise

HF_CONFIG = "config.json"
HF_WEIGHTS = "model.safetensors"
# timm NaFlexVit (naflexvit.py): its patch embedding and position table live under `embeds.`
NAFLEX_TIMM_PREFIX = "embeds."
TORCH_NAMES = ("pytorch_model.bin", "model.pth", "model.pt")

TORCH_ADVICE = (
    "PyTorch pickle checkpoints are not read, because unpickling can execute code. Convert "
    "it to safetensors once, where torch is installed: for a Hugging Face model, "
    "`transformers.AutoModel.from_pretrained(folder).save_pretrained(out, "
    "safe_serialization=True)`; for a timm or plain state dict, "
    "`safetensors.torch.save_file(torch.load(path, map_location='cpu', weights_only=True), "
    "'model.safetensors')`. Then pass the .safetensors file (or the folder) here."
)


class UnsupportedCheckpointError(CheckpointError):
    """A path whose content is not a checkpoint format keras_vit reads."""


def _describe_bytes(start: bytes) -> str:
    """What a file is, from its first bytes."""
    text = start.lstrip().lower()
    if not start:
        return "an empty file"
    if text.startswith((b"<!doctype html", b"<html", b"<?xml", b"<head")):
        return "an HTML/XML page (probably an error page saved instead of the download)"
    if start.startswith(b"\x89HDF"):
        return "an HDF5 file (e.g. Keras .h5 / .weights.h5 weights), not a checkpoint"
    if start.startswith(b"\x93NUMPY"):
        return "a single .npy array, not an .npz archive of named arrays"
    if start.startswith(b"\x80"):
        return "a Python pickle (a PyTorch .bin/.pth checkpoint or similar)"
    if start.startswith(b"PK"):
        return "a truncated or corrupt zip archive (a partial download?)"
    if text.startswith((b"{", b"[")):
        return "a JSON/text file"
    return f"an unknown file (first bytes {start[:16]!r})"


def _zip_format(path) -> str:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError, EOFError):
        raise UnsupportedCheckpointError(
            f"{path} is a truncated or corrupt zip archive (a partial download?); download "
            "it again."
        ) from None
    if any(name.endswith("data.pkl") for name in names):
        raise UnsupportedCheckpointError(
            f"{path} is a PyTorch checkpoint (torch.save zip with data.pkl). {TORCH_ADVICE}"
        )
    kind = recognise(Probe("zip", tuple(names)))
    if kind is not None:
        return kind
    shown = ", ".join(names[:5]) or "no members"
    raise UnsupportedCheckpointError(
        f"{path} is a zip archive but not a checkpoint keras_vit reads (members: {shown})."
    )


def _safetensors_format(path, header) -> str:
    names = safetensors_io.tensor_names(header)
    kind = recognise(Probe("safetensors", tuple(names)))
    if kind == "hf":
        config = os.path.join(os.path.dirname(os.path.abspath(path)), HF_CONFIG)
        if not os.path.isfile(config):
            raise UnsupportedCheckpointError(
                f"{path} holds Hugging Face ViT weights but there is no {HF_CONFIG} beside "
                "it; the number of heads and the numerics come from that file. Put it in "
                "the same folder (or pass the folder)."
            )
        return "hf"
    if kind is not None:
        return kind
    if any(name.startswith(NAFLEX_TIMM_PREFIX) for name in names):
        raise UnsupportedCheckpointError(
            f"{path} is a timm NaFlexVit file ({NAFLEX_TIMM_PREFIX}* keys, naflexvit_*), "
            "a layout keras_vit does not read; read SigLIP 2's NaFlex tower as a Hugging "
            "Face Siglip2VisionModel folder."
        )
    shown = ", ".join(names[:5]) or "no tensors"
    raise UnsupportedCheckpointError(
        f"{path} is a safetensors file, but its keys are neither a Hugging Face ViT's "
        f"('...embeddings.patch_embeddings.projection.weight', SigLIP's "
        f"'embeddings.patch_embedding.weight', DINOv3's 'embeddings.patch_embeddings.weight') "
        f"nor a timm ViT's "
        f"('patch_embed.proj.weight'): {shown}, ..."
    )


def _folder_format(path) -> str:
    names = set(os.listdir(path))
    kind = recognise(Probe("folder", tuple(sorted(names))))
    if kind is not None:
        return kind
    if "model.safetensors.index.json" in names:
        raise UnsupportedCheckpointError(
            f"{path} holds a sharded safetensors checkpoint; ViT checkpoints fit one file: "
            "re-save it with `save_pretrained(out, max_shard_size='10GB')`."
        )
    torch_files = sorted(names.intersection(TORCH_NAMES))
    if torch_files:
        raise UnsupportedCheckpointError(
            f"{path} holds only PyTorch pickle weights ({', '.join(torch_files)}). {TORCH_ADVICE}"
        )
    if "saved_model.pb" in names:
        raise UnsupportedCheckpointError(
            f"{path} is a TensorFlow SavedModel, not a checkpoint; keras_vit reads .npz, "
            ".keras, Hugging Face folders and timm .safetensors files."
        )
    raise UnsupportedCheckpointError(
        f"{path} is a folder without {HF_CONFIG} + {HF_WEIGHTS} (a Hugging Face ViT); found: "
        f"{', '.join(sorted(names)[:8]) or 'nothing'}."
    )


def detect_format(path) -> str:
    """The format of the checkpoint at `path`, from its content.

    Args:
        path: a file or a folder.

    Returns:
        One of `format_table.FORMATS`: "npz", "big_vision", "hf", "timm" or "keras".

    Raises:
        FileNotFoundError: `path` does not exist.
        UnsupportedCheckpointError (a `CheckpointError`, a ValueError): a PyTorch pickle
            (with how to convert it to safetensors), or a file of another kind, named.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        return _folder_format(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Checkpoint not found: {path}")
    try:
        header = safetensors_io.read_header(path)
    except CheckpointError as error:  # a truncated safetensors file
        raise UnsupportedCheckpointError(str(error)) from None
    if header is not None:
        return _safetensors_format(path, header)
    with open(path, "rb") as stream:
        start = stream.read(64)
    if start.startswith(b"PK\x03\x04") or start.startswith(b"PK\x05\x06"):
        return _zip_format(path)
    what = _describe_bytes(start)
    if start.startswith(b"\x80"):
        raise UnsupportedCheckpointError(f"{path} is {what}; it was not unpickled. {TORCH_ADVICE}")
    raise UnsupportedCheckpointError(
        f"{path} is {what}. keras_vit reads the release's .npz, .keras files, Hugging Face "
        "ViT folders (config.json + model.safetensors) and timm .safetensors files."
    )
