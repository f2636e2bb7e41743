"""`keras-vit benchmark`: images/second of a ViT for inference and a training step.

Measures keras_vit in this process (after warm-up, median of several repeats) under the
precision and compiler of `--mixed-precision`/`--jit-compile` (default auto:
`keras_vit.runtime.precision_auto.choose_precision`), the matrix-multiply roof of the machine
(float32 and bfloat16, with and without XLA) and the model FLOP utilisation from the analytic FLOP
count (`keras_vit.evaluate.benchmarking`). A hybrid ("R50+B/16", any spelling) is keras_vit's
`HybridViT`, its FLOP count includes the ResNet stem's convolutions. keras_vit beside its peers
(keras-hub, vit-keras, timm), one process per framework and setting with interleaved repeats,
is the repository's harness, `python -m benchmarks.bench run` from the repository root; it
uses the same `keras_vit.evaluate.benchmarking`.
"""

from __future__ import annotations

import logging
import os

from keras_vit._atomic import write_json
from keras_vit.cli import flags, progress
from keras_vit.cli.flags import UsageError
from keras_vit.evaluate.benchmarking import (
    MODES,
    add_derived,
    format_results,
    gemm_roof,
    hybrid_config,
    measure,
    token_grid,
    variant_arch,
)
from keras_vit.spec import configs

logger = logging.getLogger(__name__)


def add_parser(subparsers):
    """Registers `keras-vit benchmark`."""
    parser = subparsers.add_parser(
        "benchmark",
        help="measure images/s for inference and training, and FLOP utilisation",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument(
        "--model",
        default="Ti/16",
        help="the architecture timed, named as in `keras-vit train --model`: a variant ("
        f"{configs.variant_list()}; default Ti/16; also spelled ViT_Ti16 or ti16), a hybrid "
        f"({', '.join(configs.HYBRID_CONFIGS)}; also spelled R50_B16 or r50b16), or a custom "
        "'patch,hidden,mlp,heads,layers' such as "
        "8,32,64,4,2",
    )
    flags.add_image_size_argument(parser, default_text="224, or the size the model's name gives")
    parser.add_argument("--batch-size", type=int, default=16, help="batch size (16)")
    parser.add_argument(
        "--mode", choices=(*MODES, "both"), default="both", help="what to time (both)"
    )
    flags.add_precision_arguments(parser)
    parser.add_argument("--steps", type=int, default=3, help="steps per repeat (3)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats, median (5)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps (2)")
    parser.add_argument(
        "--gemm-sizes",
        default="1024,2048,4096",
        help="square GEMM sizes for the machine's peak, comma-separated; 'none' to skip",
    )
    parser.add_argument("--json", dest="json_path", help="also write the results here")
    progress.add_output_arguments(parser, log_every=False)
    parser.set_defaults(func=run, check=check_args)
    return parser


def check_args(args):
    """Validates arguments before any work; raises UsageError naming the value and rule."""
    flags.image_size_of_name(args, default=(224, 224))  # "B/16-384": 384
    args.model = variant_name(args.model)
    try:
        arch = variant_arch(args.model)
    except ValueError as error:
        raise UsageError(f"--model: {error}") from None
    if "resnet_stages" in arch:
        try:
            token_grid(arch, args.image_size)
        except ValueError as error:
            raise UsageError(f"--image-size {size_text(args.image_size)}: {error}") from None
    elif any(side % arch["patch_size"] for side in args.image_size):
        patch = arch["patch_size"]
        raise UsageError(
            f"--image-size {size_text(args.image_size)}: each side must be a multiple of the "
            f"patch ({patch})"
        )
    for name in ("batch_size", "steps", "repeats"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 1:
        raise UsageError(f"--warmup must be >= 1 (the first step compiles), got {args.warmup}")
    if args.json_path is not None:
        check_json_path(args.json_path)
    return parse_sizes(args.gemm_sizes)


def check_json_path(path: str) -> None:
    """UsageError, before any work, unless `path` can be written as the --json file: a file
    name (`flags.check_output_file`: not empty, no folder, no device or pipe) whose folder
    exists and is writable (no folder is created)."""
    flags.check_output_file("--json", path)
    folder = os.path.dirname(os.path.abspath(path))
    existing = folder
    while not os.path.exists(existing):  # the nearest part of the path that exists
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UsageError(f"--json {path!r}: {existing!r} is a file, not a folder")
    if not os.path.isdir(folder):
        raise UsageError(
            f"--json {path!r}: the folder {folder!r} does not exist (create it first; "
            "benchmark creates no folders)"
        )
    if not os.access(folder, os.W_OK):
        raise UsageError(f"--json {path!r}: the folder {folder!r} is not writable")


def size_text(image_size) -> str:
    """(224, 224) -> "224"; (224, 160) -> "224x160"."""
    height, width = image_size
    return str(height) if height == width else f"{height}x{width}"


def variant_name(text: str) -> str:
    """The table name ("Ti/16", "R50+B/16") of a ViT variant or hybrid in any spelling
    `keras_vit.spec.configs.resolve_model` takes ("Ti/16", "ViT_Ti16", "ti16", "ViT-Ti_16";
    "R50+B/16", "R50_B16", "r50b16", "R50+ViT-B_16"); a custom
    "patch,hidden,mlp,heads,layers" spec unchanged.

    Raises:
        UsageError: a name `resolve_model` does not know, listing the valid names.
    """
    if "," in text:
        return text
    try:
        named = configs.resolve_model(text)
    except ValueError as error:
        raise UsageError(
            f"--model {text!r} is not a named variant ({configs.variant_list()}) nor a custom "
            f"'patch,hidden,mlp,heads,layers': {error}"
        ) from None
    return named.name


def parse_sizes(text):
    """`"1024,2048"` -> (1024, 2048); `"none"` -> (); raises UsageError otherwise."""
    if text.strip().lower() == "none":
        return ()
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(
            f"--gemm-sizes must be integers separated by commas, got {text!r}"
        ) from None
    if any(size < 1 for size in sizes):
        raise UsageError(f"--gemm-sizes must be positive, got {text!r}")
    return sizes


def run(args):
    """Runs the benchmark in this process and prints the table; returns 0."""

    sizes = check_args(args)
    import keras

    from keras_vit.runtime import precision_auto
    from keras_vit.runtime.precision_probe import shape_from_kwargs

    shape = shape_from_kwargs(variant_arch(args.model), args.image_size)
    choice = precision_auto.choose_precision(
        shape.pop("hidden_dim"),
        mixed_precision=args.mixed_precision,
        jit_compile=args.jit_compile,
        **shape,
    )
    chatty = progress.output_mode(args) != "quiet"
    if chatty:
        print(f"Precision: {choice.describe()}", flush=True)
    keras.config.set_dtype_policy(choice.policy)
    modes = MODES if args.mode == "both" else (args.mode,)
    results = []
    for mode in modes:
        if chatty:
            print(f"timing keras_vit {mode} ...", flush=True)
        results.append(
            measure(
                args.model,
                args.image_size,
                args.batch_size,
                mode,
                xla=choice.jit_compile,
                steps=args.steps,
                repeats=args.repeats,
                warmup=args.warmup,
            )
        )
    peak, per_size = gemm_roof(sizes) if sizes else (None, {})
    add_derived(results, args.model, args.image_size, peak)
    note = (
        f"{model_label(args.model)} @{size_text(args.image_size)}, batch {args.batch_size}, "
        f"{choice.policy}, "
        f"XLA {'on' if choice.jit_compile else 'off'}; GEMM roof (best of float32/bfloat16, "
        "XLA on/off) "
        + (f"{peak:.1f} GFLOP/s" if peak else "not measured")
        + " (peak RSS is cumulative within this one process)"
    )
    print(format_results(results, note))
    if args.json_path:
        payload = {
            "config": vars_for_json(args),
            "precision": choice.as_dict(),
            "gemm_gflops": per_size,
            "results": results,
        }
        write_json(args.json_path, payload)
    return 0


def model_label(model: str) -> str:
    """The table's title of `model`: "ViT-Ti/16", a custom "ViT-8,32,64,4,2", a hybrid
    "R50+B/16" (its name already says ViT's size after the stem)."""
    return model if hybrid_config(model) is not None else f"ViT-{model}"


def vars_for_json(args):
    """The parsed arguments without the `func` callback and the set of typed flags."""
    return {k: v for k, v in vars(args).items() if k not in ("func", "check", "typed_flags")}
