"""What a user chooses for a training run: `RunConfig` (the `keras-vit train` / `finetune` flags,
or Python), stored in the run's config.json (`to_dict` / `from_dict`), with the recipe of its
task (`keras_vit.train.training.TrainConfig` or `FinetuneConfig`). The values are checked as
they enter (a `ConfigError`, a `ValueError`, naming the field and the rule);
`keras_vit.train.run_plan.plan_run` resolves them against the dataset, the model table and the
strategy.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from keras_vit._validation import to_pair
from keras_vit.runtime.precision import AUTO
from keras_vit.spec import configs, kept_model
from keras_vit.train import training

TASKS = ("train", "finetune")


DEFAULT_MODEL = configs.RECIPE_NAMES[0]


class ConfigError(ValueError):
    """A run configuration that cannot work, found before training starts."""


@dataclasses.dataclass
class RunConfig:
    """The choices of one run; stored in the run's config.json (`to_dict`/`from_dict`).

    Attributes:
        task: "train" (from scratch, `training.TrainConfig` recipe) or "finetune" (the
            paper's transfer step, `training.FinetuneConfig` recipe).
        recipe: the recipe dataclass; its `dataset`, `batch_size`, epochs or steps,
            `learning_rate`, `seed` and `jit_compile` are used as they are; its `image_size`
            (an int or a pair) is checked here and replaced by the `(height, width)` pair.
        model: "default" or "tiny" (the recipe's small model: a hybrid, or with
            `recipe.stem="patch"` a pure ViT) or a named model of
            `keras_vit.spec.configs.MODEL_CONFIGS` in any spelling `configs.resolve_model`
            takes ("Ti/16", "ti16", "R50+B/16", "R50_B16"; train only).
        patch_size: overrides the patch size of the model (train only).
        data_dir: TFDS data directory.
        weights: finetune only: the pre-trained model, a run directory (its best.keras), a
            `.keras` file or an official `.npz` (architecture from the config.json next to it,
            else read from the array shapes).
        strategy: a name of `keras_vit.runtime.distribute.STRATEGY_NAMES`.
        mixed_precision: "auto" (default: `keras_vit.runtime.precision_auto.choose_precision`
            picks for the device and the model width), "float32" (or None), "mixed_float16" or
            "mixed_bfloat16".
        validation_split: the split evaluated after every epoch (with `select="best"`, the
            one that picks the kept model). Default "train[90%:]": a tenth of the training
            images, stratified (per class) and drawn with `split_seed`, carved out of
            "train" - the release holds out 2% of ImageNet's train as "minival" the same
            way. A one-sided slice of "train" is removed from the training data (the model
            trains on its complement, "train[:90%]"); another split name (e.g. TFDS
            "validation") leaves "train" whole.
        split_seed: seed of the carve (embedded, array and folder sources; TFDS slices in its
            own stored order).
        test_split: the split never used for selection, evaluated once at the end with the
            kept model (the one saved as best.keras and exported); None, or a dataset without
            it, reports the validation figures only.
        select: which epoch's model the run keeps as best.keras: "last" (default: the end
            of the schedule, as the paper reports its runs, appendix B.1) or "best" (the
            epoch with the best validation accuracy). A stored configuration without it (runs
            of keras_vit before 2026-12-05) reads as "best", the rule those runs used.
        train_split: None (default): "train", or the complement of a validation slice of
            it; a split string trains on exactly that split instead (the caller keeps it apart
            from `validation_split`, as the VTAB-1k split "train[:800]" / "train[800:1000]").
        bad_images: folder datasets: "skip" (default) or "fail" on image files that cannot be
            decoded (`keras_vit.data.image_check`).
        shots_per_class: embedded datasets only: N images per class form the "train" split
            and the rest "test" (see `keras_vit.data.load`); `validation_split` is carved
            from the N like from any train split.
        allow_test_selection: False (default) refuses a validation or training split that
            shares images with `test_split` (`keras_vit.train.selection`); True allows it.
        remat: True recomputes each Transformer block's activations in the backward pass
            (`keras_vit.ViT(remat=True)`): less memory, about one more forward pass a step.
        lora_rank: finetune only: None (default: every weight trains) or a positive int R:
            LoRA fine-tuning (`keras_vit.finetune(..., lora_rank=R)`, Keras' `enable_lora`
            on the attention and MLP projections). The run's files hold the merged kernels.
    """

    task: str = "train"
    recipe: Any = None
    model: str = DEFAULT_MODEL
    patch_size: int | None = None
    data_dir: str | None = None
    weights: str | None = None
    strategy: str = "auto"
    mixed_precision: str | None = AUTO
    validation_split: str = "train[90%:]"
    split_seed: int = 0
    test_split: str | None = "test"
    train_split: str | None = None
    shots_per_class: int | None = None
    bad_images: str = "skip"
    allow_test_selection: bool = False
    select: str = kept_model.DEFAULT_SELECTION
    remat: bool = False
    lora_rank: int | None = None

    def __post_init__(self):
        if self.task not in TASKS:
            raise ConfigError(f"Unknown task {self.task!r}; expected one of {list(TASKS)}.")
        if self.lora_rank is not None and (
            self.task != "finetune"
            or isinstance(self.lora_rank, bool)
            or not isinstance(self.lora_rank, int)
            or self.lora_rank < 1
        ):
            raise ConfigError(
                "lora_rank must be None or a positive int, and only for task='finetune'. "
                f"Received: lora_rank={self.lora_rank!r}, task={self.task!r}"
            )
        if self.select not in kept_model.SELECTIONS:
            raise ConfigError(
                f"Unknown select {self.select!r}; expected one of {list(kept_model.SELECTIONS)}."
            )
        if self.recipe is None:
            self.recipe = recipe_class(self.task)()
        # Parsed once, here where the setting enters: the (height, width) pair every later
        # step (plan, model arguments, data pipeline, PatchEmbed) receives as it is.
        pair = image_size_pair(self.recipe.image_size)
        if self.recipe.image_size != pair:
            self.recipe = dataclasses.replace(self.recipe, image_size=pair)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "recipe": dataclasses.asdict(self.recipe)}

    @classmethod
    def from_dict(cls, values: dict) -> RunConfig:
        """The `RunConfig` of a `to_dict` record (config.json's "run").

        Raises:
            ConfigError: `values` or its "recipe" is not a mapping, names a field this
                version does not have, or holds a value the field refuses.
        """
        values = dict(fields_of(cls, values, "run configuration"))
        values["recipe"] = recipe_from(values.get("task", "train"), values.get("recipe", {}))
        values.setdefault("select", "best")  # stored before the field existed: their rule
        return cls(**values)


def fields_of(klass, values, what: str) -> dict:
    """`values` if it is a mapping of `klass`'s dataclass fields, else a ConfigError."""
    if not isinstance(values, dict):
        raise ConfigError(f"The {what} must be a JSON object, not {type(values).__name__}.")
    known = {field.name for field in dataclasses.fields(klass)}
    if unknown := sorted(set(values) - known):
        raise ConfigError(
            f"Unknown {what} field(s) {unknown}; this version of keras_vit knows {sorted(known)}."
        )
    return values


def recipe_class(task: str):
    return training.FinetuneConfig if task == "finetune" else training.TrainConfig


def recipe_from(task: str, values: dict):
    """The recipe of `task` (`TrainConfig` or `FinetuneConfig`) with the field `values`
    (the CLI's flags, or a stored config.json's).

    Raises:
        ConfigError: `values` is no mapping, names a field the recipe lacks, or holds a
            value the field refuses (the message names the field and the rule).
    """
    recipe = recipe_class(task)
    values = fields_of(recipe, values, "recipe")
    try:
        return recipe(**values)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"Bad recipe: {error}") from None


def image_size_pair(value) -> tuple[int, int]:
    try:
        return to_pair("image_size", value)
    except ValueError as error:
        raise ConfigError(str(error)) from None
