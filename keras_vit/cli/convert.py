"""`keras-vit convert SRC DST [--to FORMAT]`: ViT checkpoints between every format keras_vit has.

Formats (SRC's is read from its content, DST's from `--to` or its name):

- `npz`: the release's `.npz` (flat keys such as 'Transformer/encoderblock_0/LayerNorm_0/scale');
- `keras`: a Keras `.keras` model file;
- `hf`: a Hugging Face `transformers` ViT folder (`config.json` + `model.safetensors`);
- `timm`: a timm ViT state dict in `.safetensors`.

Array formats convert directly (transposes and reshapes only: bit-exact both ways). A `.keras`
destination, or `--image-size` / `--num-classes` / `--representation-size`, goes through a
model: `--model` names the architecture (a variant such as "B/16", "ViT-B_16", "R50+B/16") or
"auto" (default) reads it from the file; head size, pre_logits width, pooling and image size
come from the file unless given. Every output is written to a temporary path and renamed.
"""

from __future__ import annotations

import argparse
import os

from keras_vit._atomic import atomic_path
from keras_vit.cli import flags, progress
from keras_vit.cli.flags import UsageError

TARGETS = ("npz", "keras", "hf", "timm")
SUFFIXES = {".npz": "npz", ".keras": "keras", ".safetensors": "timm"}


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Registers `convert` on the `keras-vit` subparsers."""
    parser = subparsers.add_parser(
        "convert",
        help="convert a ViT checkpoint between .npz, .keras, Hugging Face and timm",
        description=(
            "Converts a ViT checkpoint between the release's .npz, a Keras .keras file, a "
            "Hugging Face ViT folder (config.json + model.safetensors) and a timm .safetensors "
            "state dict, in any direction. SRC's format is read from its content; DST's from "
            "--to, else its name (.npz, .keras, .safetensors = timm, a folder = hf). PyTorch "
            ".bin/.pth pickles are refused (convert them to safetensors first). Examples: "
            "keras-vit convert ViT-B_16.npz vit_b16.keras; keras-vit convert ViT-B_16.npz "
            "hf_vit_b16/ --to hf; keras-vit convert model.safetensors back.npz"
        ),
    )
    parser.add_argument(
        "src",
        metavar="SRC",
        help="a .npz, .keras, Hugging Face ViT folder or timm .safetensors checkpoint",
    )
    parser.add_argument("dst", metavar="DST", help="the file or folder to write")
    parser.add_argument(
        "--to",
        choices=TARGETS,
        default=None,
        help="format of DST (default: from its name; a name without a suffix is a hf folder)",
    )
    parser.add_argument(
        "--model",
        default=None,
        help=(
            "architecture when a model is built (.keras output, or a size change): a variant "
            "(B/16, ViT-B_16, ViT_B16, R50+B/16, R50+ViT-B_16, ...) or 'auto' (default) to "
            "read it from the file"
        ),
    )
    flags.add_image_size_argument(parser, default_text="the file's position-table grid")
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
        choices=("bilinear", "bicubic", "torch_bicubic", "dinov2"),  # RESIZE_METHODS
        default="bilinear",
        help="position-table resize when --image-size differs from the file: bilinear (the "
        "release's, default), bicubic (timm's), torch_bicubic (Hugging Face's), dinov2 (the "
        "original DINOv2's, 0.1 offset)",
    )
    parser.add_argument(
        "--num-heads",
        type=int,
        default=None,
        help="attention heads of a timm SRC, which state dicts do not record (default: the "
        "file's metadata, a timm config.json beside it, or the variant table)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing DST")
    progress.add_output_arguments(parser, log_every=False)
    parser.set_defaults(func=run)
    return parser


def target_format(dst: str, to: str | None) -> str:
    """DST's format: `--to`, else from the name (a name without a known suffix is `hf`).

    Raises:
        UsageError: a suffix that names no format keras_vit writes.
    """
    if to is not None:
        return to
    suffix = os.path.splitext(dst.rstrip("/"))[1]
    if suffix in SUFFIXES:
        return SUFFIXES[suffix]
    if not suffix or os.path.isdir(dst) or dst.endswith("/"):
        return "hf"
    raise UsageError(
        f"cannot tell the format of DST={dst!r} from its name; use .npz, .keras, .safetensors "
        f"(timm), a folder (hf), or --to {{{','.join(TARGETS)}}}"
    )


def builder_for(name: str):
    """`(builder, patch_on_image)` for a model name; `patch_on_image` is the pixel stride of
    one token (patch times the ResNet stride for hybrids).

    Takes every spelling `keras_vit.configs.resolve_model` reads: "B/16", "ViT-B_16",
    "ViT_B16", "b16", "R50+B/16", "R50+ViT-B_16", "R50_B16".

    Raises:
        UsageError: an unknown name (the message lists the valid ones).
    """
    from keras_vit import configs, model_source

    try:
        named = configs.resolve_model(name)
        builder = model_source.named(name).builder
    except ValueError:
        raise UsageError(
            f"unknown --model {name!r}; expected 'auto' or one of {configs.valid_names()} "
            "(also spelled as the builder, ViT_B16 / R50_B16, or the release file, ViT-B_16)"
        ) from None
    return builder, named.pixels_per_token


def _file_defaults(arch, args, pixels_per_token):
    """Builder arguments taken from the file unless given on the command line."""
    kwargs = _with_flags(
        {**arch.pooling_kwargs(), **arch.head_kwargs(), **arch.family_kwargs()}, args
    )
    if args.image_size is None and arch.num_patch_tokens is not None and pixels_per_token:
        if arch.grid is None:
            raise UsageError(
                f"the file's position table ({arch.num_patch_tokens} grid rows) is not square; "
                "give --image-size"
            )
        kwargs["image_size"] = arch.grid[0] * pixels_per_token
    return kwargs


def _read(args):
    from keras_vit.checkpoints import CheckpointError, read_checkpoint

    try:
        return read_checkpoint(args.src, num_heads=args.num_heads)
    except CheckpointError as error:
        raise UsageError(" ".join(str(error).split())) from None


def _needs_model(args, target: str) -> bool:
    sizes = (args.image_size, args.num_classes, args.representation_size)
    return (
        target == "keras" or any(v is not None for v in sizes) or args.model not in (None, "auto")
    )


def _auto_kwargs(contents, args) -> dict:
    """`keras_vit.ViT` arguments read from the file, with the command line's overrides."""
    from keras_vit.checkpoints.from_checkpoint import architecture_kwargs

    return _with_flags(architecture_kwargs(contents, image_size=args.image_size), args)


def _with_flags(kwargs: dict, args) -> dict:
    """`kwargs` with --num-classes, --representation-size and --image-size where given."""
    if args.num_classes is not None:
        kwargs.update(num_classes=args.num_classes, include_top=True)
    if args.representation_size is not None:
        kwargs["representation_size"] = args.representation_size
    if args.image_size is not None:
        kwargs["image_size"] = args.image_size  # the (height, width) pair of the flag
    return kwargs


def _build_model(contents, args):
    """The model the checkpoint is loaded into (named variant, or read from the file)."""
    from keras_vit.build_any import build
    from keras_vit.checkpoints import CheckpointError, load_weights
    from keras_vit.checkpoints.architecture import Architecture

    try:
        if args.model in (None, "auto"):
            model = build(_auto_kwargs(contents, args))
        else:
            flags.image_size_of_name(args)  # "B/16-384": image size 384
            builder, pixels = builder_for(args.model)
            defaults = _file_defaults(Architecture.from_contents(contents), args, pixels)
            model = builder(**{**defaults, **contents.numerics})
        file_classes = contents.arrays.get("head/bias")
        new_head = args.num_classes is not None and (
            file_classes is None or file_classes.shape[0] != args.num_classes
        )
        report = load_weights(
            model, contents, resize_method=args.resize_method, head="auto" if new_head else "load"
        )
    except (CheckpointError, ValueError) as error:
        # A file of another architecture or an impossible size: the user's arguments.
        raise UsageError(flags.cli_message(error)) from None
    return model, report


def run(args) -> int:
    """Runs `keras-vit convert`; returns 0 on success."""
    from keras_vit.checkpoints import CheckpointError, model_contents, write_checkpoint

    target = target_format(args.dst, args.to)
    if not os.path.exists(args.src):
        raise UsageError(f"SRC not found: {args.src!r}")
    if os.path.exists(args.dst) and not args.overwrite:
        raise UsageError(f"DST exists: {args.dst!r} (pass --overwrite to replace it)")
    if args.model not in (None, "auto"):
        builder_for(args.model)  # an unknown name fails here, before the file is read
    contents = _read(args)
    if _needs_model(args, target):
        model, report = _build_model(contents, args)
        if target == "keras":
            with atomic_path(args.dst) as temporary:
                model.save(temporary)
            print(
                f"Wrote {args.dst}: {model.name}, {model.count_params():,} parameters, "
                f"{len(report.loaded)} arrays loaded from {args.src} ({contents.format})"
            )
            return 0
        contents = model_contents(model)
    try:
        write_checkpoint(contents, args.dst, target)
    except CheckpointError as error:
        raise UsageError(" ".join(str(error).split())) from None
    print(
        f"Wrote {args.dst} ({target}): {len(contents.arrays)} arrays from {args.src} "
        f"({contents.format})"
    )
    return 0
