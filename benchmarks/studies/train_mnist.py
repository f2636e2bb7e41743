"""Benchmark: the default `keras-vit train` recipe on the embedded MNIST, with plain model.fit.

Trains `keras_vit.train.training.TrainConfig()` (a small patch-4 ViT) on the 4,000 embedded MNIST
training images and evaluates on the 1,000 held-out ones. Prints the held-out accuracy, the
wall time of `fit` + `evaluate`, the training images per second, and the process CPU time
(on a machine shared with other jobs, CPU seconds / cores is an estimate of the quiet-machine
wall time). Target (issue 4): >= 97.5% in under 3 minutes on 2 CPU cores.

Usage:
    python benchmarks/studies/train_mnist.py                     # the defaults
    python benchmarks/studies/train_mnist.py --results benchmarks/results/train_mnist.json
    python benchmarks/studies/train_mnist.py --cli --results benchmarks/results/keras_vit_train.json
    python benchmarks/studies/train_mnist.py --epochs 5 --save /tmp/mnist_vit.npz
    python benchmarks/studies/train_mnist.py --set hidden_dim=96 --set num_layers=4
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_overrides(pairs, config_class):
    """["field=value", ...] -> {field: value} typed like the dataclass defaults."""
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    defaults = config_class()
    overrides = {}
    for pair in pairs:
        name, _, text = pair.partition("=")
        if name not in fields:
            raise SystemExit(f"unknown recipe field {name!r}; known: {sorted(fields)}")
        default = getattr(defaults, name)
        if isinstance(default, bool):
            overrides[name] = text.lower() in ("1", "true", "yes")
        elif default is None or isinstance(default, (int, float)):
            overrides[name] = type(default)(text) if default is not None else float(text)
        else:
            overrides[name] = text
    return overrides


def train_default(config, verbose=2):
    """Trains `config` on the embedded MNIST; returns (model, results dict)."""
    import keras

    from keras_vit import data

    keras.utils.set_random_seed(config.seed)
    info = data.describe(config.dataset)
    num_train = info.num_examples["train"]
    common = dict(image_size=config.image_size, shuffle_seed=config.seed)
    train = data.load(
        config.dataset, "train", batch_size=config.batch_size, training=True, **common
    )
    test = data.load(config.dataset, "test", batch_size=500, training=False, **common)
    model = config.build(info.num_classes, info.channels)
    model.compile(**config.compile_kwargs(num_train))
    start_wall, start_cpu = time.time(), time.process_time()
    history = model.fit(
        train, epochs=config.num_epochs(num_train), validation_data=test, verbose=verbose
    )
    fit_wall = time.time() - start_wall
    loss, accuracy = model.evaluate(test, verbose=0)
    wall, cpu = time.time() - start_wall, time.process_time() - start_cpu
    seen = config.steps_per_epoch(num_train) * config.batch_size * config.num_epochs(num_train)
    results = {
        "recipe": dataclasses.asdict(config),
        "params": model.count_params(),
        "test_accuracy": round(float(accuracy), 4),
        "test_loss": round(float(loss), 4),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "cores": os.cpu_count(),
        "train_images_per_s": round(seen / fit_wall, 1),
        "val_accuracy_per_epoch": [round(v, 4) for v in history.history["val_accuracy"]],
    }
    return model, results


def train_like_the_cli():
    """What `keras-vit train` with no arguments does (`keras_vit.train.runs.train(RunConfig())`,
    run directory in a temporary folder); returns its results dict."""
    import tempfile

    from keras_vit.train import runs

    with tempfile.TemporaryDirectory() as folder:
        start_wall, start_cpu = time.time(), time.process_time()
        result = runs.train(runs.RunConfig(), os.path.join(folder, "run"), verbose=0)
        wall, cpu = time.time() - start_wall, time.process_time() - start_cpu
    held_out = result.metrics["held_out"]
    return {
        "test_accuracy": round(float(held_out["accuracy"]), 4),
        "test_loss": round(float(held_out["loss"]), 4),
        "epochs": result.metrics["epochs"],
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "cores": os.cpu_count(),
    }


def figure_values(results: dict) -> dict:
    """The values the documents quote (benchmarks/figures.py), with their formats."""
    values = {
        "held_out_accuracy": {"value": results["test_accuracy"], "format": "{:.2%}"},
        "wall_s": {"value": results["wall_s"], "format": "{:.0f}"},
        "cpu_s": {"value": results["cpu_s"], "format": "{:.0f}"},
        "cores": results["cores"],
    }
    if "train_images_per_s" in results:
        values["train_images_per_s"] = {
            "value": results["train_images_per_s"],
            "format": "{:.0f}",
        }
    if "epochs" in results:
        values["epochs"] = results["epochs"]
    return values


def main(argv=None) -> int:
    from keras_vit.train import training

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, help="override TrainConfig.epochs")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override any TrainConfig field (repeatable)",
    )
    parser.add_argument("--save", help="write the trained model as an official .npz here")
    parser.add_argument("--json", help="append the results as one JSON line to this file")
    parser.add_argument(
        "--cli",
        action="store_true",
        help="time what `keras-vit train` does (keras_vit.train.runs.train with the defaults)",
    )
    parser.add_argument(
        "--results",
        help="write the figures the docs quote here (benchmarks/results/*.json; then "
        "`python benchmarks/figures.py --update`)",
    )
    args = parser.parse_args(argv)
    if args.cli:
        results = train_like_the_cli()
        print(json.dumps(results))
        _write_figures(args, results, "`keras-vit train` with no arguments (runs.train)")
        return 0
    overrides = parse_overrides(args.set, training.TrainConfig)
    if args.epochs is not None:
        overrides["epochs"] = args.epochs
    config = training.TrainConfig(**overrides)
    model, results = train_default(config)
    if args.save:
        from keras_vit import checkpoints

        checkpoints.save_npz(model, args.save)
        results["saved"] = args.save
    print(json.dumps(results))
    if args.json:
        with open(args.json, "a") as handle:
            handle.write(json.dumps(results) + "\n")
    _write_figures(args, results, "the default TrainConfig with plain model.fit")
    print(
        f"held-out accuracy {results['test_accuracy']:.2%} on 1,000 MNIST images; "
        f"wall {results['wall_s']} s (fit + evaluate), {results['train_images_per_s']} train "
        f"images/s, CPU {results['cpu_s']} s on {results['cores']} cores"
    )
    return 0


def _write_figures(args, results, about) -> None:
    if not args.results:
        return
    import sys

    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [_HERE, os.path.join(_HERE, ".."), os.path.join(_HERE, "..", "harness")]
    from figures import write_results

    command = "python benchmarks/studies/train_mnist.py " + " ".join(sys.argv[1:])
    write_results(args.results, figure_values(results), command=command.strip(), about=about)
    print(f"wrote {args.results}")


if __name__ == "__main__":
    raise SystemExit(main())
