"""Benchmark: the paper's transfer step in miniature, MNIST (28 px) -> UCI digits (40 px).

1. Pre-train: the default `keras-vit train` recipe on the embedded MNIST (or load a model
   trained before from an official-layout `.npz` with --weights).
2. Transfer: `keras_vit.finetune(model, 10, image_size=40)` (zero-initialised head, position
   table resized from the 7x7 to the 10x10 grid) fine-tuned with the release's SGD recipe
   (`training.FinetuneConfig`) on 10 labelled digits per class (100 images).
3. Baseline: the same architecture at 40 px trained from scratch on the same 100 images
   (AdamW recipe of `training.pretrain_optimizer`, the same number of steps unless
   --scratch-steps says otherwise).
Both are evaluated on every remaining digit (1,697 images). Target (issue 4): the transferred
model at least 10 points better than the one trained from scratch.

Usage:
    python benchmarks/studies/transfer_digits.py                          # pre-trains first
    python benchmarks/studies/train_mnist.py --save /tmp/mnist_vit.npz
    python benchmarks/studies/transfer_digits.py --weights /tmp/mnist_vit.npz
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def digits_data(config, shots, seed):
    from keras_vit import data

    common = dict(image_size=config.image_size, shots_per_class=shots, shot_seed=seed)
    train = data.load(
        "digits", "train", batch_size=config.batch_size, training=True, shuffle_seed=seed, **common
    )
    test = data.load("digits", "test", batch_size=500, training=False, **common)
    return train, test, data.describe("digits", shots_per_class=shots, shot_seed=seed)


def pretrained_mnist_model(weights, train_config):
    """The MNIST model: loaded from `weights` (.npz) or trained with the default recipe."""

    if weights:
        from keras_vit import checkpoints

        model = train_config.build(num_classes=10, channels=1)
        checkpoints.load_npz(model, weights)
        return model, None
    from train_mnist import train_default  # benchmarks/ is on sys.path when run as a script

    model, results = train_default(train_config, verbose=0)
    return model, results


def run_finetune(model, config, train, test, num_train):
    import keras

    import keras_vit

    keras.utils.set_random_seed(config.seed)

    transferred = keras_vit.finetune(model, 10, image_size=config.image_size)
    transferred.compile(**config.compile_kwargs(num_train))
    transferred.fit(
        train.repeat(),
        epochs=config.num_epochs(num_train),
        steps_per_epoch=config.steps_per_epoch(num_train),
        verbose=0,
    )
    return float(transferred.evaluate(test, verbose=0)[1])


def run_scratch(train_config, finetune_config, train, test, num_train, steps, learning_rate):
    import keras

    from keras_vit.train import training

    keras.utils.set_random_seed(finetune_config.seed)  # same init whatever ran before
    kwargs = train_config.model_kwargs(num_classes=10, channels=1)
    kwargs["image_size"] = finetune_config.image_size
    model = training.build_model(kwargs)
    steps_per_epoch = finetune_config.steps_per_epoch(num_train)
    epochs = max(1, -(-steps // steps_per_epoch))
    total = epochs * steps_per_epoch
    optimizer = training.pretrain_optimizer(
        learning_rate,
        total,
        max(1, total // 10),
        weight_decay=train_config.weight_decay,
        decay="cosine",
    )
    model.compile(
        optimizer=optimizer,
        loss=training.loss(train_config.label_smoothing),
        metrics=["accuracy"],
        jit_compile=True,
    )
    model.fit(train.repeat(), epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=0)
    return float(model.evaluate(test, verbose=0)[1]), total


def main(argv=None) -> int:
    from keras_vit.train import training

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", help="MNIST-trained model as an official .npz")
    parser.add_argument("--shots", type=int, default=10, help="labelled digits per class")
    parser.add_argument("--seed", type=int, default=0, help="seed of the few-shot draw")
    parser.add_argument("--steps", type=int, help="override FinetuneConfig.steps")
    parser.add_argument("--lr", type=float, help="override FinetuneConfig.learning_rate")
    parser.add_argument("--scratch-steps", type=int, help="default: the fine-tuning steps")
    parser.add_argument("--scratch-lr", type=float, default=1e-3)
    parser.add_argument("--json", help="append the results as one JSON line to this file")
    parser.add_argument(
        "--results",
        help="write the figures the docs quote here (benchmarks/results/transfer_digits.json; "
        "then `python benchmarks/figures.py --update`)",
    )
    args = parser.parse_args(argv)

    train_config = training.TrainConfig()
    overrides = {}
    if args.steps:
        overrides["steps"] = args.steps
    if args.lr:
        overrides["learning_rate"] = args.lr
    finetune_config = training.FinetuneConfig(**overrides)

    start = time.time()
    model, pretrain = pretrained_mnist_model(args.weights, train_config)
    train, test, info = digits_data(finetune_config, args.shots, args.seed)
    num_train, num_test = info.num_examples["train"], info.num_examples["test"]
    transferred = run_finetune(model, finetune_config, train, test, num_train)
    steps = finetune_config.total_steps(num_train)
    scratch, scratch_steps = run_scratch(
        train_config,
        finetune_config,
        train,
        test,
        num_train,
        args.scratch_steps or steps,
        args.scratch_lr,
    )
    results = {
        "shots_per_class": args.shots,
        "train_images": num_train,
        "test_images": num_test,
        "image_size": finetune_config.image_size,
        "finetune_steps": steps,
        "finetune_lr": finetune_config.learning_rate,
        "scratch_steps": scratch_steps,
        "transferred_accuracy": round(transferred, 4),
        "scratch_accuracy": round(scratch, 4),
        "gain_points": round(100 * (transferred - scratch), 1),
        "mnist_pretrain": pretrain and pretrain["test_accuracy"],
        "wall_s": round(time.time() - start, 1),
    }
    print(json.dumps(results))
    if args.json:
        with open(args.json, "a") as handle:
            handle.write(json.dumps(results) + "\n")
    if args.results:
        _write_figures(args.results, results)
    print(
        f"{args.shots} digits/class at {finetune_config.image_size}px, tested on {num_test}: "
        f"transferred from MNIST {transferred:.2%}, from scratch {scratch:.2%} "
        f"({results['gain_points']:+.1f} points)"
    )
    return 0


def _write_figures(path, results) -> None:
    """The values docs/data_and_recipes.md quotes (benchmarks/figures.py)."""
    import sys

    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [_HERE, os.path.join(_HERE, ".."), os.path.join(_HERE, "..", "harness")]
    from figures import write_results

    values = {
        "transferred_accuracy": {"value": results["transferred_accuracy"], "format": "{:.1%}"},
        "scratch_accuracy": {"value": results["scratch_accuracy"], "format": "{:.1%}"},
        "gain_points": {"value": results["gain_points"], "format": "{:.1f}"},
    }
    command = "python benchmarks/studies/transfer_digits.py " + " ".join(sys.argv[1:])
    write_results(path, values, command=command.strip(), about=__doc__.split("\n")[0])
    print(f"wrote {path}")


if __name__ == "__main__":
    raise SystemExit(main())
