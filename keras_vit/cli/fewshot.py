"""`keras-vit fewshot`: few-shot linear accuracy of a trained model's frozen features."""

from __future__ import annotations

import argparse
import math

from keras_vit.cli import flags, model_files, progress
from keras_vit.cli.flags import UsageError


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "fewshot",
        help="few-shot linear accuracy of a model's frozen representation (paper section 4.1)",
        description=(
            "Few-shot linear evaluation as in the paper (section 4.1, 'Metrics'): the frozen "
            "model's pre-logits (or pooled) features of N images per class are mapped to "
            "{-1, 1}^K targets by regularised least squares with a bias column, solved in "
            "closed form; l2 is chosen on other training images, never on test ones. Prints "
            "the mean and spread over seeds of the test accuracy. Example: keras-vit fewshot "
            "runs/mnist --dataset digits --shots 5 10"
        ),
    )
    parser.add_argument("model", metavar="RUN_OR_MODEL", help="run directory, .keras or .npz")
    flags.add_data_arguments(parser, default_dataset_help="default: the run's dataset")
    parser.add_argument(
        "--shots", type=flags.positive_int, nargs="+", default=[1, 5, 10, 25],
        help="training images per class, one evaluation each (default: 1 5 10 25); every "
        "class of --train-split needs the largest, checked before features are computed",
    )  # fmt: skip
    parser.add_argument(
        "--seeds", type=flags.positive_int, default=3, help="draws per shot count (default 3)"
    )
    parser.add_argument(
        "--holdout-per-class", type=int, default=10,
        help="training images per class (besides the shots) that choose l2 (default 10)",
    )  # fmt: skip
    parser.add_argument("--train-split", default="train", help="pool of the shots (train)")
    parser.add_argument("--test-split", default="test", help="split scored (test)")
    flags.add_allow_test_selection_argument(parser, "--train-split (shots and l2)")
    flags.add_model_use_arguments(parser, batch_size=256)
    parser.set_defaults(func=run)
    return parser


def _dataset(args, config):
    from keras_vit import data

    run_dataset = (config or {}).get("run", {}).get("recipe", {}).get("dataset")
    dataset = args.dataset or run_dataset
    if dataset is None:
        raise UsageError("--dataset is required for a model outside a run directory.")
    try:
        info = data.describe(dataset, data_dir=args.data_dir)
    except (ValueError, FileNotFoundError) as error:
        raise UsageError(" ".join(str(error).split())) from None
    for flag, split in (("--train-split", args.train_split), ("--test-split", args.test_split)):
        if split.split("[")[0] not in info.num_examples:
            raise UsageError(
                f"{flag}: dataset {info.name!r} has no split {split!r}; "
                f"it has {sorted(info.num_examples)}."
            )
    check_test_selection(args, info)
    return dataset, info


def check_test_selection(args, info) -> None:
    """UsageError when --train-split (the shots, and the images that choose l2) shares
    images with --test-split (the split scored), unless --allow-test-selection."""
    from keras_vit.train import selection as test_selection

    try:  # an allowed overlap is logged as a warning (stderr), by check_selection
        test_selection.check_selection(
            {"--train-split": args.train_split},
            ("--test-split", args.test_split),
            sizes=info.num_examples,
            allow=args.allow_test_selection,
        )
    except ValueError as error:
        raise UsageError(" ".join(str(error).split())) from None


def _power_of_two(value: float) -> str:
    exponent = math.log2(value)
    return f"2^{exponent:g}" if exponent == int(exponent) else f"{value:g}"


def check_shots(args, dataset, info) -> None:
    """UsageError, before the model is loaded, when --train-split cannot give max(--shots)
    images of every class: counted per class where the source knows its labels or files
    (embedded sets, arrays, folders), else (TFDS) only against the split's size. A folder's
    files are counted twice: by name first (cheap), then only those that decode
    (`keras_vit.data.decodable_class_counts`: the files `data.load` keeps)."""
    from keras_vit import data
    from keras_vit.evaluate import fewshot

    split, kwargs = args.train_split, dict(data_dir=args.data_dir)
    try:
        counts = data.class_counts(dataset, split, **kwargs)
        size = data.split_size(dataset, split, **kwargs) if counts is None else None
    except (ValueError, FileNotFoundError) as error:
        raise UsageError(f"--train-split: {' '.join(str(error).split())}") from None
    try:
        fewshot.check_shots(args.shots, counts, num_examples=size, num_classes=info.num_classes)
        with flags.usage_errors():  # the files of a class that decode (folders)
            usable = data.decodable_class_counts(dataset, split, bad_images=args.bad_images)
        if usable is not None:
            fewshot.check_shots(args.shots, usable)
    except ValueError as error:
        raise UsageError(
            f"--shots {max(args.shots)} is too many for --train-split {split!r} of "
            f"{info.name!r}: {error}"
        ) from None


def run(args) -> int:
    from keras_vit import data
    from keras_vit.evaluate import fewshot

    if args.holdout_per_class < 0:
        raise UsageError(f"--holdout-per-class must be >= 0, got {args.holdout_per_class}.")
    dataset, info = _dataset(args, model_files.read_run_config(args.model))
    check_shots(args, dataset, info)
    model, _ = model_files.load_model(args.model)
    try:
        layer = fewshot.feature_layer_name(model)
    except ValueError as error:
        raise UsageError(str(error)) from None
    model, precision = model_files.model_with_precision(args, model)  # the features' dtype and XLA
    common_kwargs = dict(
        image_size=model_files.model_image_shape(model)[:2],
        batch_size=args.batch_size,
        training=False,
        channels=int(model.input_shape[-1]),
        data_dir=args.data_dir,
        bad_images=args.bad_images,
    )
    # a Progbar only on a terminal (no control codes in log files), never with --quiet
    bar = progress.output_mode(args) == "batch"
    with flags.usage_errors():
        train = data.load(dataset, args.train_split, **common_kwargs)
        test = data.load(dataset, args.test_split, **common_kwargs)
    try:
        results = fewshot.fewshot_evaluate(
            model,
            train,
            test,
            shots=args.shots,
            seeds=args.seeds,
            holdout_per_class=args.holdout_per_class,
            num_classes=info.num_classes,
            progress=bar,
        )
    except ValueError as error:
        raise UsageError(" ".join(str(error).split())) from None
    if bar:
        print()  # end the progress bar's line
    width = int(model.get_layer(layer).output.shape[-1])
    size = "x".join(str(s) for s in model_files.model_image_shape(model)[:2])
    first = next(iter(results.values()))
    print(
        f"Few-shot linear evaluation of {args.model} on {info.name} at {size}: '{layer}' "
        f"features ({width}-d), ridge regression to {{-1, 1}}^{info.num_classes} with a bias "
        f"column; l2 chosen per draw on up to {args.holdout_per_class} other "
        f"'{args.train_split}' images per class (what the shots leave); {args.seeds} "
        f"seed(s); {first.num_test} '{args.test_split}' images; "
        f"precision {precision.policy}, XLA {'on' if precision.jit_compile else 'off'}."
    )
    print(f"{'shots':>5}  {'accuracy':>8}  {'± std':>6}  l2 chosen per seed")
    for shots, result in results.items():
        l2 = ", ".join(_power_of_two(v) for v in result.l2)
        print(f"{shots:>5}  {100 * result.mean:7.2f}%  {100 * result.std:6.2f}  {l2}")
    return 0
