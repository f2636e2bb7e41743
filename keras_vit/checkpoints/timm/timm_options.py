"""What a timm ViT file says about its options, read from the file and its `config.json`.

timm's `VisionTransformer` (vision_transformer.py) takes `class_token`, `no_embed_class`
(DeiT-3: the class token gets no row in `pos_embed`), `global_pool` ("token", "avg", "map",
...), `fc_norm` and `img_size`; a file saved for the Hugging Face hub (timm's
`save_for_hf`) has a `config.json` with `architecture`, `global_pool`, `model_args` and
`pretrained_cfg` (`input_size` [C, H, W], `mean`, `std`); files keras_vit writes record the
same choices in their safetensors metadata (`keras_vit.*`). The `cls_token` key tells the
class token. The row count of `pos_embed` alone never decides `no_embed_class`: where nothing
else says and both readings fit a grid, the reader refuses and names the argument.
"""

from __future__ import annotations

import math

from keras_vit.checkpoints.base.errors import CheckpointError

META = "keras_vit."
# keras_vit's pooling for each timm `global_pool`, by class token or not.
SUPPORTED_POOLS = {True: ("token",), False: ("avg",)}


def model_args(config: dict) -> dict:
    """The `model_args` of a timm `config.json` ({} when absent or not a dict)."""
    args = config.get("model_args")
    return args if isinstance(args, dict) else {}


def _recorded(metadata: dict, config: dict, field: str):
    """`field` from keras_vit's metadata, the config's `model_args`, or its top level."""
    if META + field in metadata:
        return metadata[META + field]
    args = model_args(config)
    if field in args:
        return args[field]
    return config.get(field)


def global_pool_of(metadata: dict, config: dict):
    """The `global_pool` keras_vit's metadata or the `config.json` records, or None."""
    return _recorded(metadata, config, "global_pool")


def check_global_pool(
    metadata: dict, config: dict, class_token: bool, path, attention_pool: bool = False
) -> None:
    """Refuses a `global_pool` that keras_vit's pooling cannot hold.

    keras_vit pools the class token ("token") with one, the mean of the tokens ("avg",
    keras_vit's "gap") or attention pooling ("map", the `attn_pool.*` tensors: keras_vit's
    MAP head) without one. timm's `global_pool="avg"` with a class token (MAE fine-tuned
    weights) averages the patch tokens only, which no keras_vit pooling does.

    Raises:
        CheckpointError: naming `global_pool`, its value and the class token, or a
            `global_pool` that disagrees with the `attn_pool.*` tensors.
    """
    pool = _recorded(metadata, config, "global_pool")
    if pool is not None and (pool == "map") != attention_pool:
        has = "has" if attention_pool else "has no"
        raise CheckpointError(
            f"{path}: global_pool={pool!r} but the file {has} attention-pooling tensors "
            "(attn_pool.*); timm pools by attention exactly when global_pool='map'."
        )
    if pool is None or pool == "map" or pool in SUPPORTED_POOLS[class_token]:
        return
    if class_token:
        raise CheckpointError(
            f"{path}: global_pool={pool!r} with a class token (e.g. MAE fine-tuned weights, "
            "timm.create_model(..., global_pool='avg')): keras_vit pools a class-token model "
            "with its class token only (global_pool='token'); it has no pooling over the "
            "patch tokens beside a class token, so the file is not read."
        )
    raise CheckpointError(
        f"{path}: global_pool={pool!r} but the file has no cls_token; keras_vit reads "
        "global_pool='avg' for a model without a class token."
    )


def image_size_of(metadata: dict, config: dict):
    """`(height, width)` the file or its config names, or None.

    Sources: keras_vit's `keras_vit.image_size` metadata ("H,W"), the config's
    `pretrained_cfg.input_size` ([C, H, W]) or `model_args.img_size` (int or [H, W]).
    """
    if META + "image_size" in metadata:
        height, width = metadata[META + "image_size"].split(",")
        return int(height), int(width)
    pretrained = config.get("pretrained_cfg")
    if isinstance(pretrained, dict) and len(pretrained.get("input_size") or ()) == 3:
        return tuple(int(s) for s in pretrained["input_size"][1:])
    size = model_args(config).get("img_size")
    if isinstance(size, int):
        return size, size
    if isinstance(size, (list, tuple)) and len(size) == 2:
        return tuple(int(s) for s in size)
    return None


def _as_bool(value) -> bool:
    if isinstance(value, str):
        return value.lower() == "true"
    return bool(value)


def _ambiguous(rows: int, path) -> CheckpointError:
    side = math.isqrt(rows)
    return CheckpointError(
        f"{path}: the file has a cls_token and a pos_embed of {rows} rows, and neither the "
        "file nor a config.json beside it says whether the class token has a position row. "
        f"Either it has (no_embed_class=False, timm's default: a class row and {rows - 1} "
        f"patch rows) or not (no_embed_class=True, DeiT-3: {rows} = {side}x{side} patch "
        "rows). Pass no_embed_class=True or no_embed_class=False (or image_size= when "
        "loading into a model)."
    )


def no_embed_class_of(
    rows: int,
    patch,
    metadata: dict,
    config: dict,
    *,
    given=None,
    image_size=None,
    path="",
    prefix: int = 1,
    registers: bool = False,
) -> bool:
    """Whether a class-token file's `pos_embed` lacks the class row (timm's `no_embed_class`).

    Decided, first that says: `given` (the caller's argument), keras_vit's metadata, the
    config's `model_args.no_embed_class`, the image size (the file's or its config's, else
    `image_size` of the model it is loaded into: `rows` equal to its patch count means no
    class row, `prefix` more means one). A file with register tokens is True (timm's
    DINOv2 "-reg" models; see `timm_family.check_registers`). Otherwise timm's default
    False, unless `rows` is itself a square grid (then both readings fit one): an error
    naming `no_embed_class=`.

    Args:
        rows: rows of `pos_embed` (second axis).
        patch: `(height, width)` of a patch on the embedding's input.
        image_size: the size to compare with when the file names none.
        prefix: rows of the class (and distillation) token when the table has them.
        registers: the file has register tokens (`reg_token`).

    Raises:
        CheckpointError: the ambiguous case above, or an image size neither reading fits.
    """
    if given is not None:
        return bool(given)
    recorded = _recorded(metadata, config, "no_embed_class")
    if recorded is not None:
        return _as_bool(recorded)
    if registers:
        return True
    size = image_size_of(metadata, config) or image_size
    if size is not None and patch is not None:
        tokens = (int(size[0]) // patch[0]) * (int(size[1]) // patch[1])
        if rows in (tokens, tokens + prefix):
            return rows == tokens
        if image_size_of(metadata, config) is not None:
            raise CheckpointError(
                f"{path}: pos_embed has {rows} rows; image size {tuple(size)} with patch "
                f"{tuple(patch)} gives {tokens} patch tokens, so neither {tokens} (no class "
                f"row) nor {tokens + prefix} rows."
            )
    if prefix == 1 and math.isqrt(rows) ** 2 == rows:
        raise _ambiguous(rows, path)
    return False
