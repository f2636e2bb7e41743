"""`keras-vit finetune`: the paper's transfer step (zero-initialised head, resized position
table, SGD fine-tuning recipe) from a pre-trained model into a new run directory."""

from __future__ import annotations

import argparse

from keras_vit.cli import data_checks, flags, run_driver
from keras_vit.spec import configs

# the fields of keras_vit.train.training.FinetuneConfig that flags of the same dest set
RECIPE_FLAGS = (*flags.RUN_RECIPE_FLAGS, "steps")


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "finetune",
        help="fine-tune a pre-trained ViT on another dataset (default: embedded digits at 40px)",
        description=(
            "Fine-tune a pre-trained ViT as in the paper (section 3.2): the head is replaced "
            "by a zero-initialised one for the new classes, the position table is resized to "
            "the new image size, and the model is trained with SGD + momentum, warmup and "
            "cosine decay. Example: keras-vit finetune --weights RUN/best.npz --dataset digits "
            "--image-size 40"
        ),
    )
    parser.add_argument(
        "--weights",
        metavar="SOURCE",
        help="the pre-trained model, architecture included (needed unless --resume): a run, "
        "a .keras, .npz, timm .safetensors, Hugging Face folder or published name",
    )
    flags.add_data_arguments(parser, default_dataset_help="default: digits")
    parser.add_argument(
        "--steps",
        type=flags.positive_int,
        metavar="N",
        help="optimizer steps, rounded up to whole epochs (default: "
        f"{configs.RECIPE_DEFAULTS['finetune']['steps']})",
    )
    parser.add_argument(
        "--lora-rank",
        type=flags.positive_int,
        metavar="R",
        help="rank-R LoRA adapters (Keras' enable_lora) on the attention and MLP projections; "
        "head, norms, a resized position table train in full; files hold merged kernels "
        "(default: off)",
    )
    flags.add_run_arguments(parser, task="finetune")
    parser.set_defaults(func=run, check=check)
    return parser


def build_config(args):
    from keras_vit.train import run_config, runs

    overrides = flags.recipe_overrides(args, RECIPE_FLAGS)
    with flags.usage_errors():
        return runs.RunConfig(
            task="finetune",
            recipe=run_config.recipe_from("finetune", overrides),
            weights=args.weights,
            lora_rank=args.lora_rank,
            **flags.run_config_flags(args),
        )


def check(args) -> None:
    """The checks of finetune's flags that need no TensorFlow (run before importing it)."""
    if not args.resume and not args.weights:
        raise flags.UsageError(
            "--weights is required: a run directory, a checkpoint file or folder, or a "
            "published checkpoint name."
        )
    run_driver.check_run_dir(args)
    data_checks.check_training_data(args, "finetune")
    if args.weights and not args.resume:
        _check_weights_exist(args.weights)


def _check_weights_exist(weights: str) -> None:
    """UsageError for --weights that is neither an existing path nor a published checkpoint
    name (the run's plan would find the same after importing TensorFlow)."""
    import os

    from keras_vit.checkpoints.published import registry

    if not os.path.exists(weights) and registry.lookup(weights) is None:
        raise flags.UsageError(registry.not_found_message(weights))


def run(args) -> int:
    check(args)
    return run_driver.run_training(build_config(args), args, "finetune")
