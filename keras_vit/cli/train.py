"""`keras-vit train`: train a ViT from scratch into a run directory.

With no arguments it trains the default small hybrid ViT on the embedded MNIST images with
the default recipe (`keras_vit.train.training.TrainConfig`) and prints the test accuracy of the
kept model (`--select`: the last epoch's by default); `--stem patch` trains the pure ViT
instead.
"""

from __future__ import annotations

import argparse

from keras_vit.cli import flags, run_driver
from keras_vit.spec import configs

# the fields of keras_vit.train.training.TrainConfig that flags of the same dest set
RECIPE_FLAGS = (*flags.RUN_RECIPE_FLAGS, "epochs", "stem")


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help="train a ViT from scratch (default: a small hybrid ViT on the embedded MNIST)",
        description=(
            "Train a ViT from scratch into a run directory (config.json, history.csv, "
            "TensorBoard logs, best/last model as .keras and .npz, learning_curves.png, "
            "metrics.json). With no arguments: the default small hybrid (BiT ResNet root + "
            "ViT; --stem patch for the pure ViT) on the embedded MNIST images; prints the "
            "held-out accuracy. A killed run continues with --resume."
        ),
    )
    flags.add_data_arguments(parser, default_dataset_help="default: mnist")
    parser.add_argument(
        "--model",
        default="default",
        help="'default' or 'tiny' (the recipe's small model; see --stem) or a named model: "
        + configs.variant_list(configs.MODEL_CONFIGS)
        + " (also spelled ti16, ViT_Ti16, ViT-Ti_16, R50_B16, R50+ViT-B_16)",
    )
    parser.add_argument(
        "--stem",
        choices=["resnet", "patch"],
        help="default model's stem: 'resnet' (default: the hybrid's BiT ResNet root, conv "
        "7x7/2 + GroupNorm + max-pool, then 1x1 patches of its feature map) or 'patch' (the "
        "pure ViT: --patch-size pixel patches, 4 by default)",
    )
    parser.add_argument(
        "--patch-size",
        type=flags.positive_int,
        help="patch side (overrides the model's; with the resnet stem, on its feature map)",
    )
    parser.add_argument(
        "--epochs",
        type=flags.positive_int,
        help=f"number of epochs (default: {configs.RECIPE_DEFAULTS['train']['epochs']})",
    )
    flags.add_run_arguments(parser, task="train")
    parser.set_defaults(func=run, check=check)
    return parser


def check_stem(args) -> None:
    """UsageError for --stem with a named model: the stem is the recipe's model's choice
    (a table row is a ViT, patch stem, or a hybrid, ResNet stem, by itself)."""
    if args.stem is None:
        return
    try:
        named = configs.resolve_model(args.model, recipes=True)
    except ValueError:
        return  # an unknown name: the run's plan names the valid ones
    if not named.is_recipe:
        kind = "a hybrid (ResNet stem)" if named.is_hybrid else "a ViT (patch stem)"
        raise flags.UsageError(
            f"--stem {args.stem} applies to the recipe's model (--model default or tiny); "
            f"--model {args.model} is {kind} by its table row: drop --stem"
        )


def check(args) -> None:
    """The checks of train's flags that need no TensorFlow (`keras_vit.cli.main` runs them
    before importing it): the model's name, --stem, a size in the name, the run directory."""
    check_model_name(args.model)
    check_stem(args)
    flags.image_size_of_name(args)
    run_driver.check_run_dir(args)


def check_model_name(name) -> None:
    """UsageError for a --model that names no model (the message suggests the closest)."""
    try:
        configs.resolve_model(name, recipes=True)
    except ValueError as error:
        raise flags.UsageError(str(error)) from None


def build_config(args):
    """The `RunConfig` of the flags; raises UsageError for bad combinations."""
    from keras_vit.train import run_config, runs

    check_stem(args)
    flags.image_size_of_name(args)  # "B/16-384": image size 384
    overrides = flags.recipe_overrides(args, RECIPE_FLAGS)
    with flags.usage_errors():
        return runs.RunConfig(
            task="train",
            recipe=run_config.recipe_from("train", overrides),
            model=args.model,
            patch_size=args.patch_size,
            **flags.run_config_flags(args),
        )


def run(args) -> int:
    return run_driver.run_training(build_config(args), args, "train")
