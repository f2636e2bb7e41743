"""Checks of `keras-vit train`/`finetune` flags against the data and the model table that
need no TensorFlow: `keras_vit.cli.main` runs them before importing it, so that their
one-line error comes at once (TensorFlow's import takes 5-35 s on a busy 2-core host).

They cover what can be counted from a file listing or the embedded arrays: a folder with
fewer than two classes, a batch larger than the training split, an image size the patch does
not divide. Anything they cannot decide here (a TFDS dataset, an unreadable folder) is left
to the run's plan (`keras_vit.train.run_plan.plan_run`), which checks the same rules again.
"""

from __future__ import annotations

import os

from keras_vit._validation import nearest_sizes
from keras_vit.cli.flags import UsageError
from keras_vit.spec import configs


def check_training_data(args, task: str) -> None:
    """UsageError for a one-class image folder or a --batch-size larger than the training
    split (the embedded sets and image folders; the split the run trains on: the complement
    of a one-sided --validation-split slice of train, else train)."""
    from keras_vit.data import embedded, folder_layout, split_counts, splits

    if vars(args).get("resume"):
        return  # the flags come from the run's config.json
    dataset = args.dataset or configs.RECIPE_DEFAULTS[task]["dataset"]
    batch = args.batch_size or configs.RECIPE_DEFAULTS[task]["batch_size"]
    try:
        validation = splits.parse_split(args.validation_split)
        train_split = "train"
        if validation.name == "train":
            train_split = splits.complement(args.validation_split) or "train"
        if dataset in embedded.EMBEDDED_SOURCES:
            counts = split_counts.embedded_counts(dataset, train_split, args.shots_per_class)
        elif isinstance(dataset, str) and os.path.isdir(dataset):
            roots = folder_layout.split_roots(dataset)
            first = roots["train"] if "train" in roots else next(iter(roots.values()))
            names = [folder.name for folder in folder_layout.subdirs(first)]
            problem = split_counts.class_count_problem(dataset, len(names), names)
            if problem is not None:
                raise UsageError(problem)
            counts = split_counts.folder_counts(dataset, train_split) if "train" in roots else {}
        else:
            return  # TFDS and other sources: the run's plan reads their sizes
    except (ValueError, OSError) as error:
        if isinstance(error, UsageError):
            raise
        return  # the run's plan names the problem (unknown split, unreadable folder, ...)
    if counts and sum(counts.values()):  # an empty split: the run's plan says so
        try:
            split_counts.check_training_batches(sum(counts.values()), batch, dataset, train_split)
        except ValueError as error:
            raise UsageError(str(error)) from None


def check_patch_grid(args) -> None:
    """UsageError when the image size of a `train` run is not a multiple of its model's patch
    (--patch-size, the named model's, or the recipe's); the message names the nearest sizes
    that work and, when --image-size was not given, that the size is the recipe's default."""
    try:
        named = configs.resolve_model(args.model, recipes=True)
    except ValueError:
        return  # an unknown name: train's check names it
    if args.patch_size is not None:
        patch = args.patch_size
    elif not named.is_recipe:
        patch = named.config.patch_size
    else:
        patch = configs.RECIPE_VIT.patch_size if args.stem == "patch" else 1
    given = args.image_size is not None
    height, width = (
        args.image_size if given else (configs.RECIPE_DEFAULTS["train"]["image_size"],) * 2
    )
    if not (height % patch or width % patch):
        return
    size = f"--image-size {height}" if height == width else f"--image-size {height} {width}"
    if not given:
        size = (
            f"the image size {height} (the train recipe's default, sized for its MNIST digits; "
            "no --image-size given)"
        )
    raise UsageError(
        f"{size} is not divisible by the patch size {patch} of --model {args.model}; the "
        f"nearest sizes that work: {nearest_sizes((height, width), (patch, patch))} (--image-size)"
    )
