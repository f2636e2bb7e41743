"""Study: the paper's transfer step in miniature, MNIST (28 px) -> UCI digits (40 px).

Measures the held-out accuracy (on every remaining digit, 1,697 images) of two models
trained on 10 labelled digits per class (100 images):
1. transferred: the default `keras-vit train` model of the embedded MNIST (trained here, or
   loaded from an official-layout `.npz` with --weights), through `keras_vit.finetune(model,
   10, image_size=40)` (zero head, position table resized from 7x7 to 10x10), fine-tuned
   with the release's SGD recipe (`training.FinetuneConfig`);
2. from scratch: the same architecture at 40 px, AdamW (`training.pretrain_optimizer`), the
   same number of steps unless --scratch-steps says otherwise.
Target (issue 4): the transferred model at least 10 points better.

    python benchmarks/studies/train_mnist.py --save mnist_vit.npz
    python benchmarks/studies/transfer_digits.py --weights mnist_vit.npz --results FILE.json
"""

from __future__ import annotations

import json
import time

import report


def digits_data(config, shots, seed):
    """(train, test, info) of the UCI digits, `shots` training images per class."""
    from keras_vit import data

    common = dict(image_size=config.image_size, shots_per_class=shots, shot_seed=seed)
    train = data.load("digits", "train", batch_size=config.batch_size, training=True,
                      shuffle_seed=seed, **common)  # fmt: skip
    test = data.load("digits", "test", batch_size=500, training=False, **common)
    return train, test, data.describe("digits", shots_per_class=shots, shot_seed=seed)


def pretrained_mnist_model(weights, train_config):
    """(the MNIST model, its results or None): loaded from `weights` (.npz) or trained."""
    if weights:
        from keras_vit import checkpoints

        model = train_config.build(num_classes=10, channels=1)
        checkpoints.load_npz(model, weights)
        return model, None
    from train_mnist import train_default

    return train_default(train_config, verbose=0)


def fit_and_evaluate(model, compile_kwargs, data, epochs, steps_per_epoch) -> float:
    """Held-out accuracy of `model` after `epochs` x `steps_per_epoch` steps on `data`."""
    train, test = data
    model.compile(**compile_kwargs)
    model.fit(train.repeat(), epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=0)
    return float(model.evaluate(test, verbose=0)[1])


def run_finetune(model, config, data, num_train) -> float:
    import keras

    import keras_vit

    keras.utils.set_random_seed(config.seed)
    transferred = keras_vit.finetune(model, 10, image_size=config.image_size)
    epochs, per_epoch = config.num_epochs(num_train), config.steps_per_epoch(num_train)
    return fit_and_evaluate(transferred, config.compile_kwargs(num_train), data, epochs, per_epoch)


def run_scratch(train_config, finetune_config, data, num_train, steps, learning_rate):
    """(accuracy, steps run) of the architecture trained from scratch at the fine-tuning size."""
    import keras

    from keras_vit.train import training

    keras.utils.set_random_seed(finetune_config.seed)  # same init whatever ran before
    kwargs = train_config.model_kwargs(num_classes=10, channels=1)
    model = training.build_model({**kwargs, "image_size": finetune_config.image_size})
    per_epoch = finetune_config.steps_per_epoch(num_train)
    epochs = max(1, -(-steps // per_epoch))
    total, decay = epochs * per_epoch, train_config.weight_decay
    optimizer = training.pretrain_optimizer(
        learning_rate, total, max(1, total // 10), weight_decay=decay, decay="cosine"
    )
    loss = training.loss(train_config.label_smoothing)
    compile_kwargs = dict(optimizer=optimizer, loss=loss, metrics=["accuracy"], jit_compile=True)
    return fit_and_evaluate(model, compile_kwargs, data, epochs, per_epoch), total


def main(argv=None) -> int:
    from keras_vit.train import training

    parser = report.parser(__doc__, "transfer_digits.json", "append the results as a JSON line")
    parser.add_argument("--weights", help="MNIST-trained model as an official .npz")
    parser.add_argument("--shots", type=int, default=10, help="labelled digits per class (10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the few-shot draw (0)")
    parser.add_argument("--steps", type=int, help="override FinetuneConfig.steps")
    parser.add_argument("--lr", type=float, help="override FinetuneConfig.learning_rate")
    parser.add_argument("--scratch-steps", type=int, help="default: the fine-tuning steps")
    parser.add_argument("--scratch-lr", type=float, default=1e-3, help="(1e-3)")
    args = parser.parse_args(argv)
    report.at_least(parser, args, "shots", "steps", "scratch_steps")
    train_config = training.TrainConfig()
    overrides = {"steps": args.steps, "learning_rate": args.lr}
    config = training.FinetuneConfig(**{k: v for k, v in overrides.items() if v})
    start = time.time()
    model, pretrain = pretrained_mnist_model(args.weights, train_config)
    *data, info = digits_data(config, args.shots, args.seed)
    num_train, num_test = info.num_examples["train"], info.num_examples["test"]
    transferred = run_finetune(model, config, data, num_train)
    steps = config.total_steps(num_train)
    scratch_run = (args.scratch_steps or steps, args.scratch_lr)
    scratch, scratch_steps = run_scratch(train_config, config, data, num_train, *scratch_run)
    results = {
        "shots_per_class": args.shots, "train_images": num_train, "test_images": num_test,
        "image_size": config.image_size, "finetune_steps": steps,
        "finetune_lr": config.learning_rate, "scratch_steps": scratch_steps,
        "transferred_accuracy": round(transferred, 4), "scratch_accuracy": round(scratch, 4),
        "gain_points": round(100 * (transferred - scratch), 1),
        "mnist_pretrain": pretrain and pretrain["test_accuracy"],
        "wall_s": round(time.time() - start, 1),
    }  # fmt: skip
    print(json.dumps(results))
    report.save_json(args.json, results, append=True)
    if args.results:
        values = {key: report.fig(results[key], "{:.1%}")
                  for key in ("transferred_accuracy", "scratch_accuracy")}  # fmt: skip
        values["gain_points"] = report.fig(results["gain_points"], "{:.1f}")
        report.write_figures(args.results, values, __file__, __doc__.split("\n")[0])
    print(
        f"{args.shots} digits/class at {config.image_size}px, tested on {num_test}: transferred "
        f"{transferred:.2%}, from scratch {scratch:.2%} ({results['gain_points']:+.1f} points)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
