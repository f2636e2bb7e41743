"""What a keras_vit model attends to: attention maps, rollout, attention distance, features.

The ViT paper's figures 6-7 (attention rollout maps, mean attention distance per head);
rollout after Abnar & Zuidema 2020. See docs/visualize.md.
"""

from keras_vit.visualize.attention import attention_maps, feature_extractor
from keras_vit.visualize.attention_figures import layer_grid_figure, overlay_figure, save_png
from keras_vit.visualize.graph import TokenGrid, token_grid
from keras_vit.visualize.rollout import (
    attention_rollout,
    block_attention_map,
    mean_attention_distance,
)

__all__ = [
    "TokenGrid",
    "attention_maps",
    "attention_rollout",
    "block_attention_map",
    "feature_extractor",
    "layer_grid_figure",
    "mean_attention_distance",
    "overlay_figure",
    "save_png",
    "token_grid",
]
