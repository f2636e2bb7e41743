"""The table of named ViT variants (paper table 1, vit_facts.md section 1).

Every named builder (``ViT_B16`` ...) reads its architecture from ``VIT_CONFIGS``; sizes are
defined here once and nowhere else.
"""

from __future__ import annotations

import dataclasses


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


def get_config(variant: str) -> ViTConfig:
    """Returns the config of a named variant such as ``"B/16"``.

    Raises:
        ValueError: if `variant` is not a key of ``VIT_CONFIGS``.
    """
    try:
        return VIT_CONFIGS[variant]
    except KeyError:
        raise ValueError(
            f"Unknown ViT variant {variant!r}; expected one of {sorted(VIT_CONFIGS)}."
        ) from None
