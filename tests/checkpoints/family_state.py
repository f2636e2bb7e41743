"""Random weights of the ViT family (DeiT, DeiT III, DINOv2, CLIP towers) in timm's and
Hugging Face's key layouts, written by the tests from the libraries' documented key names.

A neutral parameter dict (`random_params`: PyTorch shapes, (out, in) linears, per-block
q/k/v) is spelled in timm's layout (`to_timm`: vision_transformer.py / deit.py names, fused
qkv) and in transformers' (`to_hf`: modeling_deit.py / modeling_dinov2*.py names), so the two
readers can be compared with each other; `forward` is the NumPy forward pass from the
equations (token order [cls][dist][registers][patches]; the position table added to
[cls][dist][patches], or to the patches only with `no_embed_class`; LayerScale on both
residual branches; logits the mean of both heads with a distillation token, or the class
token's head alone without `head_dist` (HF DeiTForImageClassification); HF DeiTModel's
pooler tanh(dense(class token))). None of it uses
keras_vit's converters.
"""

from __future__ import annotations

import math

import numpy as np

from tests.numpy_reference import gelu, layer_norm, softmax

TINY = dict(image_size=28, patch=7, channels=3, hidden=32, heads=4, mlp=64, layers=2, classes=5)


def _r(rng, *shape, scale=0.2):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def random_params(
    rng,
    *,
    dist=False,
    registers=0,
    layer_scale=False,
    norm_pre=False,
    no_embed_class=False,
    head=True,
    head_dist=True,
    pooler=0,
    attn_pool=False,
    class_token=True,
    cfg=TINY,
):
    """A neutral dict of one family member's weights (heads random, not zero); with `dist`
    and `head`, `head_dist=False` leaves the distillation token without its head; `pooler`:
    the width of HF DeiTModel's pooler (0: none); `attn_pool`: timm's attention pooling
    (`AttentionPoolLatent`, SigLIP) and no class token; `class_token=False`: no class token
    (timm `global_pool="avg"`, the SigLIP "gap" towers)."""
    d, m, p, c = cfg["hidden"], cfg["mlp"], cfg["patch"], cfg["channels"]
    n = (cfg["image_size"] // p) ** 2
    class_token = class_token and not attn_pool
    prefix = 0 if no_embed_class or not class_token else 1 + dist
    params = {
        "patch.w": _r(rng, d, c, p, p),
        "patch.b": _r(rng, d),
        "cls": _r(rng, 1, 1, d),
        "pos": _r(rng, 1, prefix + n, d),
        "norm.w": 1 + _r(rng, d),
        "norm.b": _r(rng, d),
        "blocks": [],
    }
    if not class_token:
        del params["cls"]
    if attn_pool:
        params["pool.latent"] = _r(rng, 1, 1, d, scale=1.0)
        for name, shape in (("q", (d, d)), ("kv", (2 * d, d)), ("proj", (d, d))):
            params[f"pool.{name}.w"], params[f"pool.{name}.b"] = _r(rng, *shape), _r(rng, shape[0])
        params["pool.norm.w"], params["pool.norm.b"] = 1 + _r(rng, d), _r(rng, d)
        params["pool.fc1.w"], params["pool.fc1.b"] = _r(rng, m, d), _r(rng, m)
        params["pool.fc2.w"], params["pool.fc2.b"] = _r(rng, d, m), _r(rng, d)
    if dist:
        params["dist"] = _r(rng, 1, 1, d)
    if registers:
        params["reg"] = _r(rng, 1, registers, d)
    if norm_pre:  # timm's pre_norm models (CLIP towers) have no patch-embedding bias
        params["norm_pre.w"], params["norm_pre.b"] = 1 + _r(rng, d), _r(rng, d)
        params["patch.b"] = np.zeros((d,), np.float32)
    for _ in range(cfg["layers"]):
        block = {}
        for name in ("n1", "n2"):
            block[name + ".w"], block[name + ".b"] = 1 + _r(rng, d), _r(rng, d)
        for name in ("q", "k", "v", "o"):
            block[name + ".w"], block[name + ".b"] = _r(rng, d, d), _r(rng, d)
        block["fc1.w"], block["fc1.b"] = _r(rng, m, d), _r(rng, m)
        block["fc2.w"], block["fc2.b"] = _r(rng, d, m), _r(rng, d)
        if layer_scale:
            block["ls1"], block["ls2"] = 1 + _r(rng, d), 1 + _r(rng, d)
        params["blocks"].append(block)
    if head:
        params["head.w"], params["head.b"] = _r(rng, cfg["classes"], d), _r(rng, cfg["classes"])
        if dist and head_dist:
            params["head_dist.w"] = _r(rng, cfg["classes"], d)
            params["head_dist.b"] = _r(rng, cfg["classes"])
    if pooler:
        params["pooler.w"], params["pooler.b"] = _r(rng, pooler, d), _r(rng, pooler)
    return params


def to_timm(params) -> dict:
    """timm's `VisionTransformer` / `VisionTransformerDistilled` state dict."""
    state = {
        "patch_embed.proj.weight": params["patch.w"],
        "patch_embed.proj.bias": params["patch.b"],
        "pos_embed": params["pos"],
        "norm.weight": params["norm.w"],
        "norm.bias": params["norm.b"],
    }
    if "cls" in params:
        state["cls_token"] = params["cls"]
    if "pool.latent" in params:  # timm/layers/attention_pool.py AttentionPoolLatent
        state["attn_pool.latent"] = params["pool.latent"]
        for ours, timm in (("q", "q"), ("kv", "kv"), ("proj", "proj"), ("norm", "norm"),
                           ("fc1", "mlp.fc1"), ("fc2", "mlp.fc2")):  # fmt: skip
            state[f"attn_pool.{timm}.weight"] = params[f"pool.{ours}.w"]
            state[f"attn_pool.{timm}.bias"] = params[f"pool.{ours}.b"]
    for key, timm in (("dist", "dist_token"), ("reg", "reg_token")):
        if key in params:
            state[timm] = params[key]
    if "norm_pre.w" in params:
        state["norm_pre.weight"], state["norm_pre.bias"] = (
            params["norm_pre.w"],
            params["norm_pre.b"],
        )
        del state["patch_embed.proj.bias"]
    for i, block in enumerate(params["blocks"]):
        t = f"blocks.{i}."
        for ours, timm in (
            ("n1", "norm1"),
            ("n2", "norm2"),
            ("fc1", "mlp.fc1"),
            ("fc2", "mlp.fc2"),
        ):
            state[t + timm + ".weight"], state[t + timm + ".bias"] = (
                block[ours + ".w"],
                block[ours + ".b"],
            )
        state[t + "attn.qkv.weight"] = np.concatenate([block[n + ".w"] for n in "qkv"])
        state[t + "attn.qkv.bias"] = np.concatenate([block[n + ".b"] for n in "qkv"])
        state[t + "attn.proj.weight"], state[t + "attn.proj.bias"] = block["o.w"], block["o.b"]
        if "ls1" in block:
            state[t + "ls1.gamma"], state[t + "ls2.gamma"] = block["ls1"], block["ls2"]
    for ours, timm in (("head", "head"), ("head_dist", "head_dist")):
        if ours + ".w" in params:
            state[timm + ".weight"], state[timm + ".bias"] = (
                params[ours + ".w"],
                params[ours + ".b"],
            )
    return state


def to_hf(params, model_type) -> dict:
    """transformers' state dict of `model_type` ("deit", "dinov2", "dinov2_with_registers"):
    the classification model (`deit.` prefix, `cls_classifier` / `distillation_classifier`,
    or `classifier` without `head_dist`) when `params` has heads, else the base model (with
    `pooler.dense` when `params` has a pooler); DINOv2 with its zero `mask_token`."""
    dino = model_type.startswith("dinov2")
    e = "embeddings."
    state = {
        e + "patch_embeddings.projection.weight": params["patch.w"],
        e + "patch_embeddings.projection.bias": params["patch.b"],
        e + "cls_token": params["cls"],
        e + "position_embeddings": params["pos"],
        "layernorm.weight": params["norm.w"],
        "layernorm.bias": params["norm.b"],
    }
    if "dist" in params:
        state[e + "distillation_token"] = params["dist"]
    if "reg" in params:
        state[e + "register_tokens"] = params["reg"]
    if dino:
        state[e + "mask_token"] = np.zeros((1, params["patch.b"].shape[0]), np.float32)
    names = (
        {"n1": "norm1", "n2": "norm2", "fc1": "mlp.fc1", "fc2": "mlp.fc2"}
        if dino
        else {
            "n1": "layernorm_before",
            "n2": "layernorm_after",
            "fc1": "intermediate.dense",
            "fc2": "output.dense",
        }
    )
    for i, block in enumerate(params["blocks"]):
        h = f"encoder.layer.{i}."
        for ours, hf in {
            **names,
            "q": "attention.attention.query",
            "k": "attention.attention.key",
        }.items():
            state[h + hf + ".weight"], state[h + hf + ".bias"] = (
                block[ours + ".w"],
                block[ours + ".b"],
            )
        for ours, hf in (("v", "attention.attention.value"), ("o", "attention.output.dense")):
            state[h + hf + ".weight"], state[h + hf + ".bias"] = (
                block[ours + ".w"],
                block[ours + ".b"],
            )
        if dino:
            state[h + "layer_scale1.lambda1"] = block["ls1"]
            state[h + "layer_scale2.lambda1"] = block["ls2"]
    if "pooler.w" in params:
        state["pooler.dense.weight"], state["pooler.dense.bias"] = (
            params["pooler.w"],
            params["pooler.b"],
        )
    if "head.w" not in params:
        return state
    state = {f"{model_type}." + k: v for k, v in state.items()}
    if "head_dist.w" not in params:  # DeiTForImageClassification
        state["classifier.weight"], state["classifier.bias"] = params["head.w"], params["head.b"]
        return state
    state["cls_classifier.weight"], state["cls_classifier.bias"] = (
        params["head.w"],
        params["head.b"],
    )
    state["distillation_classifier.weight"] = params["head_dist.w"]
    state["distillation_classifier.bias"] = params["head_dist.b"]
    return state


def hf_config(
    model_type,
    cfg=TINY,
    *,
    registers=0,
    head=False,
    hidden_act="gelu",
    eps=1e-6,
    architecture=None,
    pooler=0,
):
    """A config.json of transformers' `DeiTConfig` / `Dinov2Config` /
    `Dinov2WithRegistersConfig` fields (`architecture`: the DeiT class, default by `head`;
    `pooler`: DeiTConfig's `pooler_output_size`)."""
    config = {
        "model_type": model_type,
        "hidden_size": cfg["hidden"],
        "num_hidden_layers": cfg["layers"],
        "num_attention_heads": cfg["heads"],
        "hidden_act": hidden_act,
        "layer_norm_eps": eps,
        "image_size": cfg["image_size"],
        "patch_size": cfg["patch"],
        "num_channels": cfg["channels"],
        "qkv_bias": True,
    }
    if model_type == "deit":
        config["intermediate_size"] = cfg["mlp"]
        default = "DeiTForImageClassificationWithTeacher" if head else "DeiTModel"
        config["architectures"] = [architecture or default]
        if pooler:
            config.update(pooler_output_size=pooler, pooler_act="tanh")
    else:
        config.update(
            mlp_ratio=cfg["mlp"] / cfg["hidden"], layerscale_value=1.0, use_swiglu_ffn=False
        )
    if registers:
        config["num_register_tokens"] = registers
    if head:
        config["id2label"] = {str(i): str(i) for i in range(cfg["classes"])}
    return config


def quick_gelu(x):
    return x / (1 + np.exp(-1.702 * x))


def _linear(x, w, b):
    return x @ w.T + b


def _attention(x, block, heads):
    b, t, d = x.shape
    q, k, v = (
        _linear(x, block[n + ".w"], block[n + ".b"])
        .reshape(b, t, heads, d // heads)
        .transpose(0, 2, 1, 3)
        for n in "qkv"
    )
    a = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(d // heads))
    return _linear((a @ v).transpose(0, 2, 1, 3).reshape(b, t, d), block["o.w"], block["o.b"])


def _embed(s, images, no_embed_class):
    x = np.asarray(images, np.float64).transpose(0, 3, 1, 2)
    w = s["patch.w"]
    d, _, p, _ = w.shape
    b, c, h, wd = x.shape
    patches = (
        x.reshape(b, c, h // p, p, wd // p, p).transpose(0, 2, 4, 1, 3, 5).reshape(b, -1, c * p * p)
    )
    x = patches @ w.reshape(d, -1).T + s["patch.b"]
    prefix = [np.broadcast_to(s[k], (b, 1, d)) for k in ("cls", "dist") if k in s]
    if no_embed_class:
        x = np.concatenate(prefix + [x + s["pos"]], axis=1)
    else:
        x = np.concatenate(prefix + [x], axis=1) + s["pos"]
    if "reg" in s:
        reg = np.broadcast_to(s["reg"], (b,) + s["reg"].shape[1:])
        x = np.concatenate([x[:, : len(prefix)], reg, x[:, len(prefix) :]], axis=1)
    return x


def attention_pool_latent(x, s, heads, eps, act):
    """timm's `AttentionPoolLatent.forward` (latent_len=1, pool_type="token") in NumPy: the
    latent queries the tokens (q from `q`, k and v from the fused `kv`: k rows first, each
    heads x head_dim), `proj`, then x + mlp(norm(x)); token 0."""
    b, t, d = x.shape
    hd = d // heads
    q = _linear(np.broadcast_to(s["pool.latent"], (b, 1, d)), s["pool.q.w"], s["pool.q.b"])
    q = q.reshape(b, 1, heads, hd).transpose(0, 2, 1, 3)
    kv = _linear(x, s["pool.kv.w"], s["pool.kv.b"]).reshape(b, t, 2, heads, hd)
    k, v = kv.transpose(2, 0, 3, 1, 4)
    a = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd))
    y = _linear((a @ v).transpose(0, 2, 1, 3).reshape(b, 1, d), s["pool.proj.w"], s["pool.proj.b"])
    h = layer_norm(y, s["pool.norm.w"], s["pool.norm.b"], eps)
    y = y + _linear(
        act(_linear(h, s["pool.fc1.w"], s["pool.fc1.b"])), s["pool.fc2.w"], s["pool.fc2.b"]
    )
    return y[:, 0]


# timm's `act_layer` names (layers/create_act.py) -> the activation in NumPy.
ACTIVATIONS = {
    "gelu": lambda y: gelu(y, False),
    "gelu_tanh": lambda y: gelu(y, True),
    "quick_gelu": quick_gelu,
}


def forward(params, images, *, heads, eps=1e-6, activation="gelu", no_embed_class=False):
    """The family's forward pass in float64: logits with heads (the mean of both heads with a
    distillation token), else the final LayerNorm's class token; without a class token or
    attention pooling the mean of the tokens (timm `global_pool="avg"`, `fc_norm=False`).
    `activation`: timm's `act_layer` name (`ACTIVATIONS`), in the blocks and attention
    pooling alike."""
    s = {k: np.asarray(v, np.float64) for k, v in params.items() if k != "blocks"}
    act = ACTIVATIONS[activation]
    x = _embed(s, images, no_embed_class)
    if "norm_pre.w" in s:
        x = layer_norm(x, s["norm_pre.w"], s["norm_pre.b"], eps)
    for raw in params["blocks"]:
        block = {k: np.asarray(v, np.float64) for k, v in raw.items()}
        y = _attention(layer_norm(x, block["n1.w"], block["n1.b"], eps), block, heads)
        x = x + y * block.get("ls1", 1.0)
        y = layer_norm(x, block["n2.w"], block["n2.b"], eps)
        y = _linear(act(_linear(y, block["fc1.w"], block["fc1.b"])), block["fc2.w"], block["fc2.b"])
        x = x + y * block.get("ls2", 1.0)
    x = layer_norm(x, s["norm.w"], s["norm.b"], eps)
    if "pool.latent" in s:
        pooled = attention_pool_latent(x, s, heads, eps, act)
        return _linear(pooled, s["head.w"], s["head.b"]) if "head.w" in s else pooled
    if "cls" not in s:  # timm global_pool="avg" (no class token, no registers here)
        pooled = x.mean(axis=1)
        return _linear(pooled, s["head.w"], s["head.b"]) if "head.w" in s else pooled
    if "pooler.w" in s:  # HF DeiTPooler: dense + tanh on token 0
        return np.tanh(_linear(x[:, 0], s["pooler.w"], s["pooler.b"]))
    if "head.w" not in s:
        return x[:, 0]
    logits = _linear(x[:, 0], s["head.w"], s["head.b"])
    if "head_dist.w" in s:
        logits = (logits + _linear(x[:, 1], s["head_dist.w"], s["head_dist.b"])) / 2
    return logits
