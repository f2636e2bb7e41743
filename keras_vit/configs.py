"""The one table of named models: ViT variants and hybrids (paper table 1 and section 3.1).

Every named builder (``ViT_B16``, ``R50_B16`` ...), the CLI's ``--model`` choices and help,
checkpoint-name lookup and the default training recipe read their sizes from here; sizes are
defined here once and nowhere else. Source: the paper's table 1 and the release's
``vit_jax/configs/models.py`` (``get_b16_config``, ``get_r50_b16_config`` ...).
"""

from __future__ import annotations

import dataclasses
import re


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
}

RECIPE_VIT = ViTConfig(patch_size=4, hidden_dim=64, mlp_dim=128, num_heads=4, num_layers=4)
"""The small ViT of the default training recipe (`keras_vit.training.TrainConfig`): patch 4
on 28x28 MNIST (49 tokens). Not a named variant of the paper."""


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


def get_config(variant: str) -> ViTConfig:
    """Returns the config of a named variant such as ``"B/16"``.

    Raises:
        ValueError: if `variant` is not a key of ``VIT_CONFIGS``.
    """
    return _lookup(VIT_CONFIGS, variant, "ViT")


def get_hybrid_config(variant: str) -> HybridConfig:
    """Returns the config of a named hybrid such as ``"R50+B/16"``.

    Raises:
        ValueError: if `variant` is not a key of ``HYBRID_CONFIGS``.
    """
    return _lookup(HYBRID_CONFIGS, variant, "hybrid")


def _lookup(table: dict, variant: str, what: str):
    try:
        return table[variant]
    except KeyError:
        raise ValueError(
            f"Unknown {what} variant {variant!r}; expected one of {sorted(table)}."
        ) from None


def builder_name(variant: str) -> str:
    """The public builder of a table name: "B/16" -> "ViT_B16", "R50+B/16" -> "R50_B16",
    "R+Ti/16" -> "R_Ti16"."""
    if variant in HYBRID_CONFIGS:
        return variant.replace("+", "_").replace("/", "")
    return "ViT_" + variant.replace("/", "")


def release_name(variant: str) -> str:
    """The release's file name of a table name: "B/16" -> "ViT-B_16", "R50+B/16" ->
    "R50+ViT-B_16"."""
    hybrid, _, vit = variant.rpartition("+")
    name = "ViT-" + vit.replace("/", "_")
    return f"{hybrid}+{name}" if hybrid else name


def table_name(name: str) -> str:
    """A release name back to the table's: "ViT-B_16" -> "B/16", "R50+ViT-B_16" ->
    "R50+B/16"; other strings unchanged."""
    return re.sub(r"ViT-(\w+)_(\d+)", r"\1/\2", name)


def variant_list(table=VIT_CONFIGS) -> str:
    """ "Ti/16, S/16, ..." for help texts."""
    return ", ".join(table)
