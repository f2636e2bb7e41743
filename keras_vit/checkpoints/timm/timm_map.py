"""timm's attention pooling (`global_pool="map"`, SigLIP / SigLIP 2 image towers) as
keras_vit's MAP head (big_vision's `MAPHead`, `keras_vit.layers.MAPHead`).

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

from keras_vit.checkpoints.base import torch_layout as tl
from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.spec import layer_names as names

POOL = "attn_pool."
MAP = names.MAP_HEAD + "/"
MAP_ATTENTION = MAP + "MultiHeadDotProductAttention_0/"
# timm sub-layer of the pool -> the release's sub-layer of the MAP head.
MAP_DENSES = {"mlp.fc1": "MlpBlock_0/Dense_0", "mlp.fc2": "MlpBlock_0/Dense_1"}
MAP_NORM = MAP + "LayerNorm_0/"


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


def map_from_timm(get, hidden: int, heads: int) -> dict:
    """The release's `MAPHead_0/...` arrays of timm's `attn_pool.*` (read with `get`)."""
    kv_weight, kv_bias = get(POOL + "kv.weight"), get(POOL + "kv.bias")
    out = {
        MAP + "probe": get(POOL + "latent"),
        MAP_ATTENTION + "query/kernel": tl.head_kernel(get(POOL + "q.weight"), heads),
        MAP_ATTENTION + "query/bias": tl.head_bias(get(POOL + "q.bias"), heads),
        MAP_ATTENTION + "out/kernel": tl.out_kernel(get(POOL + "proj.weight"), heads),
        MAP_ATTENTION + "out/bias": get(POOL + "proj.bias"),
    }
    for j, name in enumerate(("key", "value")):
        rows = slice(j * hidden, (j + 1) * hidden)
        out[MAP_ATTENTION + name + "/kernel"] = tl.head_kernel(kv_weight[rows], heads)
        out[MAP_ATTENTION + name + "/bias"] = tl.head_bias(kv_bias[rows], heads)
    out[MAP_NORM + "scale"], out[MAP_NORM + "bias"] = (
        get(POOL + "norm.weight"),
        get(POOL + "norm.bias"),
    )
    for timm, release in MAP_DENSES.items():
        out[MAP + release + "/kernel"] = tl.linear_to_kernel(get(POOL + timm + ".weight"))
        out[MAP + release + "/bias"] = get(POOL + timm + ".bias")
    return out


def map_to_timm(arrays: dict) -> dict:
    """The inverse of `map_from_timm`: timm's `attn_pool.*` of a MAP-head model ({} without
    one)."""
    if MAP + "probe" not in arrays:
        return {}
    attention = {name: MAP_ATTENTION + name for name in ("query", "key", "value", "out")}
    out = {
        POOL + "latent": arrays[MAP + "probe"],
        POOL + "q.weight": tl.flat_head_linear(arrays[attention["query"] + "/kernel"]),
        POOL + "q.bias": np.asarray(arrays[attention["query"] + "/bias"]).reshape(-1),
        POOL + "kv.weight": np.concatenate(
            [tl.flat_head_linear(arrays[attention[n] + "/kernel"]) for n in ("key", "value")]
        ),
        POOL + "kv.bias": np.concatenate(
            [np.asarray(arrays[attention[n] + "/bias"]).reshape(-1) for n in ("key", "value")]
        ),
        POOL + "proj.weight": tl.flat_linear(arrays[attention["out"] + "/kernel"]),
        POOL + "proj.bias": arrays[attention["out"] + "/bias"],
    }
    out[POOL + "norm.weight"], out[POOL + "norm.bias"] = (
        arrays[MAP_NORM + "scale"],
        arrays[MAP_NORM + "bias"],
    )
    for timm, release in MAP_DENSES.items():
        out[POOL + timm + ".weight"] = tl.kernel_to_linear(arrays[MAP + release + "/kernel"])
        out[POOL + timm + ".bias"] = arrays[MAP + release + "/bias"]
    return out
