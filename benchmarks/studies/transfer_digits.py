"""Study: the paper's transfer step in miniature, MNIST (28 px) -> UCI digits (40 px).

Held-out accuracy (1,697 digits) after training on 10 digits per class: the default MNIST model
(trained here, or --weights .npz) through `keras_vit.finetune` with the release's SGD recipe, and
the same architecture from scratch at 40 px (AdamW). Target: transfer >= 10 points.

    python -m benchmarks.studies.transfer_digits --weights mnist_vit.npz --results FILE.json
"""

from __future__ import annotations

import json
import time

from benchmarks.studies import report

SHOTS, SEED = 10, 0  # labelled digits per class, seed of their draw
FIGURES = {"transferred_accuracy": "{:.1%}", "scratch_accuracy": "{:.1%}", "gain_points": "{:.1f}"}


def fit_and_evaluate(model, compile_kwargs, data, epochs, steps_per_epoch) -> float:
    """Held-out accuracy of `model` after `epochs` x `steps_per_epoch` steps on `data`."""
    train, test = data
    model.compile(**compile_kwargs)
    model.fit(train.repeat(), epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=0)
    return float(model.evaluate(test, verbose=0)[1])


def run_scratch(train_config, finetune_config, data, num_train, steps, learning_rate):
    """(accuracy, steps run) of the architecture trained from scratch at the fine-tuning size."""
    import keras

    from keras_vit.train import losses, schedules, training

    keras.utils.set_random_seed(finetune_config.seed)  # same init whatever ran before
    kwargs = train_config.model_kwargs(num_classes=10, channels=1)
    model = training.build_model({**kwargs, "image_size": finetune_config.image_size})
    per_epoch = finetune_config.steps_per_epoch(num_train)
    epochs = max(1, -(-steps // per_epoch))
    total, decay = epochs * per_epoch, train_config.weight_decay
    schedule = (learning_rate, total, max(1, total // 10))
    optimizer = schedules.pretrain_optimizer(*schedule, weight_decay=decay, decay="cosine")
    loss = losses.loss(train_config.label_smoothing)
    compile_kwargs = dict(optimizer=optimizer, loss=loss, metrics=["accuracy"], jit_compile=True)
    return fit_and_evaluate(model, compile_kwargs, data, epochs, per_epoch), total


def main(argv=None) -> int:
    import keras

    import keras_vit
    from keras_vit import checkpoints, data
    from keras_vit.train import training

    parser = report.parser(__doc__, "transfer_digits.json", "append the results as a JSON line")
    parser.add_argument("--weights", help="the MNIST-trained model as an official .npz")
    parser.add_argument("--scratch-steps", type=int, help="default: the fine-tuning steps")
    parser.add_argument("--scratch-lr", type=float, default=1e-3, help="(1e-3)")
    args = parser.parse_args(argv)
    report.at_least(parser, args, "scratch_steps")
    train_config, config, start = training.TrainConfig(), training.FinetuneConfig(), time.time()
    if args.weights:
        model, pretrain = train_config.build(num_classes=10, channels=1), None
        checkpoints.load_weights(model, args.weights)
    else:
        from train_mnist import train_default

        model, pretrain = train_default(train_config, verbose=0)
    shots = dict(image_size=config.image_size, shots_per_class=SHOTS, shot_seed=SEED)
    train = data.load("digits", "train", batch_size=config.batch_size, training=True,
                      shuffle_seed=SEED, **shots)  # fmt: skip
    test = data.load("digits", "test", batch_size=500, training=False, **shots)
    info = data.describe("digits", shots_per_class=SHOTS, shot_seed=SEED)
    num_train, num_test = info.num_examples["train"], info.num_examples["test"]
    keras.utils.set_random_seed(config.seed)
    transfer = keras_vit.finetune(model, 10, image_size=config.image_size)
    epochs, per_epoch = config.num_epochs(num_train), config.steps_per_epoch(num_train)
    compile_kwargs = config.compile_kwargs(num_train)
    transferred = fit_and_evaluate(transfer, compile_kwargs, (train, test), epochs, per_epoch)
    steps = config.total_steps(num_train)
    scratch_run = (num_train, args.scratch_steps or steps, args.scratch_lr)
    scratch, scratch_steps = run_scratch(train_config, config, (train, test), *scratch_run)
    results = {
        "shots_per_class": SHOTS, "train_images": num_train, "test_images": num_test,
        "image_size": config.image_size, "finetune_steps": steps,
        "finetune_lr": config.learning_rate, "scratch_steps": scratch_steps,
        "transferred_accuracy": round(transferred, 4), "scratch_accuracy": round(scratch, 4),
        "gain_points": round(100 * (transferred - scratch), 1),
        "mnist_pretrain": pretrain and pretrain["test_accuracy"],
        "wall_s": round(time.time() - start, 1),
    }  # fmt: skip
    print(json.dumps(results))
    report.save_json(args.json, results, append=True)
    values = {key: report.fig(results[key], form) for key, form in FIGURES.items()}
    report.write_figures(args.results, values, __file__, __doc__.split("\n")[0])
    print(f"{SHOTS} digits/class at {config.image_size}px, tested on {num_test}: transferred "
          f"{transferred:.2%}, from scratch {scratch:.2%} "
          f"({results['gain_points']:+.1f} points)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
