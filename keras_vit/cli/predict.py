"""`keras-vit predict`: top-k classes of image files or folders of images."""

from __future__ import annotations

import argparse
import logging
import os

from keras_vit.cli import flags, model_files, progress
from keras_vit.cli.flags import UsageError
from keras_vit.cli.model_files import outputs_logits
from keras_vit.spec.image_formats import FORMATS_TEXT, IMAGE_EXTENSIONS

DEFAULT_TOP_K = 5

logger = logging.getLogger(__name__)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "predict",
        help="top-k classes of images (files or folders) with a trained model",
        description=(
            f"Predict the top-k classes of image files ({FORMATS_TEXT}) or of every image "
            "in the given folders (recursively), with the evaluation preprocessing (resize to "
            "the model's input size, channels converted, scaled to [-1, 1]). Class names come "
            "from the run's config.json when the model belongs to a run."
        ),
    )
    parser.add_argument("model", metavar="RUN_OR_MODEL", help="run directory, .keras or .npz")
    parser.add_argument(
        "inputs", metavar="IMAGES_OR_FOLDER", nargs="+", help="image files and/or folders"
    )
    parser.add_argument(
        "--top-k",
        type=flags.positive_int,
        help=f"classes per image (default {DEFAULT_TOP_K}, at most the model's class count)",
    )
    flags.add_bad_images_argument(parser, default="skip")
    flags.add_model_use_arguments(parser, batch_size=64)
    parser.set_defaults(func=run, check=check)
    return parser


def check(args) -> None:
    """RUN_OR_MODEL and IMAGES_OR_FOLDER exist (checked before TensorFlow is imported)."""
    model_files.check_model_argument(args)
    find_images(args.inputs)


def find_images(inputs) -> list[str]:
    """The image files named by `inputs` (folders searched recursively, sorted)."""
    files = []
    for item in inputs:
        if os.path.isdir(item):
            found = sorted(
                os.path.join(folder, name)
                for folder, _, names in os.walk(item)
                for name in names
                if name.lower().endswith(IMAGE_EXTENSIONS)
            )
            if not found:
                raise UsageError(f"No images ({', '.join(IMAGE_EXTENSIONS)}) in folder {item}")
            files += found
        elif os.path.isfile(item):
            files.append(item)
        else:
            raise UsageError(f"Image file or folder not found: {item}")
    return files


def usable_images(files, bad_images: str, channels: int = 3) -> list[str]:
    """The files that decode (`keras_vit.data.image_check`); each bad one is reported on
    stderr ("skip"), or the first one stops the command ("fail"); UsageError if none is left."""
    import sys

    from keras_vit.data import image_check

    usable, bad = image_check.check_images(files, "skip", channels=channels, log=False)
    if bad and bad_images == "fail":
        path, reason = next(iter(bad.items()))
        raise UsageError(f"Bad image {path}: {reason} (--bad-images skip predicts the others).")
    good = [path for path, ok in zip(files, usable, strict=True) if ok]
    if not good:
        path, reason = next(iter(bad.items()))
        count = "" if len(files) == 1 else f" (none of the {len(files)} files decodes)"
        raise UsageError(f"Cannot read {path} as an image: {reason}{count}.")
    for path, reason in bad.items():
        print(f"Skipped {path}: {reason}", file=sys.stderr)
    return good


def read_images(files, image_size, channels):
    """(n, height, width, channels) float32 in [-1, 1]; UsageError for an unreadable file."""
    import numpy as np
    import tensorflow as tf

    from keras_vit.data.decode import decode_file
    from keras_vit.data.preprocess import eval_preprocess

    images = []
    for path in files:
        try:
            raw = decode_file(path, channels)
        except ValueError as error:  # a format it names (TIFF, ...)
            raise UsageError(str(error)) from None
        except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError):
            raise UsageError(f"Cannot read {path} as an image ({FORMATS_TEXT}).") from None
        images.append(eval_preprocess(tf.cast(raw, tf.float32), image_size, channels))
    return np.stack([image.numpy() for image in images])


def class_names(config, num_classes) -> list[str]:
    names = ((config or {}).get("resolved") or {}).get("class_names")
    if names and len(names) == num_classes:
        return [str(name) for name in names]
    return [str(index) for index in range(num_classes)]


def run(args) -> int:
    import numpy as np

    from keras_vit.checkpoints.keras_files.model_io import model_input_preprocessing
    from keras_vit.data.preprocess import from_unit_range

    model, config = model_files.load_model(args.model)
    found = find_images(args.inputs)
    height, width, channels = model_files.model_image_shape(model)
    files = usable_images(found, args.bad_images, channels)
    images = read_images(files, (height, width), channels)
    images = np.asarray(from_unit_range(images, model_input_preprocessing(model)))
    model, _ = model_files.model_with_precision(args, model, probe="cached")
    bar = len(files) > 1000 and progress.output_mode(args) == "batch"  # a terminal only
    outputs = model.predict(images, batch_size=args.batch_size, verbose=1 if bar else 0)
    if outputs_logits(model):
        outputs = np.exp(outputs - outputs.max(axis=-1, keepdims=True))
        outputs /= outputs.sum(axis=-1, keepdims=True)
    names = class_names(config, outputs.shape[-1])
    top_k = min(args.top_k or DEFAULT_TOP_K, outputs.shape[-1])
    if args.top_k is not None and args.top_k > top_k:
        logger.warning(
            "--top-k %d is more than the model's %d classes; showing all %d.",
            args.top_k,
            top_k,
            top_k,
        )
    for path, probabilities in zip(files, outputs, strict=True):
        best = np.argsort(-probabilities, kind="stable")[:top_k]
        ranked = ", ".join(f"{names[i]} ({100 * probabilities[i]:.1f}%)" for i in best)
        print(f"{path}: {ranked}")
    skipped = f"; skipped {len(found) - len(files)} bad file(s)" if len(found) > len(files) else ""
    images_word = "image" if len(files) == 1 else "images"
    if progress.output_mode(args) != "quiet":
        print(f"Predicted {len(files)} {images_word} with {args.model} (top-{top_k}){skipped}.")
    return 0
