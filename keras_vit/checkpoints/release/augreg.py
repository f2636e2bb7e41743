"""The AugReg release ("How to train your ViT?", Steiner et al. 2021): names and short aliases.

Files live in the `vit_models` bucket's `augreg/` folder, named in the release's grammar:
pre-trained `{model}-{i1k|i21k}-{epochs}ep-lr_{lr}-aug_{aug}-wd_{wd}-do_{do}-sd_{sd}` and
fine-tuned `{pre-trained}--{dataset}-steps_{n}k-lr_{lr}-res_{pixels}`, e.g.
`S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224`.

Short aliases name the recommended ImageNet-21k run per variant (the ones timm's
`vision_transformer.py` and `vision_transformer_hybrid.py` ship as their `augreg_in21k`
weights): `augreg/ViT-S_16` (pre-trained, 21843 classes) and `augreg/ViT-S_16-224` / `-384`
(then fine-tuned on ImageNet-1k at that resolution); the hybrids `augreg/R26+ViT-S_32`,
`augreg/R50+ViT-L_32` and `augreg/R+ViT-Ti_16` (a ResNet root only, patch 8 on its
feature map) likewise. For R26+S/32 and R50+L/32 the recommended 224 file was fine-tuned
from another pre-trained run than the 384 one. `weights="augreg"` /
`"augreg+imagenet2012"` pick the file of the model's own architecture (and, fine-tuned, of
its image size).
"""

from __future__ import annotations

import re

FOLDER = "augreg"
COLLECTION = "augreg"
COLLECTION_FT = "augreg+imagenet2012"
NAME = re.compile(
    r"(?P<model>(?:R\d*_)?(?:Ti|S|B|L|H)_\d+)-(?:i1k|i21k)-\d+ep-lr_[\d.]+-aug_\w+-wd_[\d.]+"
    r"-do_[\d.]+-sd_[\d.]+(?:--\w+-steps_\d+k-lr_[\d.]+-res_(?P<res>\d+))?"
)
# Release model name -> (pre-trained run, fine-tuning learning rate of its ImageNet files).
RECOMMENDED = {
    "ViT-Ti_16": ("Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "0.03"),
    "ViT-S_32": ("S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0", "0.03"),
    "ViT-S_16": ("S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0", "0.03"),
    "ViT-B_32": ("B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "0.03"),
    "ViT-B_16": ("B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0", "0.01"),
    "ViT-B_8": ("B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0", "0.01"),
    "ViT-L_16": ("L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1", "0.01"),
    "R+ViT-Ti_16": ("R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "0.03"),
    "R26+ViT-S_32": ("R26_S_32-i21k-300ep-lr_0.001-aug_medium2-wd_0.03-do_0.0-sd_0.0", "0.03"),
    "R50+ViT-L_32": ("R50_L_32-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0", "0.01"),
}
# The recommended fine-tuned file of a resolution that starts from another pre-trained run.
FINETUNED_FROM = {
    ("R26+ViT-S_32", 224): "R26_S_32-i21k-300ep-lr_0.001-aug_light0-wd_0.03-do_0.1-sd_0.1",
    ("R50+ViT-L_32", 224): "R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1",
}
RESOLUTIONS = (224, 384)


def release_model(augreg_model: str) -> str:
    """ "S_16" -> "ViT-S_16"; "R26_S_32" -> "R26+ViT-S_32"; "R_Ti_16" -> "R+ViT-Ti_16"."""
    match = re.fullmatch(r"(R\d*)_(.+)", augreg_model)
    if match:
        return f"{match[1]}+ViT-{match[2]}"
    return f"ViT-{augreg_model}"


def _entry(filename: str) -> tuple[str, str, str]:
    """(folder, release model name, file name) of an AugReg file."""
    match = NAME.fullmatch(filename)
    return FOLDER, release_model(match["model"]), f"{filename}.npz"


def finetuned_name(model: str, resolution: int) -> str:
    run, lr = RECOMMENDED[model]
    run = FINETUNED_FROM.get((model, resolution), run)
    return f"{run}--imagenet2012-steps_20k-lr_{lr}-res_{resolution}"


def lookup(name: str) -> tuple[str, str, str] | None:
    """(folder, model, file name) of an AugReg name (full, with or without "augreg/", or an
    alias), or None."""
    base = name.removesuffix(".npz").removeprefix(FOLDER + "/")
    if NAME.fullmatch(base):
        return _entry(base)
    if not name.startswith(FOLDER + "/"):
        return None
    if base in RECOMMENDED:
        return _entry(RECOMMENDED[base][0])
    model, _, resolution = base.rpartition("-")
    if model in RECOMMENDED and resolution.isdigit() and int(resolution) in RESOLUTIONS:
        return _entry(finetuned_name(model, int(resolution)))
    return None


def collection_entry(collection: str, model_name: str | None, image_size) -> tuple[str, str, str]:
    """(folder, model, file name) of the recommended AugReg file of `model_name` for
    "augreg" / "augreg+imagenet2012".

    The fine-tuned file is the one at the model's image size when there is one (224 or
    384), else the 384 one (its position table is then resized).

    Raises:
        ValueError: an architecture without a recommended AugReg file.
    """
    if model_name not in RECOMMENDED:
        raise ValueError(
            f"There is no recommended AugReg checkpoint for {model_name}; available: "
            f"{', '.join(RECOMMENDED)}. Pass a full name ('augreg/<file>') instead."
        )
    if collection == COLLECTION:
        return _entry(RECOMMENDED[model_name][0])
    size = tuple(image_size) if image_size else (384, 384)
    resolution = size[0] if size[0] == size[1] and size[0] in RESOLUTIONS else 384
    return _entry(finetuned_name(model_name, resolution))
