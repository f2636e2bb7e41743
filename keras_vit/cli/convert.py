"""`keras-vit convert SRC DST [--to FORMAT]`: ViT checkpoints between every format keras_vit has.

The formats are the rows of `keras_vit.checkpoints.format_table.FORMAT_TABLE`: SRC's is read
from its content, DST's from `--to` or its name (each writable row's suffix; a folder is the
row whose suffix is ""). The choices, suffixes and help texts here are drawn from the table,
so a new format needs no change in this file.

Array formats convert directly (transposes and reshapes only: bit-exact both ways). A format
written by a model's `save` (`.keras`), or `--image-size` / `--num-classes` /
`--representation-size`, goes through a model: `--model` names the architecture (a variant
such as "B/16", "ViT-B_16", "R50+B/16") or "auto" (default) reads it from the file; head size,
pre_logits width, pooling and image size come from the file unless given. Every output is
written to a temporary path and renamed.
"""

from __future__ import annotations

import argparse
import os

from keras_vit._atomic import atomic_path, replace_problem
from keras_vit.checkpoints.format_table import FORMAT_TABLE, write_formats
from keras_vit.cli import flags, progress
from keras_vit.cli.flags import UsageError
from keras_vit.spec.resize_methods import RESIZE_METHOD_HELP, RESIZE_METHODS


def suffixes() -> dict:
    """`{suffix: format}` of `write_formats()`, the first row of a suffix winning; the suffix ""
    (a folder) maps to the format written to a name without a suffix."""
    found = {}
    for name in write_formats():
        found.setdefault(FORMAT_TABLE[name].suffix, name)
    return found


def _named_formats(names) -> str:
    """'npz (the release's .npz), ...' for help texts."""
    return ", ".join(f"{name} ({FORMAT_TABLE[name].title})" for name in names)


def _suffix_text() -> str:
    """'.npz = npz, ..., a folder = hf' for help texts and errors."""
    return ", ".join(
        f"{suffix or 'a folder'} = {name}"
        for suffix, name in sorted(suffixes().items(), key=lambda item: not item[0])
    )


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Registers `convert` on the `keras-vit` subparsers."""
    parser = subparsers.add_parser(
        "convert",
        help=f"convert a ViT checkpoint between formats ({', '.join(write_formats())})",
        description=(
            f"Converts a ViT checkpoint from any format keras_vit reads "
            f"({_named_formats(FORMAT_TABLE)}) to one it writes ({', '.join(write_formats())}). "
            f"SRC's format is read from its content; DST's from --to, else its name "
            f"({_suffix_text()}). PyTorch .bin/.pth pickles are refused (convert them to "
            "safetensors first). Examples: keras-vit convert ViT-B_16.npz vit_b16.keras; "
            "keras-vit convert ViT-B_16.npz hf_vit_b16/ --to hf; keras-vit convert "
            "model.safetensors back.npz"
        ),
    )
    parser.add_argument(
        "src",
        metavar="SRC",
        help=f"a checkpoint in any format keras_vit reads ({', '.join(FORMAT_TABLE)})",
    )
    parser.add_argument("dst", metavar="DST", help="the file or folder to write")
    parser.add_argument(
        "--to",
        choices=write_formats(),
        default=None,
        help=f"format of DST (default: from its name: {_suffix_text()}; a name without a "
        "suffix is a folder)",
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
        choices=RESIZE_METHODS,
        default=None,
        help="position-table resize when --image-size differs from the file (default: the "
        f"file's own, else {RESIZE_METHODS[0]}): "
        + "; ".join(f"{name}: {text}" for name, text in RESIZE_METHOD_HELP.items()),
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
    parser.set_defaults(func=run, check=check)
    return parser


def target_format(dst: str, to: str | None) -> str:
    """DST's format: `--to`, else from the name (a name without a known suffix is a folder,
    `suffixes()[""]`).

    Raises:
        UsageError: a suffix that names no format keras_vit writes, or one that names
            another format than `--to` (a .keras name holding npz arrays loads as neither).
    """
    suffix = os.path.splitext(dst.rstrip("/"))[1]
    known = suffixes()
    if to is not None:
        written = FORMAT_TABLE[to].suffix
        if suffix in known and suffix and suffix != written:
            raise UsageError(
                f"--to {to} writes {written or 'a folder'}, but DST={dst!r} is named "
                f"{suffix} ({known[suffix]}); name DST to match, or drop --to"
            )
        return to
    if suffix and suffix in known:
        return known[suffix]
    if "" in known and (not suffix or os.path.isdir(dst) or dst.endswith("/")):
        return known[""]
    raise UsageError(
        f"cannot tell the format of DST={dst!r} from its name; use {_suffix_text()}, or "
        f"--to {{{','.join(write_formats())}}}"
    )


def builder_for(name: str):
    """`(builder, patch_on_image)` for a model name; `patch_on_image` is the pixel stride of
    one token (patch times the ResNet stride for hybrids).

    Takes every spelling `keras_vit.spec.configs.resolve_model` reads: "B/16", "ViT-B_16",
    "ViT_B16", "b16", "R50+B/16", "R50+ViT-B_16", "R50_B16".

    Raises:
        UsageError: an unknown name (the message lists the valid ones).
    """
    from keras_vit.model import from_source
    from keras_vit.spec import configs

    try:
        named = configs.resolve_model(name)
        builder = from_source.named(name).builder
    except ValueError:
        raise UsageError(unknown_model_message(name)) from None
    return builder, named.pixels_per_token


def unknown_model_message(name: str) -> str:
    """The error of an unknown --model, with the closest name (`configs.suggest_model`)."""
    from keras_vit.spec import configs

    guess = configs.suggest_model(name)
    hint = f" (did you mean {guess!r}?)" if guess else ""
    return (
        f"unknown --model {name!r}{hint}; expected 'auto' or one of {configs.valid_names()} "
        "(also spelled as the builder, ViT_B16 / R50_B16, or the release file, ViT-B_16)"
    )


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
        FORMAT_TABLE[target].from_model
        or any(v is not None for v in sizes)
        or args.model not in (None, "auto")
    )


def _auto_kwargs(contents, args) -> dict:
    """`keras_vit.ViT` arguments with the command line's overrides: a run's `.npz` takes the
    arguments its config.json records (as `evaluate` does: the file does not record e.g. a
    hybrid's GroupNorm groups), any other file those read from its arrays."""
    from keras_vit.checkpoints.from_checkpoint import architecture_kwargs
    from keras_vit.model import from_source

    run_kwargs = None
    if args.src.endswith(".npz"):
        run_kwargs = from_source.kwargs_from_run_config(args.src)
    if run_kwargs is not None:
        return _with_flags(dict(run_kwargs), args)
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
    from keras_vit.checkpoints import CheckpointError, load_weights
    from keras_vit.checkpoints.base.architecture import Architecture
    from keras_vit.model.from_kwargs import build

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


def check(args) -> None:
    """The argument checks that need no TensorFlow (run before importing it): DST's format,
    SRC exists, DST is new (or --overwrite) and replaceable, --model names a model."""
    from keras_vit.spec import configs

    target_format(args.dst, args.to)
    if not os.path.exists(args.src):
        raise UsageError(f"SRC not found: {args.src!r}")
    if os.path.exists(args.dst) and not args.overwrite:
        raise UsageError(f"DST exists: {args.dst!r} (pass --overwrite to replace it)")
    if replace_problem(args.dst):  # /dev/null, a pipe, a socket: --overwrite replaces files only
        raise UsageError(
            f"DST {args.dst!r} is neither a file nor a folder; --overwrite replaces only those"
        )
    if args.model not in (None, "auto"):
        try:
            configs.resolve_model(args.model)
        except ValueError:
            raise UsageError(unknown_model_message(args.model)) from None


def run(args) -> int:
    """Runs `keras-vit convert`; returns 0 on success."""
    from keras_vit.checkpoints import CheckpointError, model_contents, write_checkpoint

    check(args)
    target = target_format(args.dst, args.to)
    if args.model not in (None, "auto"):
        builder_for(args.model)  # an unknown name fails here, before the file is read
    contents = _read(args)
    if _needs_model(args, target):
        model, report = _build_model(contents, args)
        if FORMAT_TABLE[target].from_model:
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
