"""The one table of named models: ViT variants and hybrids (paper table 1 and section 3.1).

Every named builder (``ViT_B16``, ``R50_B16`` ...), the CLI's ``--model`` choices and help,
checkpoint-name lookup and the default training recipe read their sizes from here; sizes are
defined here once and nowhere else. Source: the paper's table 1 and the release's
``vit_jax/configs/models.py`` (``get_b16_config``, ``get_r50_b16_config`` ...).
"""

from __future__ import annotations

import dataclasses
import difflib
import re

POOLING_MODES = ("token", "gap")
PATCH_GAP = "patch_gap"
CLASSIFIER_POOLINGS = (*POOLING_MODES, PATCH_GAP, "map")
"""What a ViT builder's `pooling` takes: `TokenPooling`'s modes, "patch_gap" (a class token
in the sequence, the mean of the patch tokens pooled: `TokenPooling("gap")` past every prefix
token), or the MAP head."""
CLASS_TOKEN_POOLINGS = ("token", PATCH_GAP)
"""The poolings whose model has a class token."""


SWIGLU = "swiglu"
UNGATED_ACTIVATIONS = ("gelu", "quick_gelu")
"""The activations of the two-projection MLP (Dense -> activation -> Dense)."""
MLP_ACTIVATIONS = (*UNGATED_ACTIVATIONS, SWIGLU)
"""What the blocks' `mlp_activation` takes; "swiglu" is the gated MLP (three projections:
`keras_vit.layers.mlp.MlpBlock`), the one of DINOv3 H+/16 and 7B/16."""


def has_class_token(pooling: str) -> bool:
    """True when a model with `pooling` has a class token ("token", "patch_gap")."""
    return pooling in CLASS_TOKEN_POOLINGS


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    """Architecture of one ViT variant.

    Attributes:
        patch_size: side of a square patch in pixels (P in the paper).
        hidden_dim: width of every token (D).
        mlp_dim: inner width of the MLP in each block.
        num_heads: attention heads per block; `hidden_dim` must divide by it.
        num_layers: number of Transformer blocks.
        dropout_rate: dropout used by the release for this variant (upstream training).
        attention_dropout_rate: dropout on attention weights (0 everywhere in the release).
    """

    patch_size: int
    hidden_dim: int
    mlp_dim: int
    num_heads: int
    num_layers: int
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0

    def as_kwargs(self) -> dict:
        """The fields as keyword arguments for ``keras_vit.ViT``."""
        return dataclasses.asdict(self)


VIT_CONFIGS: dict[str, ViTConfig] = {
    "Ti/16": ViTConfig(16, 192, 768, 3, 12),
    "S/16": ViTConfig(16, 384, 1536, 6, 12),
    "S/32": ViTConfig(32, 384, 1536, 6, 12),
    "B/8": ViTConfig(8, 768, 3072, 12, 12),
    "B/16": ViTConfig(16, 768, 3072, 12, 12),
    "B/32": ViTConfig(32, 768, 3072, 12, 12),
    "L/16": ViTConfig(16, 1024, 4096, 16, 24, dropout_rate=0.1),
    "L/32": ViTConfig(32, 1024, 4096, 16, 24),
    "H/14": ViTConfig(14, 1280, 5120, 16, 32, dropout_rate=0.1),
    # Patch 14 at the S/B/L widths: DINOv2 (Oquab et al. 2024, table 17; timm
    # `vit_small_patch14_dinov2` ...) and CLIP's ViT-L/14 (Radford et al. 2021, table 20).
    # DINOv2's g/14 has a SwiGLU MLP, which keras_vit does not build: no row.
    "S/14": ViTConfig(14, 384, 1536, 6, 12),
    "B/14": ViTConfig(14, 768, 3072, 12, 12),
    "L/14": ViTConfig(14, 1024, 4096, 16, 24),
    # SigLIP's shape-optimised towers (Alabdulmohsin et al. 2023, "Getting ViT in Shape";
    # big_vision models/vit.py `decode_variant` "So400m" and "g-opt"; timm
    # `vit_so400m_patch14_siglip_*`, `vit_so400m_patch16_siglip_*`, `vit_giantopt_patch16_
    # siglip_*`). They pool by MAP or the mean, with no class token: build them with
    # pooling="map" or "gap".
    "So400m/14": ViTConfig(14, 1152, 4304, 16, 27),
    "So400m/16": ViTConfig(16, 1152, 4304, 16, 27),
    "g-opt/16": ViTConfig(16, 1536, 6144, 16, 40),
}

DINOV3_GATED_CONFIGS: dict[str, ViTConfig] = {
    "H+/16": ViTConfig(16, 1280, 5120, 20, 32),
    "7B/16": ViTConfig(16, 4096, 8192, 32, 40),
}
"""DINOv3's sizes with a gated (SwiGLU) MLP, built with `mlp_activation="swiglu"`, `mlp_dim` the
gated width (Simeoni et al. 2025, arXiv:2508.10104, table 14; timm `vit_huge_plus_patch16_dinov3`:
width 1280, `mlp_ratio` 4, `swiglu_align_to` 8, 32 blocks, 20 heads; `vit_7b_patch16_dinov3`:
width 4096, `mlp_ratio` 2, `swiglu_align_to` 64, 40 blocks, 32 heads). Not rows of
`VIT_CONFIGS` (no ViT of the paper has these sizes): `keras_vit.model.dinov3` reads them."""

DINOV3_HEADS = {
    **{VIT_CONFIGS[v].hidden_dim: VIT_CONFIGS[v].num_heads for v in ("S/16", "B/16", "L/16")},
    **{c.hidden_dim: c.num_heads for c in DINOV3_GATED_CONFIGS.values()},
}
"""Heads of each DINOv3 width (a timm state dict does not record them): 64-wide heads up to
H+/16, 128-wide in 7B/16."""

RECIPE_VIT = ViTConfig(patch_size=4, hidden_dim=64, mlp_dim=128, num_heads=4, num_layers=4)
"""The small ViT of the default training recipe (`keras_vit.train.training.TrainConfig`): patch 4
on 28x28 MNIST (49 tokens). Not a named variant of the paper."""


RECIPE_DEFAULTS = {
    "train": {
        "dataset": "mnist",
        "image_size": 28,
        "epochs": 30,
        "batch_size": 64,
        "learning_rate": 3e-3,
        "seed": 0,
    },
    "finetune": {
        "dataset": "digits",
        "image_size": 40,
        "steps": 300,
        "batch_size": 32,
        "learning_rate": 0.03,
        "seed": 0,
    },
}
"""The schedule defaults of the two recipes (`keras_vit.train.training.TrainConfig` and
`FinetuneConfig` take their field defaults from here), kept here so that `keras-vit train
--help` shows them without importing Keras."""


RESNET_ROOT_WIDTH = 64
"""Channels of the release's ResNet root conv and first stage (`keras_vit.HybridViT`'s default
`resnet_width`; stage s has `width * 2**(s - 1)` bottleneck channels, 4x that out)."""


def resnet_total_stride(resnet_stages) -> int:
    """Pixels per feature-map cell of the release's ResNet with `resnet_stages`: 4 for the
    root (conv 7x7/2, max-pool 3x3/2), x2 per stage after the first (models_resnet.py)."""
    return 4 * 2 ** max(len(resnet_stages) - 1, 0)


@dataclasses.dataclass(frozen=True)
class HybridConfig:
    """Architecture of one named hybrid (paper section 3.1 "Hybrid Architecture"; the
    release's ``vit_jax/configs/models.py``, ``get_r50_b16_config`` and its siblings).

    Attributes:
        resnet_stages: units per ResNet stage; () keeps only the root (conv + max-pool).
        patch_size: patch side on the ResNet feature map (1, or 8 for R+Ti/16).
        transformer: key of `VIT_CONFIGS` whose hidden_dim, mlp_dim, num_heads and
            num_layers the Transformer part uses (sizes defined once).
        dropout_rate: the release's dropout for this hybrid.
    """

    resnet_stages: tuple[int, ...]
    patch_size: int
    transformer: str
    dropout_rate: float = 0.0

    def as_kwargs(self) -> dict:
        """Keyword arguments for `keras_vit.HybridViT`."""
        vit = get_config(self.transformer)
        return {
            "resnet_stages": self.resnet_stages,
            "patch_size": self.patch_size,
            "hidden_dim": vit.hidden_dim,
            "mlp_dim": vit.mlp_dim,
            "num_heads": vit.num_heads,
            "num_layers": vit.num_layers,
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": vit.attention_dropout_rate,
        }

    @property
    def total_stride(self) -> int:
        """Pixels per feature-map cell of the release's ResNet (see `resnet_total_stride`)."""
        return resnet_total_stride(self.resnet_stages)


HYBRID_CONFIGS: dict[str, HybridConfig] = {
    "R+Ti/16": HybridConfig((), 8, "Ti/16"),
    "R26+S/32": HybridConfig((2, 2, 2, 2), 1, "S/32"),
    "R26+B/32": HybridConfig((2, 2, 2, 2), 1, "B/32"),
    "R50+B/16": HybridConfig((3, 4, 9), 1, "B/16", dropout_rate=0.1),
    "R50+L/32": HybridConfig((3, 4, 6, 3), 1, "L/32", dropout_rate=0.1),
}

MODEL_CONFIGS: dict[str, ViTConfig | HybridConfig] = {**VIT_CONFIGS, **HYBRID_CONFIGS}
"""Every named model, ViT and hybrid, by its table name ("B/16", "R50+B/16")."""


RECIPE_NAMES = ("default", "tiny")
"""`keras-vit train --model` names of the training recipe's own small model (not in the
table; "tiny" is an alias of "default")."""

# An AugReg run ("-i21k-300ep-..."), a resolution after the patch ("ViT-S_16-224").
_RELEASE_SUFFIX = re.compile(r"-(?:i1k|i21k)-.*$|(?<=\d)-\d+$")
# timm's model names: "vit_base_patch16", "vit_small_patch14_224", "vit_so400m_patch14"
# (timm vision_transformer.py).
_TIMM_NAME = re.compile(r"vit_(tiny|small|base|large|huge|so400m|giantopt)_patch(\d+)(?:_\d+)?")
_TIMM_SIZES = {
    "tiny": "ti",
    "small": "s",
    "base": "b",
    "large": "l",
    "huge": "h",
    "so400m": "so400m",
    "giantopt": "gopt",
}
# The image side such a name gives: "ViT-B_16-384", an AugReg fine-tune's "...-res_384",
# timm's "vit_base_patch16_384".
_NAMED_SIZE = re.compile(r"(?<=\d)-(\d+)$|-res_(\d+)(?:\.npz)?$|_patch\d+_(\d+)$", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class ModelName:
    """A resolved model name (see `resolve_model`).

    Attributes:
        name: the table name ("B/16", "R50+B/16") or, for the recipe, "default".
        config: the table row (`ViTConfig` or `HybridConfig`); None for the recipe.
        image_size: the image side the spelling names ("B/16-384", "ViT-B_16-384", an
            AugReg "...-res_384" file: 384, as timm's and the release's names mean it), or
            None when it names none.
    """

    name: str
    config: ViTConfig | HybridConfig | None
    image_size: int | None = None

    @property
    def is_recipe(self) -> bool:
        """The training recipe's small model ("default" / "tiny"), not a table row."""
        return self.config is None

    @property
    def is_hybrid(self) -> bool:
        return isinstance(self.config, HybridConfig)

    @property
    def builder_name(self) -> str:
        """The public builder: "ViT_B16", "R50_B16"."""
        return builder_name(self.name)

    @property
    def pixels_per_token(self) -> int:
        """Image pixels per token side: the patch, times the ResNet stride for a hybrid."""
        if self.is_hybrid:
            return self.config.patch_size * self.config.total_stride
        return self.config.patch_size


def _spelling_key(text: str) -> str:
    """The part of a name every spelling shares: "ViT-B_16", "vit_b16", "B/16",
    "vit_base_patch16" -> "b16";
    "R50+ViT-B_16", "R50_B16" -> "r50b16"; an AugReg file or alias name ("S_16-i21k-...",
    "augreg/ViT-S_16-224") -> that of its model."""
    text = text.strip().removesuffix(".npz").removeprefix("augreg/")
    timm = _TIMM_NAME.fullmatch(text.lower())
    if timm:
        return _TIMM_SIZES[timm[1]] + timm[2]
    text = _RELEASE_SUFFIX.sub("", text).lower().replace("vit", "")
    return re.sub(r"[^a-z0-9]", "", text)


def _by_spelling() -> dict[str, str]:
    keys = {_spelling_key(name): name for name in MODEL_CONFIGS}
    assert len(keys) == len(MODEL_CONFIGS), "two table names share a spelling"
    return keys


def valid_names(*, recipes: bool = False, hybrids: bool = True) -> list[str]:
    """The table names `resolve_model` takes (with "default"/"tiny" when `recipes`)."""
    table = MODEL_CONFIGS if hybrids else VIT_CONFIGS
    return [*(RECIPE_NAMES if recipes else ()), *table]


def resolve_model(name, *, recipes: bool = False, hybrids: bool = True) -> ModelName:
    """The one reader of model names: every spelling of every named model to its table row.

    Accepted spellings, for each row (shown for B/16 and R50+B/16): the table's "B/16",
    "R50+B/16"; the builder's "ViT_B16", "R50_B16"; the release's file names "ViT-B_16",
    "R50+ViT-B_16" (the AugReg grammar "B_16", "R50_B_16" and whole AugReg file names
    "B_16-i21k-300ep-...", aliases "augreg/ViT-B_16-224"); timm's "vit_base_patch16" (with
    or without a resolution, "vit_base_patch16_224"); any case, with or without "ViT" and
    separators ("ti16", "vit-ti/16", "r50_b16"). With `recipes`, also "default" and
    "tiny" (the training recipe's small model, `RECIPE_VIT`).

    A trailing image side ("B/16-384", "ViT-B_16-384", AugReg's "-res_384", timm's
    "vit_base_patch16_384") is kept as `image_size` (the caller builds at that size or
    refuses another one), never dropped.

    >>> resolve_model("ti16").name
    'Ti/16'
    >>> resolve_model("R50+ViT-B_16").builder_name
    'R50_B16'
    >>> resolve_model("ViT-B_16-384").image_size
    384

    Raises:
        ValueError: an unknown name (the message lists the valid ones), a hybrid when
            `hybrids` is False, a recipe name when `recipes` is False.
    """
    if recipes and (name is None or str(name).lower() in RECIPE_NAMES):
        return ModelName(RECIPE_NAMES[0], None)
    valid = valid_names(recipes=recipes, hybrids=hybrids)
    table_key = _by_spelling().get(_spelling_key(str(name))) if isinstance(name, str) else None
    if table_key is None or (not hybrids and table_key in HYBRID_CONFIGS):
        if table_key:  # a hybrid where only ViT variants are taken
            raise ValueError(
                f"Model {name!r} is a hybrid; this takes ViT variants only: one of {valid} "
                "(also spelled as the builder, ViT_B16, or the release file, ViT-B_16)."
            )
        guess = suggest_model(name, recipes=recipes, hybrids=hybrids)
        hint = f" (did you mean {guess!r}?)" if guess else ""
        raise ValueError(
            f"Unknown model {name!r}{hint}; expected one of {valid} (also spelled as the "
            "builder, ViT_B16 / R50_B16, or the release file, ViT-B_16 / R50+ViT-B_16)."
        )
    return ModelName(table_key, MODEL_CONFIGS[table_key], _named_size(name))


def suggest_model(name, *, recipes: bool = False, hybrids: bool = True) -> str | None:
    """The table name closest to a misspelt `name` ("B16x" -> "B/16"), or None.

    `difflib.get_close_matches` (ratio >= 0.6) over the spelling keys every accepted
    spelling reduces to ("b16", "r50b16") and the plain lower-case table names, so that a
    suggestion is always a name `resolve_model` takes.

    >>> suggest_model("B16x")
    'B/16'
    >>> suggest_model("zzzz") is None
    True
    """
    if not isinstance(name, str) or not name.strip():
        return None
    candidates = dict(_by_spelling())
    if not hybrids:
        candidates = {k: t for k, t in candidates.items() if t not in HYBRID_CONFIGS}
    if recipes:
        candidates.update({recipe: recipe for recipe in RECIPE_NAMES})
    try:
        key = _spelling_key(name)
    except (ValueError, KeyError):
        key = name.lower()
    found = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.6)
    return candidates[found[0]] if found else None


def _named_size(name: str) -> int | None:
    """The image side at the end of a model name ("B/16-384" -> 384), or None."""
    found = _NAMED_SIZE.search(name.strip())
    return int(next(g for g in found.groups() if g)) if found else None


def get_config(variant: str) -> ViTConfig:
    """Returns the config of a named ViT variant such as ``"B/16"`` (any spelling
    `resolve_model` takes).

    Raises:
        ValueError: if `variant` names no row of ``VIT_CONFIGS``.
    """
    return resolve_model(variant, hybrids=False).config


def get_hybrid_config(variant: str) -> HybridConfig:
    """Returns the config of a named hybrid such as ``"R50+B/16"`` (any spelling
    `resolve_model` takes).

    Raises:
        ValueError: if `variant` names no row of ``HYBRID_CONFIGS``.
    """
    config = resolve_model(variant).config
    if not isinstance(config, HybridConfig):
        raise ValueError(
            f"Unknown hybrid variant {variant!r}; expected one of {sorted(HYBRID_CONFIGS)}."
        )
    return config


def builder_name(variant: str) -> str:
    """The public builder of a table name: "B/16" -> "ViT_B16", "R50+B/16" -> "R50_B16",
    "R+Ti/16" -> "R_Ti16", "g-opt/16" -> "ViT_gopt16"."""
    variant = resolve_model(variant).name
    if variant in HYBRID_CONFIGS:
        return variant.replace("+", "_").replace("/", "")
    return "ViT_" + variant.replace("/", "").replace("-", "")


def release_name(variant: str) -> str:
    """The release's file name of a table name: "B/16" -> "ViT-B_16", "R50+B/16" ->
    "R50+ViT-B_16"."""
    hybrid, _, vit = resolve_model(variant).name.rpartition("+")
    name = "ViT-" + vit.replace("/", "_")
    return f"{hybrid}+{name}" if hybrid else name


def table_name(name: str) -> str:
    """A release name back to the table's: "ViT-B_16" -> "B/16", "R50+ViT-B_16" ->
    "R50+B/16"; other strings unchanged."""
    return re.sub(r"ViT-(\w+)_(\d+)", r"\1/\2", name)


def variant_list(table=VIT_CONFIGS) -> str:
    """ "Ti/16, S/16, ..." for help texts."""
    return ", ".join(table)
