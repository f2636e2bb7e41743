"""The table of checkpoint formats: one `CheckpointFormat` record per format.

Each record says how the format's content is recognised (by content, never by name), its
reader and writer, its default suffix and what it can express (`expresses`: the values of
each option in `OPTIONS` its files hold). Detection (`detect.py`), `read_checkpoint` /
`write_checkpoint` (`formats.py`), `from_checkpoint`, `load_weights` and `keras-vit
convert` read it; writers refuse, by the option's name, a model the format cannot express.
A new format is its own module (reader, writer) plus one row of `FORMAT_TABLE`.

Sources of what each format holds: the release's `vit_jax/checkpoint.py` and
`models_vit.py`; big_vision's `models/vit.py`; transformers' `modeling_vit.py` /
`configuration_vit.py`; timm's `vision_transformer.py` (and `_hub.py`'s `config.json`).
"""

from __future__ import annotations

from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.checkpoints.base.format_options import (
    ALL_QKV_BIASES,
    ANY,
    CLASS_HEAD_ONLY,
    DINOV3_PARTS,
    OPTIONS,
    PLAIN_FAMILY,
    RELEASE_GROUPS,
    CheckpointFormat,
    Probe,
    ReadOptions,
)
from keras_vit.checkpoints.hf import hf_files
from keras_vit.spec import layer_names as names

# The table imports no reader, writer or Keras at import time (each is imported on its
# first call), so `keras-vit convert --help` lists the formats without starting TensorFlow.


def _npy_members(probe: Probe) -> bool:
    return (
        probe.container == "zip"
        and bool(probe.names)
        and all(n.endswith(".npy") for n in probe.names)
    )


def _is_big_vision(probe: Probe) -> bool:
    return _npy_members(probe) and any(
        n.startswith("params/") or n == "pos_embedding.npy" or "/encoderblock/" in n
        for n in probe.names
    )


def _is_release_npz(probe: Probe) -> bool:
    return _npy_members(probe) and not _is_big_vision(probe)


def _is_keras(probe: Probe) -> bool:
    return (
        probe.container == "zip"
        and "config.json" in probe.names
        and any(n.endswith(".weights.h5") for n in probe.names)
    )


# The patch embeddings of the HF models other than ViTModel: SiglipVisionModel and
# Siglip2VisionModel, DINOv3ViTModel (a Conv2d without `projection`).
HF_OTHER_PATCHES = ("embeddings.patch_embedding.weight", "embeddings.patch_embeddings.weight")


def _is_hf(probe: Probe) -> bool:
    if probe.container == "folder":
        return {hf_files.CONFIG, hf_files.WEIGHTS} <= set(probe.names)
    return probe.container == "safetensors" and any(
        n.endswith(("embeddings.patch_embeddings.projection.weight", *HF_OTHER_PATCHES))
        for n in probe.names
    )


def _is_timm(probe: Probe) -> bool:
    return probe.container == "safetensors" and (
        "patch_embed.proj.weight" in probe.names
        or any(n.startswith("patch_embed.backbone.") for n in probe.names)
    )


def _read_release(path, options: ReadOptions):
    from keras_vit.checkpoints.release.release_io import read_release_npz

    return read_release_npz(path)


def _write_release(path, contents) -> None:
    from keras_vit.checkpoints.release.release_io import write_release_npz

    write_release_npz(path, contents)


def _read_hf(path, options: ReadOptions):
    from keras_vit.checkpoints.hf import hf_siglip
    from keras_vit.checkpoints.hf.hf_io import read_hf

    if hf_siglip.is_siglip_folder(path):
        return hf_siglip.read_siglip_folder(path)
    return read_hf(path)


def _write_hf(path, contents):
    from keras_vit.checkpoints.hf import hf_siglip
    from keras_vit.checkpoints.hf.hf_io import write_hf

    if hf_siglip.is_tower(contents.arrays):  # no class token, MAP pooling: SiglipVisionModel
        return hf_siglip.write_siglip(path, contents)
    return write_hf(path, contents)


def _read_timm(path, options: ReadOptions):
    from keras_vit.checkpoints.timm.timm_io import read_timm

    return read_timm(
        path,
        num_heads=options.num_heads,
        no_embed_class=options.no_embed_class,
        image_size=options.image_size,
    )


def _write_timm(path, contents):
    from keras_vit.checkpoints.timm.timm_io import write_timm

    return write_timm(path, contents)


def _read_keras(path, options: ReadOptions):
    from keras_vit.checkpoints.keras_files.model_io import read_keras

    return read_keras(path)


_EVERY_POOLING = ("token", "gap", "map")
_EVERY_NORM = ("tokens", "pooled")
_EVERY_PRE_LOGITS = ("none", "feature", "under_head")

FORMAT_TABLE: dict[str, CheckpointFormat] = {
    row.name: row
    for row in (
        CheckpointFormat(
            name="npz",
            title="the release's .npz",
            recognised_by="a zip of .npy members with the release's flat keys "
            "(`embedding/kernel`, `Transformer/encoderblock_0/...`; `opt/target/` prefix too)",
            recognise=_is_release_npz,
            reader=_read_release,
            writer=_write_release,
            suffix=".npz",
            expresses={
                "pooling": (*_EVERY_POOLING, "patch_gap"),
                "final_norm": _EVERY_NORM,
                "pre_logits": _EVERY_PRE_LOGITS,
                **RELEASE_GROUPS,
            },
            reads={
                "class token": "the `cls` key",
                "family": "the release-style keys of LayerScale, registers, the distillation "
                "token, `norm_pre` and the q/k/v biases present",
                "keras_vit/metadata": "a uint8 member keras_vit writes where the model differs "
                "from the release: UTF-8 JSON of position_embedding (rope), pooling "
                "(patch_gap), gelu_approximate, layer_norm_epsilon, mlp_activation, "
                "preprocessing, no_embed_class, and image_size without a position table "
                "(`release/release_io.py`); unknown fields or values refused by name",
                "no_embed_class": "keras_vit/metadata (the release's table has the class row)",
                "fc_norm": "keras_vit's `fc_norm/scale` key (no release file has it)",
                "grid / image size": "the square grid of the table, else "
                "`image_size=` (a non-square table is an error naming it)",
                "numerics": "keras_vit/metadata, else the release's tanh GELU, eps 1e-6",
                "input scaling": "keras_vit/metadata, else [-1, 1]",
                "arrays": "float32, float16, bfloat16 (as raw 2-byte void); written float32",
            },
        ),
        CheckpointFormat(
            name="big_vision",
            title="big_vision's .npz",
            recognised_by="a zip of .npy members under `params/` (or a top-level "
            "`pos_embedding`, or scanned `Transformer/encoderblock/` arrays)",
            recognise=_is_big_vision,
            reader=_read_release,
            writer=None,
            suffix=".npz",
            expresses={
                "pooling": _EVERY_POOLING,
                "final_norm": ("tokens",),
                "pre_logits": _EVERY_PRE_LOGITS,
                "hybrid": (False,),
                "preprocessing": ("[-1,1]",),
                **PLAIN_FAMILY,
                **RELEASE_GROUPS,
            },
            reads={
                "class token": "the `cls` key",
                "position table": "a top-level `pos_embedding` (added before the class "
                "token) is moved to the release's key",
                "grid / image size": "not recorded: as the release's .npz",
                "arrays": "bfloat16 (big_vision's default), float32; read only",
            },
        ),
        CheckpointFormat(
            name="hf",
            title="a Hugging Face ViT / DeiT / DINOv2 / DINOv3 / SigLIP folder",
            recognised_by="a folder with `config.json` + `model.safetensors` (or that file) "
            "whose keys include `embeddings.patch_embeddings.projection.weight` (SigLIP: "
            "`embeddings.patch_embedding.weight`; DINOv3: `embeddings.patch_embeddings.weight`)",
            recognise=_is_hf,
            reader=_read_hf,
            writer=_write_hf,
            suffix="",
            expresses={
                "pooling": ("token", "map"),
                "final_norm": ("tokens",),
                "pre_logits": ("none", "feature"),
                "patch": ("square",),
                "hybrid": (False,),
                "no_embed_class": (False,),
                "norm_pre": (False,),
                **RELEASE_GROUPS,
            },
            excludes=(
                *ALL_QKV_BIASES,
                ({"rope": True, "pre_logits": "feature"}, DINOV3_PARTS[0][1]),
                ({"rope": True, "distillation": True}, DINOV3_PARTS[0][1]),
                ({"rope": True, "head": True}, "DINOv3ViTModel has no classification head"),
                ({"rope": True, "layer_scale": False}, "DINOv3ViTModel always has LayerScale"),
                ({"rope": True, "pooling": "map"}, DINOV3_PARTS[0][1]),
                (
                    {"rope": False, "mlp_activation": "swiglu"},
                    "only its DINOv3ViTModel layout has a gated MLP (use_gated_mlp)",
                ),
                *(
                    ({"pooling": "map", option: value}, f"a SigLIP tower has no {what}")
                    for option, value, what in (
                        ("head", True, "classifier (SiglipVisionModel): build include_top=False"),
                        ("pre_logits", "feature", "pre_logits"),
                        ("grid", "non-square", "non-square grid"),
                        ("layer_scale", True, "LayerScale"),
                        ("mlp_activation", "quick_gelu", "QuickGELU"),
                    )
                ),
            ),
            reads={
                "class token": "always (ViTModel has one), except SigLIP towers",
                "SigLIP": "`model_type` siglip_vision_model / siglip2_vision_model (or a "
                "whole siglip / siglip2 model's `vision_config`, `vision_model.` keys): no "
                "class token, MAP pooling (`head.*`), `hidden_act` gelu_pytorch_tanh or gelu; "
                "SigLIP 2 (NaFlex) at any image size, its table resized as transformers does "
                "(below); a MAP model without a head "
                "is written as a SiglipVisionModel (`hf_siglip.write_siglip`: Siglip2VisionModel)",
                "model type": "config.json `model_type`: vit, deit (distillation token; "
                "`cls_classifier` + `distillation_classifier`, or one `classifier`: "
                "DeiTForImageClassification, `distillation_head=False`; DeiTModel's "
                "`pooler.dense` as pre_logits), dinov2 (LayerScale "
                "`layer_scale1/2.lambda1`), dinov2_with_registers (`register_tokens`); "
                "`use_swiglu_ffn` and Dinov2ForImageClassification refused by name; "
                "dinov3_vit (DINOv3ViTModel: RoPE, `register_tokens`, `layer_scale1/2`, "
                "`query_bias` / `key_bias` / `value_bias`; `use_gated_mlp` with `hidden_act` "
                "silu: the gated MLP `gate_proj`, mlp_activation='swiglu', H+/16 and 7B/16)",
                "writes": "the model type of the switches: deit with a distillation token "
                "(DeiTForImageClassificationWithTeacher, DeiTForImageClassification without "
                "head_dist, or DeiTModel, its pooler from pre_logits), "
                "dinov2_with_registers with registers, dinov2 with LayerScale (no head), "
                "dinov3_vit with RoPE (no head; `use_gated_mlp` with a gated MLP), else vit",
                "no_embed_class": "never",
                "grid / image size": "config.json `image_size` (int or [h, w])",
                "channels": "config.json `num_channels`; preprocessor mean/std per channel",
                "numerics": "config.json `hidden_act` (gelu, tanh forms, quick_gelu), "
                "`layer_norm_eps` (default: the model type's config class)",
                "arrays": "float32, float16, bfloat16 safetensors",
            },
        ),
        CheckpointFormat(
            name="timm",
            title="a timm .safetensors state dict",
            recognised_by="a safetensors file with `patch_embed.proj.weight` (or a hybrid's "
            "`patch_embed.backbone.`) keys",
            recognise=_is_timm,
            reader=_read_timm,
            writer=_write_timm,
            suffix=".safetensors",
            expresses={
                "pooling": (*_EVERY_POOLING, "patch_gap"),
                "final_norm": _EVERY_NORM,
                "pre_logits": _EVERY_PRE_LOGITS,
                "distillation": (False, True),
                **RELEASE_GROUPS,
            },
            excludes=(
                (
                    {"rope": False, "pooling": "patch_gap"},
                    "only its DINOv3 layout records global_pool='avg' beside a class token",
                ),
                (
                    {"distillation": True, "pre_logits": "feature"},
                    "deit.py's VisionTransformerDistilled has no pre_logits (HF DeiTModel's "
                    "pooler); write it as hf or keras",
                ),
                *ALL_QKV_BIASES,
                *DINOV3_PARTS,
                (
                    {"rope": True, "qkv_bias": "qkv"},
                    "timm's DINOv3 has no key bias (a zero buffer)",
                ),
                (
                    {"rope": False, "mlp_activation": "swiglu"},
                    "only its DINOv3 (Eva) layout is written with a gated MLP (swiglu_mlp)",
                ),
            ),
            reads={
                "class token": "the `cls_token` key",
                "family": "`dist_token` + `head_dist` (deit.py), `reg_token` (only with "
                "no_embed_class=True), `blocks.i.ls1/ls2.gamma`, `norm_pre`; q/k norm, "
                "SwiGLU outside DINOv3 refused by name",
                "attention pooling": "`attn_pool.*` (global_pool='map', SigLIP towers, "
                "one latent, no class token) as the MAP head",
                "DINOv3": "eva.py's DINOv3 layout (no `pos_embed`, `reg_token`, "
                "`gamma_1/2`, `attn.q_bias/v_bias` or none) when config.json names a "
                "`*dinov3*` architecture or `rope_type='dinov3'` (or keras_vit metadata); "
                "the gated MLP of H+/16 and 7B/16 (`swiglu_mlp`: `mlp.fc1_g` / `fc1_x`, or "
                "packed `mlp.fc1`; written as `fc1_g` / `fc1_x`) as mlp_activation='swiglu'; "
                "another EVA file and other RoPE options refused by name",
                "no_embed_class": "keras_vit metadata, config.json `model_args` or its "
                "image size (True with `reg_token`); else an error naming "
                "`no_embed_class=` when both fit",
                "global_pool": "config.json / metadata: 'token' with a class token, 'avg' "
                "or 'map' (with `attn_pool.*`) without; others refused by name",
                "fc_norm": "the `fc_norm.*` keys",
                "grid / image size": "keras_vit metadata, config.json `pretrained_cfg."
                "input_size`; else the table's square grid",
                "numerics": "keras_vit metadata; else config.json `model_args.act_layer` "
                "(gelu, gelu_tanh, quick_gelu) / `architecture` (`*quickgelu*`: quick_gelu; "
                "SigLIP 2 towers: gelu_tanh; `*_clip_*`: eps 1e-5); else exact GELU, eps "
                "1e-6 (timm's)",
                "arrays": "float32, float16, bfloat16 safetensors",
            },
        ),
        CheckpointFormat(
            name="keras",
            title="a .keras model file",
            recognised_by="a zip with `config.json` and a `.weights.h5` member",
            recognise=_is_keras,
            reader=_read_keras,
            writer=None,
            suffix=".keras",
            expresses={},
            reads={"everything": "the model's own config (written by `model.save`)"},
            from_model=True,
        ),
    )
}


def write_formats() -> tuple:
    """The formats `keras-vit convert` writes, in table order: the writable rows ("keras"
    through a model's `save`)."""
    return tuple(row.name for row in FORMAT_TABLE.values() if row.writable)


FORMATS = tuple(FORMAT_TABLE)
WRITE_FORMATS = write_formats()


def format_of(name: str) -> CheckpointFormat:
    """The table's row `name`.

    Raises:
        ValueError: an unknown name.
    """
    if name not in FORMAT_TABLE:
        raise ValueError(f"format must be one of {FORMATS}. Received: {name!r}")
    return FORMAT_TABLE[name]


def recognise(probe: Probe) -> str | None:
    """The first format whose `recognise` accepts `probe`, or None."""
    return next((row.name for row in FORMAT_TABLE.values() if row.recognise(probe)), None)


def options_of(contents) -> dict:
    """`{option: value}` of the model `contents` holds (see `OPTIONS`).

    The grid is "non-square" when `contents.image_size` or the table says so; a table
    whose count is no square grid and no image size counts as "non-square".
    """
    from keras_vit.checkpoints.base.architecture import Architecture

    arrays = contents.arrays
    arch = Architecture.from_contents(contents)
    if f"{names.MAP_HEAD}/probe" in arrays:
        pooling = "map"
    else:
        pooling = arch.pooling
    if arch.representation_size is None:
        pre_logits = "none"
    else:
        pre_logits = "under_head" if arch.num_classes is not None else "feature"
    grid = arch.grid
    if (
        contents.image_size is not None
        and arch.patch_size is not None
        and arch.resnet_stages is None
    ):
        size, patch = contents.image_size, arch.patch_size
        grid = (int(size[0]) // patch[0], int(size[1]) // patch[1])
    patch = arch.patch_size or (1, 1)
    return {
        "pooling": pooling,
        "final_norm": arch.final_norm,
        "pre_logits": pre_logits,
        "head": arch.num_classes is not None,
        "grid": "square" if grid is not None and grid[0] == grid[1] else "non-square",
        "patch": "square" if patch[0] == patch[1] else "non-square",
        "channels": arch.channels,
        "hybrid": arch.resnet_stages is not None,
        "preprocessing": contents.preprocessing,
        "layer_scale": arch.layer_scale,
        "registers": arch.num_register_tokens,
        "distillation": _distillation(arch),
        "no_embed_class": arch.no_embed_class,
        "norm_pre": arch.norm_pre,
        "mlp_activation": arch.mlp_activation,
        "resnet_groups": _resnet_groups(contents, arch),
        "rope": getattr(contents, "position_embedding", None) == "rope",
        "qkv_bias": arch.qkv_bias,
    }


def _resnet_groups(contents, arch) -> int | None:
    """A hybrid's GroupNorm groups: the model's (`model_contents`), else the release's 32
    that every reader builds; None for a ViT."""
    if arch.resnet_stages is None:
        return None
    return getattr(contents, "resnet_groups", None) or 32


def _distillation(arch) -> bool | str:
    if arch.distilled and not arch.distillation_head:
        return CLASS_HEAD_ONLY
    return arch.distilled


def refusal(name: str, contents) -> str | None:
    """Why format `name` cannot hold `contents` (every option it cannot express, each named
    with the formats that can), or None when it can."""
    row = format_of(name)
    reasons = []
    options = options_of(contents)
    for option, value in options.items():
        if not row.can_express(option, value):
            able = [
                other.name
                for other in FORMAT_TABLE.values()
                if other.writer is not None and other.can_express(option, value)
            ]
            reasons.append(
                f"{option}={value!r} ({OPTIONS[option][0]}; it holds {row.expresses[option]}; "
                f"write it as {' or '.join([*able, 'keras'])})"
            )
    for combination, why in row.excludes:
        if all(options[option] == value for option, value in combination.items()):
            reasons.append(f"{_held(combination)} together ({why})")
    if not reasons:
        return None
    return f"{row.title} cannot express " + "; nor ".join(reasons) + "."


def check_expressible(name: str, contents) -> None:
    """Raises `CheckpointError` with `refusal(name, contents)` when there is one."""
    reason = refusal(name, contents)
    if reason:
        raise CheckpointError(reason)


def _held(combination: dict) -> str:
    return ", ".join(f"{option}={value!r}" for option, value in combination.items())


def _expressed(row: CheckpointFormat) -> str:
    shown = []
    for option in OPTIONS:
        allowed = row.expresses.get(option, ANY)
        shown.append(f"{option}: {'any' if allowed == ANY else '/'.join(map(str, allowed))}")
    return "; ".join(shown)


def format_table_markdown() -> str:
    """The table as Markdown (docs/checkpoints.md holds this text; a test compares): one
    row per format, then what each reads, per format."""
    lines = [
        "| format | recognised by (content) | read | written | can express (else the "
        "writer refuses, naming the option) | suffix |",
        "|---|---|---|---|---|---|",
    ]
    for row in FORMAT_TABLE.values():
        writer = "yes" if row.writer is not None else "no"
        if row.name == "keras":
            writer = "`model.save`"
        lines.append(
            f"| `{row.name}`: {row.title} | {row.recognised_by} | yes | {writer} | "
            f"{_expressed(row)} | `{row.suffix or '(folder)'}` |"
        )
    for row in FORMAT_TABLE.values():
        lines.append("")
        lines.append(f"`{row.name}` reads:")
        lines.extend(f"- {what}: {how}" for what, how in row.reads.items())
        lines.extend(f"- refuses together: {_held(c)} ({why})" for c, why in row.excludes)
    return "\n".join(lines) + "\n"
