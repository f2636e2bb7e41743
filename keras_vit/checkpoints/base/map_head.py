"""The attention-pooling (MAP) head in PyTorch layout <-> keras_vit's MAP head (big_vision's
`MAPHead`, `keras_vit.layers.MAPHead`), shared by timm's SigLIP towers and Hugging Face's.

The PyTorch layout is timm's `AttentionPoolLatent` (timm/layers/attention_pool.py):
`attn_pool.latent` (1, latent_len, D), `attn_pool.q` (D, D), `attn_pool.kv` (2D, D: keys then
values, each heads x head_dim), `attn_pool.proj`, `attn_pool.norm` and `attn_pool.mlp.fc1/fc2`.
Hugging Face's `SiglipMultiheadAttentionPoolingHead` holds the same tensors under other names
(`head.probe`, `head.attention.in_proj_*` with q, k, v stacked, ...), which
`hf/hf_siglip.py` renames to these. The release's layout is `MAPHead_0/probe`,
`MultiHeadDotProductAttention_0/{query,key,value,out}`, `LayerNorm_0` and
`MlpBlock_0/Dense_0/1`.
"""

from __future__ import annotations

import numpy as np

from keras_vit.checkpoints.base import torch_layout as tl
from keras_vit.spec import layer_names as names

POOL = "attn_pool."
MAP = names.MAP_HEAD + "/"
MAP_ATTENTION = MAP + "MultiHeadDotProductAttention_0/"
# PyTorch sub-layer of the pool -> the release's sub-layer of the MAP head.
MAP_DENSES = {"mlp.fc1": "MlpBlock_0/Dense_0", "mlp.fc2": "MlpBlock_0/Dense_1"}
MAP_NORM = MAP + "LayerNorm_0/"


def has_map_head(arrays: dict) -> bool:
    """True when release-layout `arrays` hold a MAP head."""
    return MAP + "probe" in arrays


def map_from_torch(get, hidden: int, heads: int) -> dict:
    """The release's `MAPHead_0/...` arrays of the pool's `attn_pool.*` tensors (read with
    `get`)."""
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


def map_to_torch(arrays: dict) -> dict:
    """The inverse of `map_from_torch`: the `attn_pool.*` tensors of a MAP-head model ({}
    without one)."""
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
