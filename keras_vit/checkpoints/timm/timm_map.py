"""timm's attention pooling (`global_pool="map"`, SigLIP / SigLIP 2 image towers) as
keras_vit's MAP head (big_vision's `MAPHead`, `keras_vit.layers.MAPHead`): what of it
keras_vit's head can hold (`check_map`); `base/map_head.py` maps the tensors.

timm's `AttentionPoolLatent` (timm/layers/attention_pool.py) holds `attn_pool.latent`
(1, latent_len, D), `attn_pool.q` (D, D), `attn_pool.kv` (2D, D: keys then values, each
heads x head_dim), `attn_pool.proj`, `attn_pool.norm` and `attn_pool.mlp.fc1/fc2`; its
forward is q = q(latent), k, v = kv(tokens), softmax(q k^T / sqrt(head_dim)) v, proj, then
x + mlp(norm(x)), token 0 pooled. big_vision's MAP head computes the same with
`MAPHead_0/probe`, `MultiHeadDotProductAttention_0/{query,key,value,out}`, `LayerNorm_0`
and `MlpBlock_0/Dense_0/1` (the release's layout, which every keras_vit reader produces).
timm's `VisionTransformer` applies its final `norm` to the tokens before the pool and no
`fc_norm` (`fc_norm` is only the default for "avg"), as keras_vit's "map" pooling does.
"""

from __future__ import annotations

import numpy as np

from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.checkpoints.base.map_head import POOL


def has_map(state: dict) -> bool:
    """True when a timm state dict pools by attention (`attn_pool.latent`)."""
    return POOL + "latent" in state


def check_map(state: dict, path) -> None:
    """Refuses, by name, attention pooling that keras_vit's MAP head cannot hold.

    Raises:
        CheckpointError: more than one latent (`latent_len`), a class token beside the pool
            (keras_vit's "map" pooling has none), or an MLP of another width than the
            blocks' (keras_vit's MAP head takes the model's `mlp_dim`).
    """
    latent = np.shape(state[POOL + "latent"])
    if len(latent) != 3 or latent[:2] != (1, 1):
        raise CheckpointError(
            f"{path}: attn_pool.latent has shape {latent}; keras_vit's MAP head has one probe "
            "token (1, 1, D) (timm latent_len=1)."
        )
    if "cls_token" in state:
        raise CheckpointError(
            f"{path} pools by attention (attn_pool, global_pool='map') and has a cls_token; "
            "keras_vit's MAP pooling is for models without a class token (SigLIP)."
        )
    pool_mlp = np.shape(state.get(POOL + "mlp.fc1.weight"))
    block_mlp = np.shape(state.get("blocks.0.mlp.fc1.weight"))
    if pool_mlp[:1] != block_mlp[:1]:
        raise CheckpointError(
            f"{path}: attn_pool.mlp.fc1 has shape {pool_mlp}, the blocks' mlp.fc1 {block_mlp}; "
            "keras_vit's MAP head has the blocks' MLP width (timm's mlp_ratio)."
        )
