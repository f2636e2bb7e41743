"""Published checkpoints of the ViT family (DeiT, DeiT III, DINOv2, CLIP towers) by name.

Each name is the one its source library publishes it under: timm's `<architecture>.<tag>`
(hub repository `timm/<name>`: `model.safetensors` + `config.json`) and transformers'
`<organisation>/<model>` (a folder with `config.json` + `model.safetensors`). keras_vit does
not download from the Hugging Face hub: a name resolves to a local folder,
`<cache>/keras_vit/<name with "/" as "--">/`, into which the hub repository's files are put
(e.g. `huggingface-cli download timm/deit_small_patch16_224.fb_in1k --local-dir ...`); the
error for a missing folder names it and the repository's address. timm names are accepted
without their tag too (the default tag below).
"""

from __future__ import annotations

import dataclasses
import os

HUB = "https://huggingface.co/"
FOLDER_FILES = {"timm": ("model.safetensors", "config.json"), "hf": ("config.json",)}


@dataclasses.dataclass(frozen=True)
class FamilyCheckpoint:
    """One published file of the ViT family.

    Attributes:
        name: the published name ("deit_small_patch16_224.fb_in1k", "facebook/dinov2-small").
        architecture: the source library's model: a timm architecture
            ("vit_small_patch14_dinov2") or a transformers class ("Dinov2Model").
        library: "timm" or "hf".
        filename: the weights file in the repository.
        hub_repository: the Hugging Face hub repository holding it.
    """

    name: str
    architecture: str
    library: str
    filename: str = "model.safetensors"

    @property
    def hub_repository(self) -> str:
        return f"timm/{self.name}" if self.library == "timm" else self.name

    @property
    def folder_name(self) -> str:
        return self.name.replace("/", "--")


_TIMM = {
    "fb_in1k": (
        "deit_tiny_patch16_224 deit_small_patch16_224 deit_base_patch16_224 "
        "deit_base_patch16_384 deit_tiny_distilled_patch16_224 "
        "deit_small_distilled_patch16_224 deit_base_distilled_patch16_224 "
        "deit_base_distilled_patch16_384 deit3_small_patch16_224 deit3_base_patch16_224 "
        "deit3_large_patch16_224 deit3_base_patch16_384"
    ),
    "fb_in22k_ft_in1k": "deit3_base_patch16_224 deit3_large_patch16_224",
    "lvd142m": (
        "vit_small_patch14_dinov2 vit_base_patch14_dinov2 vit_large_patch14_dinov2 "
        "vit_small_patch14_reg4_dinov2 vit_base_patch14_reg4_dinov2 "
        "vit_large_patch14_reg4_dinov2"
    ),
    "openai": "vit_base_patch32_clip_224 vit_base_patch16_clip_224 vit_large_patch14_clip_224",
    "laion2b_ft_in12k_in1k": "vit_base_patch16_clip_224",
    "laion2b": "vit_base_patch16_clip_224 vit_large_patch14_clip_224",
}
_HF = {
    "facebook/deit-tiny-distilled-patch16-224": "DeiTForImageClassificationWithTeacher",
    "facebook/deit-small-distilled-patch16-224": "DeiTForImageClassificationWithTeacher",
    "facebook/deit-base-distilled-patch16-224": "DeiTForImageClassificationWithTeacher",
    "facebook/deit-base-distilled-patch16-384": "DeiTForImageClassificationWithTeacher",
    "facebook/deit-tiny-patch16-224": "ViTForImageClassification",
    "facebook/deit-small-patch16-224": "ViTForImageClassification",
    "facebook/deit-base-patch16-224": "ViTForImageClassification",
    "facebook/dinov2-small": "Dinov2Model",
    "facebook/dinov2-base": "Dinov2Model",
    "facebook/dinov2-large": "Dinov2Model",
    "facebook/dinov2-with-registers-small": "Dinov2WithRegistersModel",
    "facebook/dinov2-with-registers-base": "Dinov2WithRegistersModel",
    "facebook/dinov2-with-registers-large": "Dinov2WithRegistersModel",
}


def _table() -> dict:
    entries = {}
    for tag, architectures in _TIMM.items():
        for architecture in architectures.split():
            entry = FamilyCheckpoint(f"{architecture}.{tag}", architecture, "timm")
            entries[entry.name] = entry
    for name, architecture in _HF.items():
        entries[name] = FamilyCheckpoint(name, architecture, "hf")
    return entries


# Published name -> entry.
FAMILY_CHECKPOINTS: dict[str, FamilyCheckpoint] = _table()


def _default_tags() -> dict:
    tags = {}
    for entry in FAMILY_CHECKPOINTS.values():
        if entry.library == "timm":
            tags.setdefault(entry.architecture, entry)
    return tags


# An untagged timm name -> its first tag above (timm's default pretrained tag).
_DEFAULT_TAGS = _default_tags()


def family_entry(name) -> FamilyCheckpoint | None:
    """The entry of a published family name (timm names also without their tag), or None."""
    if not isinstance(name, str):
        return None
    return FAMILY_CHECKPOINTS.get(name) or _DEFAULT_TAGS.get(name)


def family_folder(entry: FamilyCheckpoint, cache_dir) -> str:
    """`<cache_dir>/keras_vit/<name with "/" as "--">`: where the entry's files are looked for."""
    return os.path.join(os.fspath(cache_dir), "keras_vit", entry.folder_name)


def resolve_family(name, cache_dir) -> str:
    """The local path of a published family checkpoint: its folder (HF) or its
    `model.safetensors` (timm, with the `config.json` beside it).

    Args:
        name: a name of `FAMILY_CHECKPOINTS` (timm: with or without its tag).
        cache_dir: the Keras cache folder (see `registry.default_cache_dir`).

    Raises:
        ValueError: an unknown name.
        FileNotFoundError: the folder or its files are missing; the message names the
            folder and the hub repository to take them from.
    """
    entry = family_entry(name)
    if entry is None:
        raise ValueError(
            f"{name!r} is not a published ViT-family checkpoint; known: "
            f"{', '.join(sorted(FAMILY_CHECKPOINTS))}."
        )
    folder = family_folder(entry, cache_dir)
    wanted = sorted({entry.filename, *FOLDER_FILES[entry.library]})
    missing = [f for f in wanted if not os.path.isfile(os.path.join(folder, f))]
    if missing:
        raise FileNotFoundError(
            f"{entry.name} ({entry.library} {entry.architecture}) is read from a local folder: "
            f"{folder} lacks {', '.join(missing)}. keras_vit does not download "
            f"from the Hugging Face hub; put the files of {HUB}{entry.hub_repository} there "
            "(or pass their local path)."
        )
    return folder if entry.library == "hf" else os.path.join(folder, entry.filename)
