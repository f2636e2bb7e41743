"""Does the input pipeline keep up? keras_vit.data.load on its own vs the training step.

Measures, interleaved in one process (median of the repeats):
- the images/second `keras_vit.data.load(source, "train", training=True, ...)` delivers on
  its own (iterating the prefetched `tf.data` pipeline; augmentation as the source's
  default), and
- the images/second a training step (forward + backward + AdamW, `train_on_batch`, XLA)
  of the default `keras-vit train` model consumes, on a fixed batch of the same shape.
The ratio is how many times faster data arrives than it is used (target >= 5x).

The model, optimizer, loss, jit setting and batch come from `keras_vit.train.training.TrainConfig`
(what `keras-vit train` uses); `--image-size`, `--batch-size` and `--variant` override them.

    python benchmarks/studies/input_pipeline.py --source mnist
"""

from __future__ import annotations

import argparse
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.join(_HERE, ".."), os.path.join(_HERE, "..", "harness")]

import common  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default="mnist", help="data source for keras_vit.data.load")
    parser.add_argument("--image-size", type=int, help="default: the train config's")
    parser.add_argument("--batch-size", type=int, help="default: the train config's")
    parser.add_argument("--variant", help="a named variant instead of the default model")
    parser.add_argument("--batches", type=int, default=20, help="batches per pipeline repeat")
    parser.add_argument("--steps", type=int, default=5, help="training steps per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-xla", action="store_true")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    if min(args.batches, args.steps, args.repeats) < 1:
        parser.error("--batches, --steps and --repeats must be >= 1")
    named = common.named_image_size(args.variant) if args.variant else None
    if args.variant and (args.image_size is not None or named is not None):
        common.checked_image_size(parser, args)
    elif args.variant:
        common.checked_patch(parser, args.variant)
    elif args.image_size is not None and args.image_size < 1:
        parser.error(f"--image-size {args.image_size}: must be >= 1")
    return args


def default_setup(args, info):
    """(ViT kwargs, compile kwargs, image size, batch size) of the default `keras-vit train`.

    From `keras_vit.train.training.TrainConfig` (its `model_kwargs` and `compile_kwargs`: the
    same optimizer, loss and jit setting as `keras-vit train`), with the flags overriding
    the image size, batch size or architecture (`--variant`).
    """
    from keras_vit.train.training import TrainConfig

    config = TrainConfig()
    if args.image_size:
        config.image_size = args.image_size
    if args.batch_size:
        config.batch_size = args.batch_size
    if args.variant:
        for field, value in common.variant_arch(args.variant).items():
            setattr(config, field, value)
    model_kwargs = config.model_kwargs(info.num_classes, info.channels)
    compile_kwargs = config.compile_kwargs(info.num_examples["train"])
    if args.no_xla:
        compile_kwargs["jit_compile"] = False
    return model_kwargs, compile_kwargs, config.image_size, config.batch_size


def pipeline_rate(iterator, batches, batch_size):
    """Images/second of pulling `batches` batches from a prefetched iterator."""
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * batch_size / (time.perf_counter() - start)


def main(argv=None):
    args = parse_args(argv)
    import numpy as np

    from keras_vit import data
    from keras_vit.train.training import build_model

    info = data.describe(args.source)
    model_kwargs, compile_kwargs, image_size, batch_size = default_setup(args, info)
    dataset = data.load(
        args.source, "train", image_size=image_size, batch_size=batch_size, training=True
    )
    iterator = iter(dataset.repeat())
    images, labels = next(iterator)
    model = build_model({**model_kwargs, "name": "default"})  # the recipe's ViT or hybrid
    model.compile(**compile_kwargs)
    x = np.asarray(images)
    y = np.asarray(labels) if labels.shape.rank == 1 else np.argmax(labels, -1)
    for _ in range(2):
        model.train_on_batch(x, y)
    pipeline_rate(iterator, 2, batch_size)  # fill the prefetch buffer
    data_rates, train_rates = [], []
    for _ in range(args.repeats):
        data_rates.append(pipeline_rate(iterator, args.batches, batch_size))
        seconds = common.time_call(lambda: model.train_on_batch(x, y), args.steps)
        train_rates.append(args.steps * batch_size / seconds)
    data_rate, train_rate = common.median(data_rates), common.median(train_rates)
    result = {
        "source": args.source,
        "image_size": image_size,
        "batch_size": batch_size,
        "model": model_kwargs,
        "jit_compile": bool(compile_kwargs.get("jit_compile")),
        "params": int(model.count_params()),
        "pipeline_images_per_s": data_rate,
        "pipeline_images_per_s_all": data_rates,
        "train_images_per_s": train_rate,
        "train_images_per_s_all": train_rates,
        "ratio": data_rate / train_rate,
        "peak_rss_mb": common.peak_rss_mb(),
    }
    print(
        f"{args.source} train pipeline, {image_size}px, batch {batch_size}: "
        f"{data_rate:.0f} img/s; training step of the default model "
        f"({result['params']:,} params): {train_rate:.0f} img/s; "
        f"ratio {result['ratio']:.1f}x (target >= 5x)"
    )
    if args.json_path:
        common.write_json(args.json_path, result)
        print(f"wrote {args.json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
