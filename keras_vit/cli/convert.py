"""`keras-vit convert SRC DST`: official `.npz` checkpoint <-> Keras `.keras` model file.

- `.npz` -> `.keras`: builds `--model` (a variant such as "B/16", "ViT-B_16", "ViT_B16",
  "R50+B/16", or "auto" to read a plain ViT's architecture from the file's shapes) with the
  file's head size, pre_logits width, pooling and image size (each overridable), loads the
  file strictly with `keras_vit.load_npz` and saves the model.
- `.keras` -> `.npz`: loads the model and writes the release's layout with
  `keras_vit.save_npz` (readable by the JAX release and timm).

Both outputs are written to a temporary file in the destination folder and renamed.
"""

from __future__ import annotations

import argparse
import os
import re

from keras_vit._atomic import atomic_path
from keras_vit.cli.common import UsageError


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Registers `convert` on the `keras-vit` subparsers."""
    parser = subparsers.add_parser(
        "convert",
        help="convert an official .npz checkpoint to a .keras model file, or back",
        description=(
            "Converts between the official ViT checkpoint layout (.npz, flat keys such as "
            "'Transformer/encoderblock_0/LayerNorm_0/scale') and a Keras .keras model file. "
            "The direction follows the file extensions. For .npz -> .keras, --model names the "
            "architecture; head size, pre_logits, pooling and image size come from the file "
            "unless given. Example: keras-vit convert ViT-B_16.npz vit_b16.keras --model B/16"
        ),
    )
    parser.add_argument("src", metavar="SRC", help="an official .npz checkpoint or a .keras file")
    parser.add_argument("dst", metavar="DST", help="the .keras or .npz file to write")
    parser.add_argument(
        "--model",
        default=None,
        help=(
            "architecture for .npz -> .keras: a variant (B/16, ViT-B_16, ViT_B16, R50+B/16, "
            "R50+ViT-B_16, ...) or 'auto' to read a plain ViT's sizes from the file"
        ),
    )
    parser.add_argument(
        "--image-size",
        type=int,
        nargs="+",
        default=None,
        metavar="PIXELS",
        help="image size (one int, or height width); default: the file's position-table grid",
    )
    parser.add_argument(
        "--num-classes", type=int, default=None, help="head size (default: the file's head)"
    )
    parser.add_argument(
        "--representation-size",
        type=int,
        default=None,
        help="pre_logits width (default: the file's, or none)",
    )
    parser.add_argument(
        "--resize-method",
        choices=("bilinear", "bicubic"),
        default="bilinear",
        help="position-table resize when --image-size differs from the file (default bilinear)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing DST")
    parser.set_defaults(func=run)
    return parser


def _direction(src: str, dst: str) -> str:
    if src.endswith(".npz") and dst.endswith(".keras"):
        return "npz_to_keras"
    if src.endswith(".keras") and dst.endswith(".npz"):
        return "keras_to_npz"
    raise UsageError(
        "convert goes from .npz to .keras or from .keras to .npz (by file extension). "
        f"Received: SRC={src!r}, DST={dst!r}"
    )


def builder_for(name: str):
    """`(builder, patch_on_image)` for a model name; `patch_on_image` is the pixel stride of
    one token (patch times the ResNet stride for hybrids).

    Accepts "B/16", "ViT-B_16", "ViT_B16", "R50+B/16", "R50+ViT-B_16", "R50_B16".

    Raises:
        UsageError: an unknown name.
    """
    import keras_vit
    from keras_vit import configs

    variant = configs.table_name(name)
    if variant in configs.VIT_CONFIGS:
        return getattr(keras_vit, configs.builder_name(variant)), configs.get_config(
            variant
        ).patch_size
    if variant in configs.HYBRID_CONFIGS:
        config = configs.HYBRID_CONFIGS[variant]
        builder = getattr(keras_vit, configs.builder_name(variant))
        return builder, config.patch_size * config.total_stride
    builder = getattr(keras_vit, name, None)
    if callable(builder) and re.fullmatch(r"(ViT|R\w*)_\w+", name):
        return builder, None
    known = sorted(configs.VIT_CONFIGS) + sorted(configs.HYBRID_CONFIGS)
    raise UsageError(f"unknown --model {name!r}; expected 'auto' or one of {known}")


def _auto_architecture(arch) -> dict:
    """A plain ViT's architecture read from the official arrays' shapes."""
    missing = arch.missing_key("patch_size", "num_heads", "mlp_dim")
    if missing:
        raise UsageError(f"--model auto needs a plain ViT checkpoint; the file has no {missing!r}")
    return {"patch_size": arch.patch_size, **arch.transformer_kwargs()}


def _file_defaults(arch, args, pixels_per_token):
    """Builder arguments taken from the file unless given on the command line."""
    kwargs = {"pooling": arch.pooling}
    if args.num_classes is not None:
        kwargs["num_classes"] = args.num_classes
    elif arch.num_classes is not None:
        kwargs["num_classes"] = arch.num_classes
    else:
        kwargs["include_top"] = False
    if args.representation_size is not None:
        kwargs["representation_size"] = args.representation_size
    elif arch.representation_size is not None:
        kwargs["representation_size"] = arch.representation_size
    if args.image_size is not None:
        if len(args.image_size) not in (1, 2):
            raise UsageError(f"--image-size takes 1 or 2 ints. Received: {args.image_size}")
        kwargs["image_size"] = tuple(args.image_size) * (3 - len(args.image_size))
    elif arch.num_patch_tokens is not None and pixels_per_token is not None:
        if arch.grid is None:
            raise UsageError(
                f"the file's position table ({arch.num_patch_tokens} grid rows) is not square; "
                "give --image-size"
            )
        kwargs["image_size"] = arch.grid[0] * pixels_per_token
    return kwargs


def _model_for_file(arrays, args, builder, pixels):
    """Builds the model the .npz will be loaded into (named variant, or read from the file)."""
    from keras_vit import ViT
    from keras_vit.checkpoints.architecture import Architecture

    arch = Architecture.from_arrays(arrays)
    if builder is None:
        sizes = _auto_architecture(arch)
        pixels = (
            sizes["patch_size"][0] if sizes["patch_size"][0] == sizes["patch_size"][1] else None
        )
        return ViT(**sizes, **_file_defaults(arch, args, pixels))
    return builder(**_file_defaults(arch, args, pixels))


def _npz_to_keras(args) -> int:
    from keras_vit.checkpoints import CheckpointError, load_npz, read_npz
    from keras_vit.checkpoints.layouts import normalise_layout

    if args.model is None:
        raise UsageError("--model is required to convert .npz -> .keras (or --model auto)")
    if args.model == "auto":
        builder, pixels = None, None
    else:
        builder, pixels = builder_for(args.model)
    try:
        arrays, _ = normalise_layout(read_npz(args.src))
    except CheckpointError as error:
        raise UsageError(str(error)) from None
    try:
        model = _model_for_file(arrays, args, builder, pixels)
        report = load_npz(model, args.src, resize_method=args.resize_method)
    except (CheckpointError, ValueError) as error:
        # A file of another architecture or an impossible size: the user's arguments.
        raise UsageError(" ".join(str(error).split())) from None
    with atomic_path(args.dst) as temporary:
        model.save(temporary)
    print(
        f"Wrote {args.dst}: {model.name}, {model.count_params():,} parameters, "
        f"{len(report.loaded)} arrays loaded from {args.src}"
    )
    return 0


def _keras_to_npz(args) -> int:
    import keras

    from keras_vit.checkpoints import save_npz

    model = keras.models.load_model(args.src)
    shapes = save_npz(model, args.dst)
    print(f"Wrote {args.dst}: {len(shapes)} arrays in the official layout from {args.src}")
    return 0


def run(args) -> int:
    """Runs `keras-vit convert`; returns 0 on success."""
    direction = _direction(args.src, args.dst)
    if not os.path.isfile(args.src):
        raise UsageError(f"SRC not found: {args.src!r}")
    if os.path.exists(args.dst) and not args.overwrite:
        raise UsageError(f"DST exists: {args.dst!r} (pass --overwrite to replace it)")
    if direction == "npz_to_keras":
        return _npz_to_keras(args)
    return _keras_to_npz(args)
