"""`keras-vit transfer-suite`: VTAB-1k style fine-tuning of one checkpoint on a list of tasks."""

from __future__ import annotations

import argparse
import os

from keras_vit.cli import flags, model_files, progress, run_driver
from keras_vit.cli.flags import UsageError


def add_parser(subparsers) -> argparse.ArgumentParser:
    from keras_vit.evaluate import transfer_suite

    parser = subparsers.add_parser(
        "transfer-suite",
        help="VTAB-1k style transfer: fine-tune on 800/200 of 1,000 examples per task, "
        "print per-task and mean test accuracy",
        description=(
            "Fine-tune one pre-trained model on each task as VTAB-1k does (800 training and "
            "200 validation examples of 1,000 per task; TFDS tasks use VTAB's own "
            "train[:800] / train[800:1000], embedded sets and folders a stratified draw) with "
            "the paper's recipe (zero-initialised head, SGD momentum 0.9, clipping 1.0, warmup "
            f"and cosine decay, {transfer_suite.VTAB_STEPS} steps at learning rate "
            f"{transfer_suite.VTAB_LEARNING_RATE}), keep the model at the end of the schedule "
            "(--select best: the best checkpoint on the validation examples), and print each "
            "task's validation and test accuracy and the mean. Example: "
            "keras-vit transfer-suite runs/mnist --tasks digits mnist --steps 500"
        ),
    )
    parser.add_argument("model", metavar="RUN_OR_MODEL", help="run directory, .keras or .npz")
    parser.add_argument(
        "--tasks", nargs="+", default=list(transfer_suite.DEFAULT_TASKS),
        help="embedded sets (digits, mnist: the default), TFDS names prepared in --data-dir, "
        "or image folders",
    )  # fmt: skip
    parser.add_argument("--data-dir", help="TFDS data directory (never downloads)")
    flags.add_bad_images_argument(parser, default="skip")
    flags.add_image_size_argument(parser, default_text="the model's")
    parser.add_argument(
        "--steps", type=flags.positive_int, default=transfer_suite.VTAB_STEPS,
        help=f"optimizer steps per task (default {transfer_suite.VTAB_STEPS}, the paper's)",
    )  # fmt: skip
    parser.add_argument(
        "--learning-rate", type=flags.positive_float,
        default=transfer_suite.VTAB_LEARNING_RATE, help="SGD base learning rate (default 0.01)",
    )  # fmt: skip
    parser.add_argument(
        "--batch-size", type=flags.positive_int, default=32, help="batch size (default 32)"
    )
    parser.add_argument("--seed", type=flags.seed, default=0, help="training seed (default 0)")
    parser.add_argument("--split-seed", type=flags.seed, default=0, help="seed of the 800/200 draw")
    flags.add_select_argument(parser)
    flags.add_precision_arguments(parser)
    parser.add_argument(
        "--run-dir",
        type=flags.run_dir_path,
        help="parent of the tasks' run directories (default: runs/transfer-suite-<date>-<time>);"
        " a task already run there is reused or resumed",
    )
    progress.add_output_arguments(parser, log_every=False)
    parser.set_defaults(func=run)
    return parser


KEPT = {
    "last": "keeping the model at the end of the schedule",
    "best": "keeping the best checkpoint on the validation examples",
}


def run(args) -> int:
    from keras_vit.evaluate import transfer_suite

    model_file, _ = model_files.resolve_model_path(args.model)
    model, _ = model_files.load_model(args.model)
    size = model_files.model_image_shape(model)[:2]
    run_dir = args.run_dir or run_driver.default_run_dir("transfer-suite")
    if os.path.exists(run_dir) and not os.path.isdir(run_dir):
        raise UsageError(f"--run-dir {run_dir!r} exists and is not a folder.")
    with flags.usage_errors():
        results = transfer_suite.run_suite(
            args.model,
            run_dir,
            args.tasks,
            source_image_size=tuple(size),
            data_dir=args.data_dir,
            image_size=args.image_size,
            steps=args.steps,
            learning_rate=args.learning_rate,
            batch_size=args.batch_size,
            seed=args.seed,
            split_seed=args.split_seed,
            jit_compile=args.jit_compile,
            mixed_precision=args.mixed_precision,
            bad_images=args.bad_images,
            select=args.select,
            verbose=0 if progress.output_mode(args) == "quiet" else 2,  # 2: a line per epoch
        )
    print(
        f"Transfer suite (VTAB-1k style) of {model_file}: {args.steps} SGD steps per task at "
        f"learning rate {args.learning_rate}, {KEPT[args.select]}"
    )
    print(f"{'task':<16} {'classes':>7} {'train':>5} {'val':>4} {'test':>6} {'val acc':>8} "
          f"{'test acc':>8}")  # fmt: skip
    for r in results:
        print(
            f"{r.task:<16} {r.num_classes:>7} {r.num_train:>5} {r.num_validation:>4} "
            f"{r.num_test:>6} {100 * r.validation_accuracy:7.2f}% {100 * r.test_accuracy:7.2f}%"
        )
    print(f"{'mean':<16} {'':>7} {'':>5} {'':>4} {'':>6} {'':>8} "
          f"{100 * transfer_suite.mean_accuracy(results):7.2f}%")  # fmt: skip
    print(f"Run directories: {run_dir}/<task>")
    return 0
