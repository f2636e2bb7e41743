"""Study: the default `keras-vit train` recipe on the embedded MNIST, with plain model.fit.

`TrainConfig()` (a patch-4 ViT) on the 4,000 MNIST training images: held-out accuracy (1,000
images), wall and process CPU time (s) of fit + evaluate, training images/s. Target:
>= 97.5% in under 3 minutes on 2 CPU cores.

    python -m benchmarks.studies.train_mnist --epochs 5 --save /tmp/mnist_vit.npz
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

from benchmarks.studies import report


def train_default(config, verbose=2):
    """Trains `config` on the embedded MNIST; returns (model, results dict)."""
    import keras

    from keras_vit import data

    keras.utils.set_random_seed(config.seed)
    info = data.describe(config.dataset)
    num_train, epochs = info.num_examples["train"], config.num_epochs(info.num_examples["train"])
    load = dict(image_size=config.image_size, shuffle_seed=config.seed)
    train = data.load(config.dataset, "train", batch_size=config.batch_size, training=True, **load)
    test = data.load(config.dataset, "test", batch_size=500, training=False, **load)
    model = config.build(info.num_classes, info.channels)
    model.compile(**config.compile_kwargs(num_train))
    start_wall, start_cpu = time.time(), time.process_time()
    history = model.fit(train, epochs=epochs, validation_data=test, verbose=verbose)
    seen = config.steps_per_epoch(num_train) * config.batch_size * epochs
    rate = round(seen / (time.time() - start_wall), 1)
    loss, accuracy = model.evaluate(test, verbose=0)
    wall, cpu = time.time() - start_wall, time.process_time() - start_cpu
    return model, {
        "recipe": dataclasses.asdict(config), "params": model.count_params(),
        "test_accuracy": round(float(accuracy), 4), "test_loss": round(float(loss), 4),
        "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "cores": os.cpu_count(),
        "train_images_per_s": rate,
        "val_accuracy_per_epoch": [round(v, 4) for v in history.history["val_accuracy"]],
    }  # fmt: skip


def figure_values(results: dict) -> dict:
    """The values the documents quote (benchmarks/figures.py), with their formats."""
    values = {"held_out_accuracy": report.fig(results["test_accuracy"], "{:.2%}")}
    values |= {key: report.fig(results[key], "{:.0f}")
               for key in ("wall_s", "cpu_s", "train_images_per_s") if key in results}  # fmt: skip
    return values | {key: results[key] for key in ("cores", "epochs") if key in results}


def main(argv=None) -> int:
    from keras_vit.train import training

    parser = report.parser(__doc__, "train_mnist.json", "append the results as a JSON line here")
    parser.add_argument("--epochs", type=int, help="override TrainConfig.epochs")
    parser.add_argument("--save", help="write the trained model as an official .npz here")
    args = parser.parse_args(argv)
    report.at_least(parser, args, "epochs")
    overrides = {} if args.epochs is None else {"epochs": args.epochs}
    model, results = train_default(training.TrainConfig(**overrides))
    if args.save:
        from keras_vit import checkpoints

        checkpoints.save_npz(model, args.save)
        results["saved"] = args.save
    print(json.dumps(results))
    report.save_json(args.json, results, append=True)
    about = "the default TrainConfig with plain model.fit"
    report.write_figures(args.results, figure_values(results), __file__, about)
    print(f"held-out accuracy {results['test_accuracy']:.2%} on 1,000 MNIST images; "
          f"wall {results['wall_s']} s, CPU {results['cpu_s']} s on {results['cores']} "
          "cores")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
