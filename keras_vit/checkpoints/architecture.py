"""Facts about a built keras_vit model that checkpoint code needs, read from its layers.

The class-token decision comes from the model (a `cls` layer), never from a token count; the
patch grid from its `embedding` PatchEmbed; the release name ("ViT-B_16", "R50+ViT-B_16")
from the layer sizes.
"""

from __future__ import annotations

import re

from keras_vit import configs
from keras_vit.checkpoints.naming import find_vit_model
from keras_vit.checkpoints.npz_io import CheckpointError


def num_prefix_tokens(model) -> int:
    """1 if the ViT has a class token (`cls` layer, "token" pooling), else 0."""
    vit = find_vit_model(model)
    return int(any(layer.name == "cls" for layer in vit.layers))


def patch_grid(model) -> tuple[int, int]:
    """The (rows, cols) patch grid of the model's `embedding` layer.

    Raises:
        CheckpointError: if the model was built without a fixed image size.
    """
    embed = find_vit_model(model).get_layer("embedding")
    grid = getattr(embed, "grid_size", None)
    if grid is None:
        raise CheckpointError(
            "The model's patch embedding has no fixed grid (built without a fixed image "
            "size), so the position table cannot be resized to it."
        )
    return tuple(grid)


def _variant_name(variant: str) -> str:
    """ "B/16" -> "ViT-B_16"; "R50+B/16" -> "R50+ViT-B_16" (the release's file names)."""
    hybrid, _, vit = variant.rpartition("+")
    name = "ViT-" + vit.replace("/", "_")
    return f"{hybrid}+{name}" if hybrid else name


def _resnet_stages(vit) -> tuple[int, ...] | None:
    names = [layer.name for layer in vit.layers]
    if "conv_root" not in names:
        return None
    units = {}
    for name in names:
        match = re.fullmatch(r"block(\d+)_unit(\d+)", name)
        if match:
            stage, unit = int(match[1]), int(match[2])
            units[stage] = max(units.get(stage, 0), unit)
    return tuple(units[s] for s in sorted(units))


def release_model_name(model) -> str | None:
    """The release's name of the model's architecture, or None if it is not one of them."""
    vit = find_vit_model(model)
    embed = vit.get_layer("embedding")
    blocks = [layer for layer in vit.layers if re.fullmatch(r"encoderblock_\d+", layer.name)]
    if not blocks:
        return None
    patch = tuple(embed.patch_size)
    arch = (embed.hidden_dim, blocks[0].mlp_dim, blocks[0].num_heads, len(blocks))
    stages = _resnet_stages(vit)
    if stages is None:
        for variant, config in configs.VIT_CONFIGS.items():
            fields = (config.hidden_dim, config.mlp_dim, config.num_heads, config.num_layers)
            if patch == (config.patch_size,) * 2 and arch == fields:
                return _variant_name(variant)
        return None
    try:
        from keras_vit.hybrid import HYBRID_CONFIGS
    except ImportError:
        return None
    for variant, config in HYBRID_CONFIGS.items():
        kwargs = config.as_kwargs()
        fields = tuple(kwargs[k] for k in ("hidden_dim", "mlp_dim", "num_heads", "num_layers"))
        if (
            tuple(kwargs["resnet_stages"]) == stages
            and patch == (kwargs["patch_size"],) * 2
            and arch == fields
        ):
            return _variant_name(variant)
    return None
