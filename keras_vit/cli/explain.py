"""`keras-vit explain RUN_OR_MODEL IMAGE --out map.png [--grid]`: what the model looks at.

Reads one image, prepares it as evaluation does (bilinear resize to the model's size, then
(x - 127.5) / 127.5), computes the attention rollout of the class token
(`keras_vit.attention_rollout`, Abnar & Zuidema 2020) and writes a PNG of the original image
with the map overlaid and the top-5 classes, at the image's aspect ratio. `--grid` also
writes `<out>_layers.png`, one panel per Transformer block. See docs/visualize.md.
RUN_OR_MODEL comes first, as in `predict` and `evaluate`.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from keras_vit.cli import flags, progress
from keras_vit.cli.flags import UsageError
from keras_vit.cli.model_files import (
    class_names_from_run,
    load_keras_file,
    model_image_shape,
    model_with_precision,
    resolve_model_path,
)
from keras_vit.spec.image_formats import FORMATS_TEXT


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Registers `explain` on the `keras-vit` subparsers."""
    parser = subparsers.add_parser(
        "explain",
        help="overlay the attention rollout of a model on an image, with its top-5 classes",
        description=(
            "Writes a PNG of IMAGE with the model's attention rollout (Abnar & Zuidema 2020) "
            "overlaid and the top-k classes printed on it; --grid adds a per-block figure."
        ),
    )
    parser.add_argument(
        "model", metavar="RUN_OR_MODEL", help="a .keras file or a run directory holding best.keras"
    )
    parser.add_argument("image", metavar="IMAGE", nargs="?", help=f"a {FORMATS_TEXT} file")
    parser.add_argument("--out", required=True, help="PNG file to write (e.g. map.png)")
    parser.add_argument(
        "--grid",
        action="store_true",
        help="also write <out>_layers.png with the class-token attention of every block",
    )
    parser.add_argument("--top-k", type=int, default=5, help="classes listed (default 5)")
    parser.add_argument(
        "--head-fusion",
        choices=("mean", "max", "min"),
        default="mean",
        help="how heads are combined in the rollout (default mean, as in the paper)",
    )
    parser.add_argument(
        "--discard-ratio",
        type=float,
        default=0.0,
        help="fraction of the weakest attention weights dropped per block (default 0)",
    )
    flags.add_model_use_arguments(parser)
    parser.set_defaults(func=run, check=check_arguments)
    return parser


def check_arguments(args) -> None:
    """Raises UsageError for bad arguments, before anything is loaded."""
    if args.image is None:
        raise UsageError("explain takes RUN_OR_MODEL IMAGE (the model first, as in predict)")
    if os.path.isdir(args.image):
        raise UsageError(f"IMAGE is a folder, not an image file: {args.image!r}")
    if not os.path.isfile(args.image):
        raise UsageError(f"image file not found: {args.image!r}")
    if args.top_k <= 0:
        raise UsageError(f"--top-k must be a positive integer. Received: {args.top_k}")
    if not 0 <= args.discard_ratio < 1:
        raise UsageError(f"--discard-ratio must be in [0, 1). Received: {args.discard_ratio}")
    flags.check_output_file("--out", args.out)
    if not args.out.lower().endswith(".png"):
        raise UsageError(f"--out must be a .png file. Received: {args.out!r}")
    if args.grid:  # the second file --grid writes beside --out
        flags.check_output_file("--out (with --grid)", layers_path(args.out))


def read_image(path: str) -> np.ndarray:
    """Decodes an image file to a uint8 `(height, width, channels)` array in its own channels
    (`keras_vit.data.decode`, the rule of `predict`, folder datasets and `serving_bytes`);
    UsageError naming the problem (`keras_vit.data.image_check`) for a file that is no image."""
    import tensorflow as tf

    from keras_vit.data import image_check
    from keras_vit.data.decode import decode_file

    problem = image_check.image_problem(path) if os.path.isfile(path) else None
    if problem:
        raise UsageError(f"Cannot read {path} as an image: {problem}.")
    try:
        image = decode_file(path)
    except ValueError as error:  # a format it names (TIFF, ...)
        raise UsageError(str(error)) from None
    except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError) as error:
        raise UsageError(f"cannot decode image {path!r}: {error.message}") from error
    return image.numpy()


def displayed(image: np.ndarray) -> np.ndarray:
    """The image as drawn under the heat map: gray + alpha shows its gray channel."""
    return image[..., :1] if image.shape[-1] == 2 else image


def prepare(image: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """The evaluation preprocessing (keras_vit.data): resize, channels (1, 3 or 4, by
    `keras_vit.data.decode.to_channels`), [-1, 1]; `(1, H, W, C)`."""
    from keras_vit.data.preprocess import eval_preprocess

    height, width, channels = shape
    if channels not in (1, 3, 4):
        raise UsageError(
            f"explain supports models with 1, 3 or 4 channels; this one has {channels}"
        )
    return eval_preprocess(image, (height, width), channels).numpy()[None]


def top_classes(outputs, class_names, k: int) -> list[tuple[str, float]]:
    """The k most probable `(name, probability)` pairs of one output row (logits or probs)."""
    row = np.asarray(outputs, dtype=np.float64).reshape(-1)
    if not (row.min() >= 0 and abs(row.sum() - 1) < 1e-3):
        row = np.exp(row - row.max())
        row /= row.sum()
    names = class_names if class_names and len(class_names) == len(row) else None
    order = np.argsort(-row)[:k]
    return [(names[i] if names else f"class {i}", float(row[i])) for i in order]


def layers_path(out: str) -> str:
    """`map.png` -> `map_layers.png`."""
    stem, ext = os.path.splitext(out)
    return f"{stem}_layers{ext}"


def run(args) -> int:
    """Writes the overlay PNG (and the per-block grid); returns the exit code."""
    check_arguments(args)
    model_path, run_dir = resolve_model_path(args.model, suffixes=(".keras",))
    class_names = class_names_from_run(run_dir)
    image = read_image(args.image)

    import keras

    from keras_vit.visualize import (
        attention_maps,
        attention_rollout,
        block_attention_map,
        layer_grid_figure,
        overlay_figure,
        save_png,
    )

    model = load_keras_file(model_path)
    model, _ = model_with_precision(
        args, model, probe="cached"
    )  # --mixed-precision / --jit-compile
    batch = prepare(image, model_image_shape(model))
    outputs = model(batch, training=False)
    if len(outputs.shape) != 2:
        raise UsageError(
            f"the model must output class scores (batch, classes); has {outputs.shape}"
        )
    ranked = top_classes(keras.ops.convert_to_numpy(outputs)[0], class_names, args.top_k)
    maps = attention_maps(model, batch)
    rollout = attention_rollout(
        maps, model, head_fusion=args.head_fusion, discard_ratio=args.discard_ratio
    )[0]
    title = "\n".join(f"{p:6.1%}  {name}" for name, p in ranked)
    written = [save_png(overlay_figure(displayed(image), rollout, title), args.out)]
    if args.grid:
        per_block = [block_attention_map(m, model)[0] for m in maps]
        titles = [f"block {i}" for i in range(len(maps))]
        written.append(
            save_png(layer_grid_figure(displayed(image), per_block, titles), layers_path(args.out))
        )
    for name, p in ranked:
        print(f"{p:7.2%}  {name}")
    if progress.output_mode(args) != "quiet":  # --quiet: the classes only
        for path in written:
            print(f"Wrote {path}")
    return 0
