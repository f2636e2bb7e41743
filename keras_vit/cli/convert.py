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
import math
import os
import re

from keras_vit._atomic import atomic_path
from keras_vit.cli.main import UsageError

POSITION_KEY = "Transformer/posembed_input/pos_embedding"


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
    from keras_vit import configs, hybrid

    variant = re.sub(r"ViT-(\w+)_(\d+)", r"\1/\2", name)
    if variant in configs.VIT_CONFIGS:
        return getattr(keras_vit, "ViT_" + variant.replace("/", "")), configs.get_config(
            variant
        ).patch_size
    if variant in hybrid.HYBRID_CONFIGS:
        config = hybrid.HYBRID_CONFIGS[variant]
        builder = getattr(keras_vit, variant.replace("+", "_").replace("/", ""))
        stride = 4 * 2 ** max(len(config.resnet_stages) - 1, 0)
        return builder, config.patch_size * stride
    builder = getattr(keras_vit, name, None)
    if callable(builder) and re.fullmatch(r"(ViT|R\w*)_\w+", name):
        return builder, None
    known = sorted(configs.VIT_CONFIGS) + sorted(hybrid.HYBRID_CONFIGS)
    raise UsageError(f"unknown --model {name!r}; expected 'auto' or one of {known}")


def _auto_architecture(arrays) -> dict:
    """A plain ViT's architecture read from the official arrays' shapes."""
    try:
        kernel = arrays["embedding/kernel"]
        query = arrays["Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"]
        mlp = arrays["Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"]
    except KeyError as error:
        raise UsageError(
            f"--model auto needs a plain ViT checkpoint; the file has no {error}"
        ) from None
    layers = {int(m[1]) for k in arrays if (m := re.match(r"Transformer/encoderblock_(\d+)/", k))}
    return dict(
        patch_size=(int(kernel.shape[0]), int(kernel.shape[1])),
        hidden_dim=int(kernel.shape[-1]),
        num_heads=int(query.shape[1]),
        mlp_dim=int(mlp.shape[-1]),
        num_layers=len(layers),
        channels=int(kernel.shape[2]),
    )


def _file_defaults(arrays, args, pixels_per_token):
    """Builder arguments taken from the file unless given on the command line."""
    kwargs = {"pooling": "token" if "cls" in arrays else "gap"}
    if args.num_classes is not None:
        kwargs["num_classes"] = args.num_classes
    elif "head/bias" in arrays:
        kwargs["num_classes"] = int(arrays["head/bias"].shape[0])
    else:
        kwargs["include_top"] = False
    if args.representation_size is not None:
        kwargs["representation_size"] = args.representation_size
    elif "pre_logits/bias" in arrays:
        kwargs["representation_size"] = int(arrays["pre_logits/bias"].shape[0])
    if args.image_size is not None:
        if len(args.image_size) not in (1, 2):
            raise UsageError(f"--image-size takes 1 or 2 ints. Received: {args.image_size}")
        kwargs["image_size"] = tuple(args.image_size) * (3 - len(args.image_size))
    elif POSITION_KEY in arrays and pixels_per_token is not None:
        rows = arrays[POSITION_KEY].shape[1] - (kwargs["pooling"] == "token")
        side = math.isqrt(rows)
        if side * side != rows:
            raise UsageError(
                f"the file's position table ({rows} grid rows) is not square; give --image-size"
            )
        kwargs["image_size"] = side * pixels_per_token
    return kwargs


def _model_for_file(arrays, args, builder, pixels):
    """Builds the model the .npz will be loaded into (named variant, or read from the file)."""
    from keras_vit import ViT

    if builder is None:
        arch = _auto_architecture(arrays)
        pixels = arch["patch_size"][0] if arch["patch_size"][0] == arch["patch_size"][1] else None
        return ViT(**arch, **_file_defaults(arrays, args, pixels))
    return builder(**_file_defaults(arrays, args, pixels))


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
