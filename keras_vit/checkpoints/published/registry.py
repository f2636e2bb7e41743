"""Published checkpoints of the ViT release and how `weights=` names resolve to files.

All live in the public Google Cloud Storage bucket `vit_models` (the release's README.md):

- `imagenet21k/<model>.npz`: pre-trained on ImageNet-21k at 224, with `pre_logits` and a
  21843-class head;
- `imagenet21k+imagenet2012/<model>.npz`: then fine-tuned on ImageNet at 384 (or 224 for the
  `-224` files), 1000 classes, no `pre_logits`;
- `augreg/<file>.npz`, `sam/<model>.npz`, `gsam/<model>.npz`: later releases, accepted by
  folder and file name.

The ViT family's timm and Hugging Face files (DeiT, DeiT III, DINOv2, CLIP towers) are named
in `FAMILY_CHECKPOINTS` (`family_checkpoints.py`) and read from a local folder in the same
cache (`resolve_family`).

Names resolve through `keras.utils.get_file` into the Keras cache (`<cache>/keras_vit/`), with
a SHA-256 check where one is recorded. The base URL can be overridden for mirrors and tests
with the `KERAS_VIT_CHECKPOINT_URL` environment variable or the `base_url` argument.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import urllib.parse

from keras_vit.checkpoints.published.family_checkpoints import (  # noqa: F401 (the family's names)
    FAMILY_CHECKPOINTS,
    FamilyCheckpoint,
    family_entry,
)
from keras_vit.checkpoints.published.family_checkpoints import resolve_family as _resolve_family

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://storage.googleapis.com/vit_models/"
BASE_URL_ENV = "KERAS_VIT_CHECKPOINT_URL"
CACHE_DIR_ENV = "KERAS_VIT_CACHE_DIR"
CACHE_SUBDIR = "keras_vit"
IMAGENET21K = "imagenet21k"
IMAGENET21K_FT = "imagenet21k+imagenet2012"
OPEN_FOLDERS = ("augreg", "sam", "gsam")


@dataclasses.dataclass(frozen=True)
class PublishedCheckpoint:
    """One file of the release.

    Attributes:
        folder: folder in the bucket, e.g. "imagenet21k".
        model: the release's model name, e.g. "ViT-B_16" or "R50+ViT-B_16".
        filename: file name in the folder.
        sha256: hex digest when recorded, else None (no check).
        size_bytes: file size when recorded, else None.
    """

    folder: str
    model: str
    filename: str
    sha256: str | None = None
    size_bytes: int | None = None

    @property
    def name(self) -> str:
        return f"{self.folder}/{self.filename[: -len('.npz')]}"

    def url(self, base_url: str | None = None) -> str:
        base = base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
        if not base.endswith("/"):
            base += "/"
        return base + urllib.parse.quote(f"{self.folder}/{self.filename}", safe="/")

    @property
    def cache_name(self) -> str:
        """File name in the cache, unique across folders."""
        return f"{self.folder}_{self.filename}"


def _table():
    entries = {}
    pretrained = (
        "ViT-B_16 ViT-B_32 ViT-B_8 ViT-L_16 ViT-L_32 ViT-H_14 "
        "R50+ViT-B_16 R26+ViT-B_32 R50+ViT-L_32"
    ).split()
    finetuned = (
        "ViT-B_16 ViT-B_32 ViT-B_8 ViT-L_16 ViT-L_32 R50+ViT-B_16 ViT-B_16-224 ViT-L_16-224"
    ).split()
    for folder, models in ((IMAGENET21K, pretrained), (IMAGENET21K_FT, finetuned)):
        for model in models:
            entry = PublishedCheckpoint(folder, model.removesuffix("-224"), f"{model}.npz")
            entries[entry.name] = entry
    return entries


# Published checkpoint name ("<folder>/<file name without .npz>") -> entry.
PUBLISHED_CHECKPOINTS: dict[str, PublishedCheckpoint] = _table()


def is_collection_name(name: str) -> bool:
    """True for "imagenet21k" / "imagenet21k+imagenet2012" / "augreg" /
    "augreg+imagenet2012", resolved per architecture."""
    return name in (IMAGENET21K, IMAGENET21K_FT, "augreg", "augreg+imagenet2012")


def lookup(name: str) -> PublishedCheckpoint | None:
    """The entry for a published name, or None if `name` is not one.

    Accepted: "imagenet21k/ViT-B_16", "ViT-B_16" (the ImageNet-21k file when it exists, else
    the fine-tuned one), "imagenet21k+imagenet2012/ViT-L_16-224", optionally with ".npz", and
    any "augreg/<file>", "sam/<model>", "gsam/<model>".
    """
    from keras_vit.checkpoints.release import augreg

    base = name.removesuffix(".npz")
    fields = augreg.lookup(name)
    if fields is not None:
        return PublishedCheckpoint(*fields)
    if base in PUBLISHED_CHECKPOINTS:
        return PUBLISHED_CHECKPOINTS[base]
    for folder in (IMAGENET21K, IMAGENET21K_FT):
        if f"{folder}/{base}" in PUBLISHED_CHECKPOINTS:
            return PUBLISHED_CHECKPOINTS[f"{folder}/{base}"]
    folder, _, filename = base.partition("/")
    if folder in OPEN_FOLDERS and filename and "/" not in filename:
        return PublishedCheckpoint(folder, filename, f"{filename}.npz")
    return None


def not_found_message(path: str) -> str:
    """The one-line error for a weights source that is neither an existing path nor a
    published name (`lookup` None): `keras_vit.model.from_source.locate` raises it, and
    `keras-vit finetune` checks --weights with it before importing TensorFlow."""
    return (
        f"Weights file not found: {path} (neither a file or folder nor a published "
        "checkpoint name such as imagenet21k/ViT-B_32 or augreg/ViT-S_16-224)"
    )


def collection_entry(collection: str, model_name: str | None, image_size=None):
    """The file of `collection` ("imagenet21k", ...) for the release model `model_name`.

    For "imagenet21k+imagenet2012" a model at 224x224 gets the `-224` file where the release
    has one (ViT-B_16-224, ViT-L_16-224), not the 384 one shrunk; AugReg collections are
    resolved by `keras_vit.checkpoints.release.augreg.collection_entry`.

    Raises:
        ValueError: if the architecture is not one of the release's or has no such file.
    """
    available = sorted(e.model for e in PUBLISHED_CHECKPOINTS.values() if e.folder == collection)
    if model_name is None:
        raise ValueError(
            f"weights={collection!r} needs a model whose architecture is one of the release's "
            f"({', '.join(available)}); this model's is not. Pass a checkpoint path instead."
        )
    if collection.startswith("augreg"):
        from keras_vit.checkpoints.release import augreg

        return PublishedCheckpoint(*augreg.collection_entry(collection, model_name, image_size))
    entry = PUBLISHED_CHECKPOINTS.get(f"{collection}/{model_name}")
    if image_size is not None and tuple(image_size) == (224, 224):
        entry = PUBLISHED_CHECKPOINTS.get(f"{collection}/{model_name}-224", entry)
    if entry is None:
        raise ValueError(
            f"There is no published {collection!r} checkpoint for {model_name}; "
            f"available: {', '.join(available)}."
        )
    return entry


def default_cache_dir() -> str:
    """`$KERAS_VIT_CACHE_DIR`, else `$KERAS_HOME`, else `~/.keras` (as Keras' get_file)."""
    return os.path.expanduser(
        os.environ.get(CACHE_DIR_ENV) or os.environ.get("KERAS_HOME") or "~/.keras"
    )


def _writable_cache_dir(cache_dir) -> str:
    """The cache folder, created if needed; `/tmp/.keras` when it cannot be written, as
    `keras.utils.get_file` itself falls back (so the path in messages is the real one)."""
    cache_dir = os.path.expanduser(os.fspath(cache_dir)) if cache_dir else default_cache_dir()
    try:
        os.makedirs(os.path.join(cache_dir, CACHE_SUBDIR), exist_ok=True)
    except OSError:
        pass
    if not os.access(cache_dir, os.W_OK):
        cache_dir = os.path.join("/tmp", ".keras")
    return cache_dir


def resolve_checkpoint(name_or_entry, *, base_url=None, cache_dir=None) -> str:
    """Downloads (or finds in the cache) a published checkpoint and returns its local path.

    Args:
        name_or_entry: a published name (see `lookup`) or a `PublishedCheckpoint`.
        base_url: overrides the bucket URL (default `$KERAS_VIT_CHECKPOINT_URL` or
            https://storage.googleapis.com/vit_models/); `file://` URLs work.
        cache_dir: Keras cache folder (default `default_cache_dir()`); files go to its
            `keras_vit/` subfolder.

    Returns:
        The local path of the `.npz` file.

    Raises:
        ValueError: an unknown name, or a file whose SHA-256 differs from the recorded one.
        OSError: the download failed (no network); the message names the URL and the exact
            path where a manually downloaded copy will be picked up.
    """
    entry = name_or_entry
    if not isinstance(entry, PublishedCheckpoint):
        entry = lookup(name_or_entry)
        if entry is None:
            raise ValueError(
                f"Unknown published checkpoint {name_or_entry!r}. Known names: "
                f"{', '.join(sorted(PUBLISHED_CHECKPOINTS))}, 'imagenet21k', "
                f"'imagenet21k+imagenet2012', or 'augreg/<file>'."
            )
    url = entry.url(base_url)
    cache_dir = _writable_cache_dir(cache_dir)
    target = os.path.join(cache_dir, CACHE_SUBDIR, entry.cache_name)
    logger.info("Checkpoint %s: %s (cache %s)", entry.name, url, target)
    import keras  # here: `lookup` serves the CLI's argument checks before Keras is imported

    try:
        return keras.utils.get_file(
            entry.cache_name,
            origin=url,
            cache_subdir=CACHE_SUBDIR,
            cache_dir=cache_dir,
            file_hash=entry.sha256,
        )
    except ValueError as error:
        raise ValueError(
            f"The checkpoint downloaded from {url} failed its SHA-256 check ({error}). "
            f"Delete {target} and retry."
        ) from error
    except Exception as error:  # get_file raises a bare Exception for URL/HTTP failures
        raise OSError(
            f"Could not download the checkpoint {entry.name!r} from {url} ({error}). "
            f"Without network access, download that file on another machine and put it at "
            f"{target} (it is then used as is), or pass its local path as weights=."
        ) from error


def resolve_family(name, *, cache_dir=None) -> str:
    """The local path of a published ViT-family checkpoint (`FAMILY_CHECKPOINTS`), looked for
    under `<cache_dir>/keras_vit/` (default `default_cache_dir()`); see
    `family_checkpoints.resolve_family` for the errors."""
    return _resolve_family(name, cache_dir or default_cache_dir())
