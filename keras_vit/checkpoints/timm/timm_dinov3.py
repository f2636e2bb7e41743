"""timm's DINOv3 files (timm/models/eva.py, `Eva` with `rope_type="dinov3"`,
`vit_*_patch16_dinov3`), read into and written from the release layout (what they share with
Hugging Face's layout: `keras_vit.checkpoints.base.dinov3`).

Keys: `cls_token`, `reg_token` (1, R, D), `patch_embed.proj`, `blocks.{i}.norm1`,
`.attn.qkv.weight` (fused (3D, D), no bias), with `qkv_bias=True` also `.attn.q_bias` and
`.attn.v_bias` (the key bias is a zero buffer, not in the file), `.attn.proj`, `.gamma_1`,
`.norm2`, `.mlp.fc1`, `.mlp.fc2`, `.gamma_2`, `norm`, `head`; no `pos_embed`. The H+/16 and
7B/16 sizes (`swiglu_mlp=True`) have a gated MLP, keras_vit's `mlp_activation="swiglu"`: with
`swiglu_align_to` (the named sizes) timm's `SwiGLU`, `.mlp.fc1_g` (the gate), `.mlp.fc1_x`,
`.mlp.fc2`; without it timm's packed `GluMlp`, one `.mlp.fc1` `(2M, D)` whose first half is
the gate (`gate_last=False`) and `.mlp.fc2` `(D, M)`. Both are read (the layout is told by the
keys and shapes), the first is written. A file is taken as DINOv3 when its `config.json`
(timm's `save_for_hf`) names a `*dinov3*` architecture or `model_args.rope_type="dinov3"`, or
keras_vit's metadata says `position_embedding=rope`. Its RoPE options must be DINOv3's (base
100, rotate-half layout, no `ref_feat_shape`).
"""

from __future__ import annotations

import logging
import os

import numpy as np

from keras_vit.checkpoints.base import torch_layout as tl
from keras_vit.checkpoints.base.contents import CheckpointContents
from keras_vit.checkpoints.base.dinov3 import (
    EPSILON,
    LAYER_SCALES,
    NORMS,
    QKV,
    ROPE,
    check_dinov3_model,
)
from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.checkpoints.timm import timm_options
from keras_vit.layers.rotary import ROPE_TEMPERATURE
from keras_vit.spec import layer_names as names
from keras_vit.spec.configs import DINOV3_HEADS, PATCH_GAP, SWIGLU

logger = logging.getLogger(__name__)

META = "keras_vit."
DENSES = {"mlp.fc1": "Dense_0", "mlp.fc2": "Dense_1"}
# timm's `SwiGLU` (separate gate and value projections) -> the release keys of the gated MLP.
GATE = names.MLP_GATE
GATED_DENSES = {"mlp.fc1_g": GATE, "mlp.fc1_x": "Dense_0", "mlp.fc2": "Dense_1"}
# timm's `global_pool` of a DINOv3 -> `CheckpointContents.pooling` (Eva.pool: "avg" is
# `x[:, num_prefix_tokens:].mean(1)` after the final norm, no fc_norm).
GLOBAL_POOLS = {"token": None, "avg": PATCH_GAP}
# timm model_args that change DINOv3's RoPE or MLP away from what keras_vit builds, and the
# value keras_vit's equals (None: the argument must be absent or false).
TIMM_FIXED_ARGS = {
    "rope_type": "dinov3",
    "rope_temperature": ROPE_TEMPERATURE,
    "rope_rotate_half": True,
    "rope_grid_offset": 0.0,
    "rope_grid_indexing": "ij",
    "use_abs_pos_emb": False,
    "ref_feat_shape": None,
    "scale_mlp": None,
    "scale_attn_inner": None,
    "use_post_norm": None,
    "use_pre_transformer_norm": None,
}


def is_timm_dinov3(state: dict, metadata: dict, config: dict) -> bool:
    """True for a timm DINOv3 file: keras_vit's metadata `position_embedding=rope`, or a
    `config.json` naming a `*dinov3*` architecture or `model_args.rope_type="dinov3"`."""
    if metadata.get(META + "position_embedding") == ROPE:
        return True
    args = timm_options.model_args(config)
    return "dinov3" in str(config.get("architecture") or "") or args.get("rope_type") == "dinov3"


def check_timm_eva(state: dict, path) -> None:
    """Refuses a timm EVA-style file (its LayerScale `gamma_1`, split `q_bias`, or no
    `pos_embed` beside a class token) that nothing names as DINOv3: its rotary embedding
    (EVA-02's "cat", RoPE-ViT's ...) is not DINOv3's.

    Raises:
        CheckpointError: naming the keys and what would make the file readable.
    """
    eva = "blocks.0.gamma_1" in state or "blocks.0.attn.q_bias" in state
    if eva or ("cls_token" in state and "pos_embed" not in state):
        raise CheckpointError(
            f"{path} looks like a timm EVA model (blocks.0.gamma_1 / attn.q_bias, or no "
            "pos_embed), but neither a config.json beside it (architecture '*dinov3*' or "
            "model_args.rope_type='dinov3') nor keras_vit metadata says it is DINOv3; "
            "keras_vit reads only DINOv3's rotary embedding. Save it with timm's "
            "save_for_hf (config.json) or add that config.json."
        )


def _check_timm_args(config: dict, state: dict, path) -> None:
    args = timm_options.model_args(config)
    for arg, value in TIMM_FIXED_ARGS.items():
        if arg not in args:
            continue
        given = args[arg]
        same = (not given) if value is None else given == value
        if not same:
            raise CheckpointError(
                f"{path}: model_args.{arg}={given!r}; keras_vit's DINOv3 has "
                f"{arg}={value if value is not None else False!r}."
            )
    if "fc_norm.weight" in state:
        raise CheckpointError(
            f"{path} is a timm DINOv3 with a final fc_norm ('fc_norm.weight'), which "
            "keras_vit's DINOv3 does not build."
        )
    for key in ("blocks.0.mlp.w12.weight", "blocks.0.mlp.w1.weight"):
        if key in state:
            raise CheckpointError(
                f"{path} has {key!r}: the original DINOv3 / EVA key names, not timm's "
                "(mlp.fc1_g / fc1_x / fc2, or a packed mlp.fc1). Load it in timm (its "
                "checkpoint_filter_fn renames them) and save the timm model."
            )
    said = args.get("swiglu_mlp")
    if said is not None and bool(said) != (_mlp_layout(state, path) != "mlp"):
        raise CheckpointError(
            f"{path}: model_args.swiglu_mlp={said!r} but blocks.0.mlp is "
            f"{'not ' if said else ''}a gated (SwiGLU) MLP."
        )


def _mlp_layout(state: dict, path) -> str:
    """ "swiglu" (timm's `SwiGLU`: `fc1_g`, `fc1_x`), "packed" (`GluMlp`: one `fc1` twice as
    wide as `fc2`'s input) or "mlp" (timm's `Mlp`), from block 0's keys and shapes.

    Raises:
        CheckpointError: an `fc1` neither as wide as `fc2`'s input nor twice as wide.
    """
    if "blocks.0.mlp.fc1_g.weight" in state:
        return "swiglu"
    fc1, fc2 = state.get("blocks.0.mlp.fc1.weight"), state.get("blocks.0.mlp.fc2.weight")
    if fc1 is None or fc2 is None or len(fc1.shape) != 2 or len(fc2.shape) != 2:
        return "mlp"
    if fc1.shape[0] == fc2.shape[1]:
        return "mlp"
    if fc1.shape[0] == 2 * fc2.shape[1]:
        return "packed"
    raise CheckpointError(
        f"{path}: blocks.0.mlp.fc1.weight {tuple(fc1.shape)} and fc2.weight "
        f"{tuple(fc2.shape)} form neither timm's Mlp nor its packed SwiGLU (fc1 twice as wide)."
    )


def _mlp_from_timm(get, timm: str, block: str, layout: str) -> dict:
    """Block `timm`'s MLP in release keys (`layout` from `_mlp_layout`)."""
    if layout == "mlp":
        return tl.norms_and_mlp_from_torch(get, timm, block, {}, DENSES)
    if layout == "swiglu":
        return tl.norms_and_mlp_from_torch(get, timm, block, {}, GATED_DENSES)
    # GluMlp(gate_last=False): silu(first half) * second half
    weight, bias = get(f"{timm}mlp.fc1.weight"), get(f"{timm}mlp.fc1.bias")
    width = weight.shape[0] // 2
    out = tl.norms_and_mlp_from_torch(get, timm, block, {}, {"mlp.fc2": "Dense_1"})
    for release, rows in ((GATE, slice(0, width)), ("Dense_0", slice(width, None))):
        out[f"{block}{tl.MLP}{release}/kernel"] = tl.linear_to_kernel(weight[rows])
        out[f"{block}{tl.MLP}{release}/bias"] = np.asarray(bias[rows])
    return out


def _qkv_bias_from_timm(state: dict, path) -> str:
    q, v = "blocks.0.attn.q_bias" in state, "blocks.0.attn.v_bias" in state
    if q != v:
        raise CheckpointError(f"{path}: blocks.0.attn has only one of q_bias and v_bias.")
    return "qv" if q else "none"


def timm_dinov3_to_release(state: dict, num_heads: int, path) -> dict:
    """A timm DINOv3 state dict in release keys (no position table).

    Raises:
        CheckpointError: a missing tensor, or tensors no release key covers (named).
    """
    used = set()

    def get(key):
        used.add(key)
        return tl.take(state, key, path)

    depth = tl.num_blocks(state, r"blocks\.(\d+)\.")
    hidden = int(get("patch_embed.proj.weight").shape[0])
    out = {
        "embedding/kernel": tl.conv_to_kernel(get("patch_embed.proj.weight")),
        "embedding/bias": get("patch_embed.proj.bias"),
        "cls": get("cls_token"),
        tl.ENCODER_NORM + "scale": get("norm.weight"),
        tl.ENCODER_NORM + "bias": get("norm.bias"),
    }
    if "reg_token" in state:
        out[names.REGISTERS] = get("reg_token")
    biased = _qkv_bias_from_timm(state, path) == "qv"
    layout = _mlp_layout(state, path)
    for i in range(depth):
        timm, block = f"blocks.{i}.", tl.BLOCK.format(i)
        out.update(tl.norms_and_mlp_from_torch(get, timm, block, NORMS, {}))
        out.update(_mlp_from_timm(get, timm, block, layout))
        qkv = get(f"{timm}attn.qkv.weight")
        for j, name in enumerate(QKV):
            rows = slice(j * hidden, (j + 1) * hidden)
            out[f"{block}{tl.ATTENTION}{name}/kernel"] = tl.head_kernel(qkv[rows], num_heads)
        if biased:
            for name, timm_bias in (("query", "q_bias"), ("value", "v_bias")):
                bias = get(f"{timm}attn.{timm_bias}")
                out[f"{block}{tl.ATTENTION}{name}/bias"] = tl.head_bias(bias, num_heads)
        out[f"{block}{tl.ATTENTION}out/kernel"] = tl.out_kernel(
            get(f"{timm}attn.proj.weight"), num_heads
        )
        out[f"{block}{tl.ATTENTION}out/bias"] = get(f"{timm}attn.proj.bias")
        for gamma, release in zip(("gamma_1", "gamma_2"), LAYER_SCALES, strict=True):
            if f"{timm}{gamma}" in state:
                out[f"{block}{release}/scale"] = get(f"{timm}{gamma}")
    if "head.weight" in state:
        out["head/kernel"] = tl.linear_to_kernel(get("head.weight"))
        out["head/bias"] = get("head.bias")
    left = sorted(set(state) - used)
    if left:
        raise CheckpointError(
            f"{path} has tensors that are not part of a timm DINOv3 ViT ({len(left)}): "
            f"{', '.join(left[:8])}{', ...' if len(left) > 8 else ''}"
        )
    return out


def _num_heads(metadata: dict, config: dict, hidden: int, num_heads, path) -> int:
    """Heads: the caller's, keras_vit's metadata, `model_args.num_heads`, the DINOv3 size of
    the width (`keras_vit.spec.configs.DINOV3_HEADS`: S 6, B 12, L 16, H+ 20, 7B 32), else
    64-wide heads."""
    if num_heads:
        return int(num_heads)
    if META + "num_heads" in metadata:
        return int(metadata[META + "num_heads"])
    args = timm_options.model_args(config)
    if "num_heads" in args:
        return int(args["num_heads"])
    if hidden in DINOV3_HEADS:
        return DINOV3_HEADS[hidden]
    if hidden % 64:
        raise CheckpointError(f"{path}: the number of heads (width {hidden}) is unknown.")
    return hidden // 64


def read_timm_dinov3(path, state, metadata, config, num_heads=None) -> CheckpointContents:
    """A timm DINOv3 file's contents (see the module docstring).

    Raises:
        CheckpointError: RoPE or MLP options keras_vit does not build, a `global_pool`
            other than "token" and "avg" (see `_pooling_of`), or tensors of another model.
    """
    _check_timm_args(config, state, path)
    pooling = _pooling_of(metadata, config, path)
    hidden = int(tl.take(state, "patch_embed.proj.weight", path).shape[0])
    heads = _num_heads(metadata, config, hidden, num_heads, path)
    preprocessing = metadata.get(META + "preprocessing")
    if preprocessing is None:
        pretrained = config.get("pretrained_cfg") or {}
        mean, std = pretrained.get("mean"), pretrained.get("std")
        preprocessing = "imagenet" if mean is None else tl.preprocessing_from_mean_std(mean, std)
    return CheckpointContents(
        path=os.fspath(path),
        format="timm",
        arrays=timm_dinov3_to_release(state, heads, path),
        num_heads=heads,
        gelu_approximate=metadata.get(META + "gelu_approximate", "false") == "true",
        layer_norm_epsilon=float(metadata.get(META + "layer_norm_epsilon", EPSILON)),
        preprocessing=preprocessing,
        image_size=timm_options.image_size_of(metadata, config),
        mlp_activation=_mlp_activation_of(metadata, state, path),
        position_embedding=ROPE,
        pooling=pooling,
    )


def _mlp_activation_of(metadata: dict, state: dict, path) -> str:
    """ "swiglu" for a gated MLP (timm's SiLU-gated `SwiGLU` / `GluMlp`), else keras_vit's
    metadata (default "gelu")."""
    if _mlp_layout(state, path) != "mlp":
        return SWIGLU
    return metadata.get(META + "mlp_activation", "gelu")


def _pooling_of(metadata: dict, config: dict, path):
    """keras_vit's pooling of timm's `global_pool` (None: the class token, "patch_gap": the
    mean of the patch tokens); a file that names none has timm's DINOv3 default, "avg".

    Raises:
        CheckpointError: another `global_pool`, named.
    """
    pool = timm_options.global_pool_of(metadata, config)
    if pool is None:
        logger.info(
            "%s names no global_pool: timm's DINOv3 default 'avg' (the mean of the patch "
            "tokens) is read.",
            path,
        )
        pool = "avg"
    if pool not in GLOBAL_POOLS:
        raise CheckpointError(
            f"{path}: global_pool={pool!r}; keras_vit reads a timm DINOv3 with 'token' (the "
            "class token) or 'avg' (timm's default: the mean of the patch tokens, class and "
            "storage tokens left out)."
        )
    return GLOBAL_POOLS[pool]


def release_to_timm_dinov3(arrays: dict) -> dict:
    """Release-layout arrays of a DINOv3 model -> timm's Eva state dict (a gated MLP as
    timm's `SwiGLU`: `mlp.fc1_g`, `mlp.fc1_x`, `mlp.fc2`).

    Raises:
        CheckpointError: a key bias (timm's DINOv3 has none, or a fixed zero one) that is
            not zero.
    """
    out = {
        "patch_embed.proj.weight": tl.kernel_to_conv(arrays["embedding/kernel"]),
        "patch_embed.proj.bias": arrays["embedding/bias"],
        "cls_token": arrays["cls"],
        "norm.weight": arrays[tl.ENCODER_NORM + "scale"],
        "norm.bias": arrays[tl.ENCODER_NORM + "bias"],
    }
    if names.REGISTERS in arrays:
        out["reg_token"] = arrays[names.REGISTERS]
    for i in range(tl.num_release_blocks(arrays)):
        timm, block = f"blocks.{i}.", tl.BLOCK.format(i)
        attention = block + tl.ATTENTION
        gated = f"{block}{tl.MLP}{GATE}/kernel" in arrays
        denses = GATED_DENSES if gated else DENSES
        out.update(tl.norms_and_mlp_to_torch(arrays, timm, block, NORMS, denses))
        out[f"{timm}attn.qkv.weight"] = np.concatenate(
            [tl.flat_head_linear(arrays[f"{attention}{n}/kernel"]) for n in QKV]
        )
        _check_zero_key_bias(arrays, attention)
        if f"{attention}query/bias" in arrays:
            out[f"{timm}attn.q_bias"] = arrays[f"{attention}query/bias"].reshape(-1)
            out[f"{timm}attn.v_bias"] = arrays[f"{attention}value/bias"].reshape(-1)
        out[f"{timm}attn.proj.weight"] = tl.flat_linear(arrays[attention + "out/kernel"])
        out[f"{timm}attn.proj.bias"] = arrays[attention + "out/bias"]
        for gamma, release in zip(("gamma_1", "gamma_2"), LAYER_SCALES, strict=True):
            if f"{block}{release}/scale" in arrays:
                out[f"{timm}{gamma}"] = np.asarray(arrays[f"{block}{release}/scale"])
    if "head/kernel" in arrays:
        out["head.weight"] = tl.kernel_to_linear(arrays["head/kernel"])
        out["head.bias"] = arrays["head/bias"]
    return out


def _check_zero_key_bias(arrays, attention) -> None:
    bias = arrays.get(f"{attention}key/bias")
    if bias is not None and np.any(np.asarray(bias) != 0):
        raise CheckpointError(
            "DINOv3's attention has no key bias (timm: a fixed zero buffer; HF: "
            "key_bias=False) and this model's is not zero. A key bias never changes the "
            "output; build the model with qkv_bias='qv' or write it as keras."
        )


def write_timm_dinov3(path, contents: CheckpointContents) -> dict:
    """Writes a RoPE model as timm's DINOv3 state dict with keras_vit's metadata (timm's
    `Eva` loads it strictly with `vit_*_patch16_dinov3` arguments, a gated MLP with
    `swiglu_mlp=True` and a `swiglu_align_to` as the H+ / 7B definitions; `global_pool` "avg"
    for a "patch_gap" model, else "token", recorded).

    Returns:
        `{timm key: shape}` of what was written.

    Raises:
        CheckpointError: see `check_dinov3_model` and `release_to_timm_dinov3`.
    """
    from keras_vit.checkpoints.base.safetensors_io import write_safetensors

    check_dinov3_model(contents, "timm's DINOv3 layout")
    state = release_to_timm_dinov3(contents.arrays)
    metadata = {
        "format": "pt",
        META + "num_heads": str(contents.num_heads),
        META + "gelu_approximate": "true" if contents.gelu_approximate else "false",
        META + "layer_norm_epsilon": repr(float(contents.layer_norm_epsilon)),
        META + "preprocessing": contents.preprocessing,
        META + "mlp_activation": contents.mlp_activation,
        META + "global_pool": "avg" if contents.pooling == PATCH_GAP else "token",
        META + "position_embedding": ROPE,
    }
    if contents.image_size is not None:
        metadata[META + "image_size"] = ",".join(str(int(s)) for s in contents.image_size)
    write_safetensors(path, state, metadata=metadata)
    return {key: tuple(value.shape) for key, value in state.items()}
