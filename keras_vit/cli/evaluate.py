"""`keras-vit evaluate`: accuracy and loss of a trained model on a held-out split."""

from __future__ import annotations

import argparse

from keras_vit.cli import flags, model_files, progress
from keras_vit.cli.flags import UsageError
from keras_vit.cli.model_files import outputs_logits


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "evaluate",
        help="accuracy of a trained model (run directory, .keras or .npz) on a dataset split",
        description=(
            "Evaluate a trained model on a dataset split with the deterministic evaluation "
            "preprocessing (resize to the model's input size, scale to [-1, 1]). RUN_OR_MODEL "
            "is a run directory (its best.keras), a .keras file (loaded in safe mode) or an "
            "official .npz. The dataset defaults to the run's own."
        ),
    )
    parser.add_argument("model", metavar="RUN_OR_MODEL", help="run directory, .keras or .npz")
    flags.add_data_arguments(
        parser, default_dataset_help="default: the run's dataset", bad_images="fail"
    )
    parser.add_argument("--split", default="test", help="split to evaluate (default: test)")
    parser.add_argument(
        "--top-k", type=flags.positive_int, default=5, help="also report top-k accuracy"
    )
    flags.add_model_use_arguments(parser, batch_size=256)
    parser.set_defaults(func=run, check=model_files.check_model_argument)
    return parser


def resolve_dataset(args, config):
    """(dataset name, shots_per_class, DatasetInfo) or UsageError."""
    from keras_vit import data

    run = (config or {}).get("run", {})
    run_dataset = run.get("recipe", {}).get("dataset")
    dataset = args.dataset or run_dataset
    if dataset is None:
        raise UsageError("--dataset is required for a model outside a run directory.")
    shots = run.get("shots_per_class") if dataset == run_dataset else None
    try:
        info = data.describe(dataset, data_dir=args.data_dir, shots_per_class=shots)
    except (ValueError, FileNotFoundError) as error:
        raise UsageError(" ".join(str(error).split())) from None
    if args.split.split("[")[0] not in info.num_examples:
        raise UsageError(
            f"Dataset {info.name!r} has no split {args.split!r}; "
            f"it has {sorted(info.num_examples)}."
        )
    return dataset, shots, info


def check_classes(model, info) -> int:
    num_classes = int(model.output_shape[-1])
    if num_classes != info.num_classes:
        raise UsageError(
            f"The model predicts {num_classes} classes but {info.name!r} has "
            f"{info.num_classes}; fine-tune it first (keras-vit finetune)."
        )
    return num_classes


def run(args) -> int:
    import keras

    from keras_vit import data
    from keras_vit.checkpoints.keras_files.model_io import model_input_preprocessing
    from keras_vit.data.preprocess import from_unit_range

    model, config = model_files.load_model(args.model)
    dataset, shots, info = resolve_dataset(args, config)
    model, precision = model_files.model_with_precision(args, model, probe="cached")
    num_classes = check_classes(model, info)
    top_k = min(args.top_k, num_classes)
    with flags.usage_errors():
        size = data.split_size(dataset, args.split, data_dir=args.data_dir, shots_per_class=shots)
        if size == 0:  # Keras would evaluate no batch and return no accuracy
            raise UsageError(f"--split {args.split!r} of {info.name!r} holds no images.")
        dataset_split = data.load(
            dataset,
            args.split,
            image_size=model_files.model_image_shape(model)[:2],
            batch_size=args.batch_size,
            training=False,
            channels=int(model.input_shape[-1]),
            data_dir=args.data_dir,
            shots_per_class=shots,
            split_seed=(config or {}).get("run", {}).get("split_seed"),
            bad_images=args.bad_images,
        )
    preprocessing = model_input_preprocessing(model)
    if preprocessing != "[-1,1]":
        dataset_split = dataset_split.map(
            lambda images, labels: (from_unit_range(images, preprocessing), labels)
        )
    model.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=outputs_logits(model)),
        metrics=[
            "accuracy",
            keras.metrics.SparseTopKCategoricalAccuracy(k=top_k, name="top_k_accuracy"),
        ],
        jit_compile=precision.jit_compile,
    )
    verbose = progress.keras_verbose(progress.output_mode(args))  # a bar only on a terminal
    results = model.evaluate(dataset_split, verbose=verbose, return_dict=True)
    count = info.num_examples.get(args.split)
    images = f"{count} images" if count else "all images"
    print(
        f"{info.name} '{args.split}' ({images}): accuracy {100 * results['accuracy']:.2f}%, "
        f"top-{top_k} {100 * results['top_k_accuracy']:.2f}%, loss {results['loss']:.4f}"
    )
    return 0
