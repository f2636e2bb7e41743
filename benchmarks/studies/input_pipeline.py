"""Study: does the input pipeline keep up? keras_vit.data.load alone vs the training step.

Images/s of `keras_vit.data.load(source, "train", training=True)` alone (prefetched, the source's
augmentation) and of a training step (`train_on_batch`, XLA) of the default `keras-vit train`
model (`--image-size`, `--batch-size`, `--model` override it), interleaved; the ratio (>= 5x).

    python -m benchmarks.studies.input_pipeline --source mnist
"""

from __future__ import annotations

import sys

from benchmarks.harness.common import checked_image_size, median, time_call
from benchmarks.studies import report


def parse_args(argv=None):
    parser = report.parser(__doc__)
    parser.add_argument("--source", default="mnist", help="data source of keras_vit.data.load")
    parser.add_argument("--image-size", type=int, help="default: the train config's (variant: 224)")
    parser.add_argument("--batch-size", type=int, help="default: the train config's")
    parser.add_argument("--model", dest="variant", help="a named variant, not the default model")
    parser.add_argument("--batches", type=int, default=20, help="batches per pipeline repeat")
    parser.add_argument("--steps", type=int, default=5, help="training steps per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-xla", action="store_true")
    args = parser.parse_args(argv)
    report.at_least(parser, args, "batches", "steps", "repeats", "image_size", "batch_size")
    if args.variant:  # at its name's size, or 224
        checked_image_size(parser, args)
    return args


def main(argv=None):
    args = parse_args(argv)
    import numpy as np

    from benchmarks.harness.common import peak_rss_mb, variant_arch
    from keras_vit import data
    from keras_vit.train.training import TrainConfig, build_model

    info, config = data.describe(args.source), TrainConfig()  # what `keras-vit train` uses
    config.image_size = size = args.image_size or config.image_size
    config.batch_size = batch = args.batch_size or config.batch_size
    for field, value in variant_arch(args.variant).items() if args.variant else ():
        setattr(config, field, value)
    compile_kwargs = config.compile_kwargs(info.num_examples["train"])
    if args.no_xla:
        compile_kwargs["jit_compile"] = False
    model_kwargs = config.model_kwargs(info.num_classes, info.channels)
    dataset = data.load(args.source, "train", image_size=size, batch_size=batch, training=True)
    iterator = iter(dataset.repeat())
    images, labels = next(iterator)
    model = build_model({**model_kwargs, "name": "default"})  # the recipe's ViT or hybrid
    model.compile(**compile_kwargs)
    x = np.asarray(images)
    y = np.asarray(labels) if labels.shape.rank == 1 else np.argmax(labels, -1)
    step, pull = (lambda: model.train_on_batch(x, y)), (lambda: next(iterator))
    time_call(step, 2)
    time_call(pull, 2)  # fills the prefetch buffer
    rates = {"pipeline": lambda: args.batches * batch / time_call(pull, args.batches),
             "train": lambda: args.steps * batch / time_call(step, args.steps)}  # fmt: skip
    rates = report.run_rounds(rates, args.repeats)
    data_rates, train_rates = rates["pipeline"], rates["train"]
    data_rate, train_rate = median(data_rates), median(train_rates)
    result = {
        "source": args.source, "image_size": size, "batch_size": batch, "model": model_kwargs,
        "jit_compile": bool(compile_kwargs.get("jit_compile")), "params": model.count_params(),
        "pipeline_images_per_s": data_rate, "pipeline_images_per_s_all": data_rates,
        "train_images_per_s": train_rate, "train_images_per_s_all": train_rates,
        "ratio": data_rate / train_rate, "peak_rss_mb": peak_rss_mb(),
    }  # fmt: skip
    print(f"{args.source} train pipeline, {size}px, batch {batch}: {data_rate:.0f} img/s; training "
          f"step of the default model ({result['params']:,} params): {train_rate:.0f} img/s; "
          f"ratio {result['ratio']:.1f}x (target >= 5x)")  # fmt: skip
    report.save_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
