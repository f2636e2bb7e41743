"""Training recipes: `TrainConfig` and `FinetuneConfig`, the defaults of `keras-vit train`
and `keras-vit finetune` (model, data, schedule, optimizer, loss, augmentation), each checked
as it is made; `build_model` builds the ViT or hybrid a run's model arguments describe. The
schedules and optimizers they use are in `keras_vit.train.schedules`, the loss in
`keras_vit.train.losses`.
"""

from __future__ import annotations

import dataclasses
import math

import keras

from keras_vit._validation import (
    check_choice,
    check_heads,
    check_int,
    check_non_negative_number,
    check_positive_int,
    check_positive_number,
    check_rate,
    to_pair,
)
from keras_vit.layers.position_embedding import POSITION_EMBEDDINGS
from keras_vit.spec.configs import CLASSIFIER_POOLINGS, RECIPE_DEFAULTS, RECIPE_VIT
from keras_vit.train.losses import loss
from keras_vit.train.schedules import (
    DECAYS,
    finetune_optimizer,
    pretrain_optimizer,
)

_TRAIN_DEFAULTS, _FINETUNE_DEFAULTS = RECIPE_DEFAULTS["train"], RECIPE_DEFAULTS["finetune"]

STEMS = ("resnet", "patch")
POSITIVE_INT_FIELDS = (
    "resnet_width",
    "resnet_groups",
    "hidden_dim",
    "num_heads",
    "mlp_dim",
    "num_layers",
    "epochs",
    "batch_size",
)
"""`TrainConfig`'s fields that must be integers > 0."""


def build_model(model_kwargs: dict):
    """`keras_vit.HybridViT(**model_kwargs)` when they name `resnet_stages`, else
    `keras_vit.ViT(**model_kwargs)` (the form config.json records a run's model in)."""
    from keras_vit.model.from_kwargs import build

    return build(model_kwargs)


def _compile_kwargs(config, num_train_examples):
    return {
        "optimizer": config.optimizer(num_train_examples),
        "loss": loss(config.label_smoothing),
        "metrics": ["accuracy"],
        "jit_compile": _resolved_jit_compile(config),
    }


def _check_common(config) -> None:
    """The fields `TrainConfig` and `FinetuneConfig` share: dataset, jit_compile, seed."""
    if not isinstance(config.dataset, str) or not config.dataset:
        raise ValueError(
            f"`dataset` must be a non-empty string. Received: dataset={config.dataset!r}"
        )
    if config.jit_compile not in (True, False, "auto", None):
        raise ValueError(
            "`jit_compile` must be True, False or 'auto'. "
            f"Received: jit_compile={config.jit_compile!r}"
        )
    if not 0 <= check_int("seed", config.seed) < 2**32:
        raise ValueError(f"`seed` must be in [0, 2**32). Received: seed={config.seed!r}")


def _resolved_jit_compile(config) -> bool:
    """The recipe's `jit_compile`, "auto" chosen for this device, the global dtype policy
    and the recipe's width (`keras_vit.runtime.precision_auto.choose_precision`)."""
    if config.jit_compile not in ("auto", None):
        return bool(config.jit_compile)
    from keras_vit.runtime import precision_auto
    from keras_vit.runtime.precision_probe import shape_from_kwargs

    hidden_dim = getattr(config, "hidden_dim", None)
    shape = {}
    if hidden_dim is not None and hasattr(config, "model_kwargs"):
        shape = shape_from_kwargs(config.model_kwargs(1, 1))
        del shape["hidden_dim"]
    return precision_auto.choose_precision(
        hidden_dim,
        mixed_precision=keras.config.dtype_policy().name,
        jit_compile="auto",
        **shape,
    ).jit_compile


@dataclasses.dataclass
class TrainConfig:
    """Defaults of `keras-vit train`: a small hybrid ViT trained from scratch on the embedded
    MNIST.

    Tuned on this project's 2-core CPU (docs/data_and_recipes.md has the measurements). The
    paper finds hybrids ahead of pure ViTs at small compute and data (section 4.2, figure 5),
    and AugReg that small data wants augmentation, regularisation and longer schedules: the
    default `stem="resnet"` is the BiT ResNet root of the release's hybrids (conv 7x7/2,
    GroupNorm, max-pool 3x3/2: `resnet_width` channels, stride 4) feeding 1x1 patches of its
    7x7 feature map to a 4-block, width-64 Transformer (49 tokens, as the patch-4 ViT), trained
    30 epochs of batches of 64 with AdamW (peak learning rate 3e-3), warmup + cosine decay,
    label smoothing and the mild digit crop of `keras_vit.data.default_augmentation("mnist")`,
    in float32 with XLA where the probe finds it the fastest at this width. Batches of 64
    take ~0.8x the time of batches of 32 at the same accuracy (both measured).
    `stem="patch"` is the pure ViT with `patch_size` pixel patches.

    Use:
        config = TrainConfig()
        info = keras_vit.data.describe(config.dataset)
        model = config.build(info.num_classes, info.channels)
        model.compile(**config.compile_kwargs(num_train))
        model.fit(train_ds, epochs=config.num_epochs(num_train), validation_data=val_ds)
    """

    dataset: str = _TRAIN_DEFAULTS["dataset"]
    image_size: int = _TRAIN_DEFAULTS["image_size"]
    stem: str = "resnet"
    resnet_width: int = 32
    resnet_groups: int = 8
    # The Transformer fields default to `keras_vit.spec.configs.RECIPE_VIT` (sizes live there).
    patch_size: int = RECIPE_VIT.patch_size
    hidden_dim: int = RECIPE_VIT.hidden_dim
    num_heads: int = RECIPE_VIT.num_heads
    mlp_dim: int = RECIPE_VIT.mlp_dim
    num_layers: int = RECIPE_VIT.num_layers
    pooling: str = "gap"
    position_embedding: str = "learned"
    dropout_rate: float = RECIPE_VIT.dropout_rate
    epochs: int = _TRAIN_DEFAULTS["epochs"]
    batch_size: int = _TRAIN_DEFAULTS["batch_size"]
    learning_rate: float = _TRAIN_DEFAULTS["learning_rate"]
    weight_decay: float = 0.05
    warmup_epochs: float = 1.0
    decay: str = "cosine"
    label_smoothing: float = 0.1
    global_clipnorm: float | None = 1.0
    jit_compile: bool | str = "auto"
    seed: int = _TRAIN_DEFAULTS["seed"]

    def __post_init__(self):
        """Checks every field, so that a bad recipe (given in Python, or a hand-edited
        config.json) fails before any work; ValueError naming the field and the rule."""
        check_choice("stem", self.stem, STEMS)
        check_choice("decay", self.decay, DECAYS)
        check_choice("pooling", self.pooling, CLASSIFIER_POOLINGS)
        check_choice("position_embedding", self.position_embedding, POSITION_EMBEDDINGS)
        to_pair("image_size", self.image_size)
        to_pair("patch_size", self.patch_size)
        for name in POSITIVE_INT_FIELDS:
            check_positive_int(name, getattr(self, name))
        check_heads(self.hidden_dim, self.num_heads)
        check_rate("dropout_rate", self.dropout_rate)
        check_rate("label_smoothing", self.label_smoothing)
        check_positive_number("learning_rate", self.learning_rate)
        check_non_negative_number("weight_decay", self.weight_decay)
        check_non_negative_number("warmup_epochs", self.warmup_epochs)
        if self.global_clipnorm is not None:
            check_positive_number("global_clipnorm", self.global_clipnorm)
        _check_common(self)

    def model_kwargs(self, num_classes: int, channels: int) -> dict:
        """Keyword arguments of `keras_vit.HybridViT` (stem "resnet": they hold
        `resnet_stages`) or `keras_vit.ViT` (stem "patch") for this recipe."""
        kwargs = {
            "patch_size": self.patch_size,
            "hidden_dim": self.hidden_dim,
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "num_layers": self.num_layers,
            "num_classes": num_classes,
            "image_size": self.image_size,
            "channels": channels,
            "pooling": self.pooling,
            "position_embedding": self.position_embedding,
            "dropout_rate": self.dropout_rate,
        }
        if self.stem == "resnet":
            kwargs.update(
                resnet_stages=[],
                resnet_width=self.resnet_width,
                resnet_groups=self.resnet_groups,
                patch_size=1,
            )
        return kwargs

    def build(self, num_classes: int, channels: int):
        """The recipe's model (uncompiled)."""
        return build_model(self.model_kwargs(num_classes, channels))

    def steps_per_epoch(self, num_train_examples: int) -> int:
        """Full batches per epoch (the training pipeline drops the remainder)."""
        return max(1, num_train_examples // self.batch_size)

    def num_epochs(self, num_train_examples: int) -> int:
        """Epochs to pass to `model.fit`."""
        return self.epochs

    def total_steps(self, num_train_examples: int) -> int:
        return self.steps_per_epoch(num_train_examples) * self.num_epochs(num_train_examples)

    def warmup_steps(self, num_train_examples: int) -> int:
        steps = int(round(self.warmup_epochs * self.steps_per_epoch(num_train_examples)))
        return min(steps, self.total_steps(num_train_examples) - 1)

    def optimizer(self, num_train_examples: int):
        """`pretrain_optimizer` sized for `num_train_examples` training images."""
        return pretrain_optimizer(
            self.learning_rate,
            self.total_steps(num_train_examples),
            self.warmup_steps(num_train_examples),
            weight_decay=self.weight_decay,
            decay=self.decay,
            global_clipnorm=self.global_clipnorm,
        )

    def compile_kwargs(self, num_train_examples: int) -> dict:
        """`model.compile(**...)`: optimizer, loss (integer labels), accuracy, jit_compile."""
        return _compile_kwargs(self, num_train_examples)


@dataclasses.dataclass
class FinetuneConfig:
    """Defaults of `keras-vit finetune`: the release's SGD recipe on the embedded digits.

    The paper's transfer step in miniature: a model pre-trained on MNIST at 28x28 is
    fine-tuned on the UCI digits at 40x40 (position table resized, zero-initialised head).

    The run is counted in optimizer steps, as the paper's fine-tuning (appendix B.1.1: 500
    steps for Pets/Flowers, 10k for CIFAR): `steps` steps split into `validations` "epochs"
    of `steps_per_epoch()` steps, each followed by one validation pass, whatever the size of
    the training set. Use a repeated training set: `model.fit(train_ds.repeat(),
    epochs=config.num_epochs(n), steps_per_epoch=config.steps_per_epoch(n))`.
    """

    dataset: str = _FINETUNE_DEFAULTS["dataset"]
    image_size: int = _FINETUNE_DEFAULTS["image_size"]
    batch_size: int = _FINETUNE_DEFAULTS["batch_size"]
    steps: int = _FINETUNE_DEFAULTS["steps"]
    validations: int = 5
    learning_rate: float = _FINETUNE_DEFAULTS["learning_rate"]
    warmup_steps: int | None = None
    label_smoothing: float = 0.0
    jit_compile: bool | str = "auto"
    seed: int = _FINETUNE_DEFAULTS["seed"]

    def __post_init__(self):
        """Checks every field (see `TrainConfig.__post_init__`); `image_size` None: the
        pre-trained model's."""
        if self.image_size is not None:
            to_pair("image_size", self.image_size)
        for name in ("batch_size", "steps", "validations"):
            check_positive_int(name, getattr(self, name))
        check_positive_number("learning_rate", self.learning_rate)
        if self.warmup_steps is not None:
            check_int("warmup_steps", self.warmup_steps)
            check_non_negative_number("warmup_steps", self.warmup_steps)
        check_rate("label_smoothing", self.label_smoothing)
        _check_common(self)

    def num_epochs(self, num_train_examples: int) -> int:
        """Validation passes of the run (`validations`, at most one per step)."""
        return max(1, min(self.validations, self.steps))

    def steps_per_epoch(self, num_train_examples: int) -> int:
        """Steps between two validations (`steps / validations`, rounded up)."""
        return math.ceil(self.steps / self.num_epochs(num_train_examples))

    def total_steps(self, num_train_examples: int) -> int:
        return self.steps_per_epoch(num_train_examples) * self.num_epochs(num_train_examples)

    def optimizer(self, num_train_examples: int):
        """`finetune_optimizer` sized for `num_train_examples` training images."""
        return finetune_optimizer(
            self.learning_rate, self.total_steps(num_train_examples), self.warmup_steps
        )

    def compile_kwargs(self, num_train_examples: int) -> dict:
        return _compile_kwargs(self, num_train_examples)
