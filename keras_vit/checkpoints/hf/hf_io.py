"""Hugging Face `transformers` ViT checkpoints: a folder with `config.json` + `model.safetensors`.

Layout of `ViTModel` / `ViTForImageClassification` (transformers' `modeling_vit.py`): keys
`embeddings.cls_token` (1, 1, D), `embeddings.position_embeddings` (1, 1 + N, D),
`embeddings.patch_embeddings.projection.{weight,bias}` (D, C, P, P),
`encoder.layer.{i}.layernorm_before`, `.attention.attention.{query,key,value}`,
`.attention.output.dense`, `.layernorm_after`, `.intermediate.dense`, `.output.dense`,
`layernorm`, optionally `pooler.dense` (dense + tanh on the class token: the release's
`pre_logits`), all under `vit.` in `ViTForImageClassification`, whose `classifier` is the
head on the class token. `config.json` gives the architecture, `layer_norm_eps` and
`hidden_act` ("gelu" is the exact erf GELU; "gelu_new" / "gelu_pytorch_tanh" the tanh one);
`preprocessor_config.json`, when present, the input mean/std. DeiT, DINOv2 and DINOv2 with
registers (`model_type` "deit", "dinov2", "dinov2_with_registers") differ in a few keys,
described by `hf_family.LAYOUTS`; the writer picks the model type from the model's switches.
SigLIP and SigLIP 2 image towers (`SiglipVisionModel`, `Siglip2VisionModel`: no class token,
attention pooling) are read and written by `keras_vit.checkpoints.hf.hf_siglip`, which shares
this module's folder helpers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile

from keras_vit.checkpoints.base import limits
from keras_vit.checkpoints.base import torch_layout as tl
from keras_vit.checkpoints.base.architecture import Architecture
from keras_vit.checkpoints.base.contents import CheckpointContents
from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.checkpoints.base.safetensors_io import read_safetensors, write_safetensors
from keras_vit.checkpoints.hf import hf_dinov3, hf_family
from keras_vit.checkpoints.hf.hf_files import CONFIG, PREPROCESSOR, WEIGHTS

logger = logging.getLogger(__name__)

EXACT_GELU = ("gelu",)
TANH_GELU = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
QUICK_GELU = "quick_gelu"  # x * sigmoid(1.702 x), transformers' ACT2FN["quick_gelu"]
# LayerNorm eps of each model type's config class when config.json does not say.
DEFAULT_EPS = {"vit": 1e-12, "deit": 1e-12, "dinov2": 1e-6, "dinov2_with_registers": 1e-6}
LAYER = "encoder.layer.{}."


def _paths(path) -> tuple[str, str]:
    """(folder, weights file) for a folder or a `.safetensors` file inside one."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return path, os.path.join(path, WEIGHTS)
    return os.path.dirname(os.path.abspath(path)), path


def _read_json(path):
    """The JSON object in `path`, or None when there is no such file.

    Raises:
        CheckpointError: a folder or unreadable file under the name, invalid JSON, or JSON
            that is not an object (each one line naming the file).
    """
    if os.path.isdir(path):
        raise CheckpointError(f"{path} is a folder; a Hugging Face folder needs a JSON file here.")
    try:
        with open(path, encoding="utf-8") as stream:
            data = json.load(stream)
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON ({error}).") from None
    except OSError as error:
        raise CheckpointError(f"{path} cannot be read ({type(error).__name__}).") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} holds a JSON {type(data).__name__}, not an object.")
    return data


def _preprocessing(folder, config) -> str:
    """The input scaling `preprocessor_config.json` names ("[-1,1]" without one).

    Raises:
        CheckpointError: an `image_mean` / `image_std` that is no number or list of numbers,
            or one keras_vit does not apply, naming the file and the field.
    """
    path = os.path.join(folder, PREPROCESSOR)
    processor = _read_json(path)
    if not processor or processor.get("do_normalize") is False or "image_mean" not in processor:
        return "[-1,1]"
    try:
        return tl.preprocessing_from_mean_std(
            processor["image_mean"],
            processor.get("image_std"),
            config.get("num_channels", 3),
            names=("image_mean", "image_std"),
        )
    except CheckpointError as error:
        raise CheckpointError(f"{path}: {error}") from None


def _gelu_approximate(config, path) -> bool:
    act = config.get("hidden_act", "gelu")
    if act in EXACT_GELU or act == QUICK_GELU:
        return False
    if act in TANH_GELU:
        return True
    raise CheckpointError(
        f"{path}: hidden_act={act!r} is not an activation keras_vit has (exact 'gelu', the "
        f"tanh forms {TANH_GELU}, or {QUICK_GELU!r})."
    )


def _hidden_act(contents) -> str:
    if contents.mlp_activation == QUICK_GELU:
        return QUICK_GELU
    return "gelu_pytorch_tanh" if contents.gelu_approximate else "gelu"


def _image_size(config):
    size = config.get("image_size")
    if size is None:
        return None
    return tuple(size) if isinstance(size, (list, tuple)) else (int(size), int(size))


def _prefix(state: dict, layout) -> str:
    """The classification models' base prefix ("vit.", "deit.", ...) when the keys have it."""
    return layout.prefix if any(k.startswith(layout.prefix) for k in state) else ""


def _block_from_hf(get, state, layout, i, heads) -> dict:
    """Block `i` of a HF state dict in release keys (`get` takes keys without the prefix)."""
    hf, block = LAYER.format(i), tl.BLOCK.format(i)
    out = tl.norms_and_mlp_from_torch(get, hf, block, layout.norms, layout.denses)
    for name in ("query", "key", "value"):
        weight = get(f"{hf}attention.attention.{name}.weight")
        out[f"{block}{tl.ATTENTION}{name}/kernel"] = tl.head_kernel(weight, heads)
        bias_key = f"{hf}attention.attention.{name}.bias"
        bias = get(bias_key) if get.has(bias_key) else weight[:, 0] * 0
        out[f"{block}{tl.ATTENTION}{name}/bias"] = tl.head_bias(bias, heads)
    out[f"{block}{tl.ATTENTION}out/kernel"] = tl.out_kernel(
        get(f"{hf}attention.output.dense.weight"), heads
    )
    out[f"{block}{tl.ATTENTION}out/bias"] = get(f"{hf}attention.output.dense.bias")
    for name, release in layout.scales.items():
        out[block + release] = get(hf + name)
    return out


class _Getter:
    """`get(key)`: the tensor of `prefix + key`, recorded as used; `has(key)`: present."""

    def __init__(self, state, prefix, path):
        self.state, self.prefix, self.path, self.used = state, prefix, path, set()

    def __call__(self, key):
        self.used.add(self.prefix + key)
        return tl.take(self.state, self.prefix + key, self.path)

    def has(self, key) -> bool:
        return self.prefix + key in self.state


def _heads_from_hf(state, layout, config, get, path) -> dict:
    out = {}
    if get.has("pooler.dense.weight"):
        act = config.get("pooler_act", "tanh")
        if act != "tanh":
            raise CheckpointError(f"{path}: pooler_act={act!r}; the release's pre_logits is tanh.")
        out["pre_logits/kernel"] = tl.linear_to_kernel(get("pooler.dense.weight"))
        out["pre_logits/bias"] = get("pooler.dense.bias")
    heads = dict(hf_family.HEADS[layout.model_type], classifier="head")
    for name, release in heads.items():
        if name + ".weight" in state:
            get.used.update((name + ".weight", name + ".bias"))
            out[release + "/kernel"] = tl.linear_to_kernel(state[name + ".weight"])
            out[release + "/bias"] = tl.take(state, name + ".bias", path)
    return out


def hf_to_release(state: dict, config: dict, path="checkpoint") -> dict:
    """Converts a HF ViT / DeiT / DINOv2 state dict (with or without the classification
    models' prefix) to release keys; the layout comes from `config["model_type"]`
    (`hf_family.LAYOUTS`).

    Raises:
        CheckpointError: a model type or variant keras_vit lacks (named), a missing tensor,
            or tensors no release key covers.
    """
    layout = hf_family.layout_of(config, path)
    hf_family.check_classifier(state, layout, path)
    prefix = _prefix(state, layout)
    heads = int(config["num_attention_heads"])
    get = _Getter(state, prefix, path)
    embed = "embeddings."
    out = {
        "embedding/kernel": tl.conv_to_kernel(get(embed + "patch_embeddings.projection.weight")),
        "embedding/bias": get(embed + "patch_embeddings.projection.bias"),
        tl.POSITION: get(embed + "position_embeddings"),
        tl.ENCODER_NORM + "scale": get("layernorm.weight"),
        tl.ENCODER_NORM + "bias": get("layernorm.bias"),
    }
    out.update({release: get(key) for key, release in layout.tokens.items()})
    depth = tl.num_blocks(state, rf"{prefix}encoder\.layer\.(\d+)\.")
    for i in range(depth):
        out.update(_block_from_hf(get, state, layout, i, heads))
    out.update(_heads_from_hf(state, layout, config, get, path))
    get.used.update(prefix + k for k in layout.ignored)
    left = sorted(set(state) - get.used)
    if left:
        raise CheckpointError(
            f"{path} has tensors that are not part of a {layout.model_type} model "
            f"({len(left)}): {', '.join(left[:8])}{', ...' if len(left) > 8 else ''}"
        )
    return out


def read_hf(path) -> CheckpointContents:
    """Reads a Hugging Face ViT folder (or its `model.safetensors`) into the release layout.

    Raises:
        FileNotFoundError: no weights file.
        CheckpointError: no `config.json`, a model type keras_vit does not read, an
            unsupported activation, or tensors that do not form a ViT (SigLIP towers are
            read by `keras_vit.checkpoints.hf.hf_siglip`).
    """
    folder, weights = _paths(path)
    config = _read_json(os.path.join(folder, CONFIG))
    if config is None:
        raise CheckpointError(f"{folder} has no {CONFIG}; a Hugging Face ViT needs it.")
    limits.check_hf_config(os.path.join(folder, CONFIG), config)
    if config.get("model_type") == hf_dinov3.HF_MODEL_TYPE:
        state, _ = read_safetensors(weights)
        preprocessing = _preprocessing(folder, config)
        numerics = hf_dinov3.gated_numerics(config, folder) or dict(
            gelu_approximate=_gelu_approximate(config, folder),
            mlp_activation=QUICK_GELU if config.get("hidden_act") == QUICK_GELU else "gelu",
        )
        return hf_dinov3.read_hf_dinov3(state, config, path, preprocessing, numerics)
    hf_family.layout_of(config, os.path.join(folder, CONFIG))
    state, _ = read_safetensors(weights)
    limits.check_hf_config(os.path.join(folder, CONFIG), config, state)
    preprocessing = _preprocessing(folder, config)
    arrays = hf_to_release(state, config, weights)
    _check_registers(arrays, config, folder)
    model_type = config.get("model_type", "vit")
    return CheckpointContents(
        path=os.fspath(path),
        format="hf",
        arrays=arrays,
        num_heads=int(config["num_attention_heads"]),
        gelu_approximate=_gelu_approximate(config, folder),
        layer_norm_epsilon=float(config.get("layer_norm_eps", DEFAULT_EPS[model_type])),
        preprocessing=preprocessing,
        image_size=_image_size(config),
        mlp_activation=QUICK_GELU if config.get("hidden_act") == QUICK_GELU else "gelu",
    )


def _check_registers(arrays, config, folder) -> None:
    """config.json's `num_register_tokens` must match `embeddings.register_tokens`."""
    count = config.get("num_register_tokens")
    have = arrays[tl.REG].shape[1] if tl.REG in arrays else 0
    if count is not None and int(count) != have:
        raise CheckpointError(
            f"{folder}/{CONFIG}: num_register_tokens={count} but the weights have {have}."
        )


def release_to_hf(arrays: dict, num_heads: int) -> dict:
    """Release-layout arrays -> a HF state dict of the model type `hf_family.writing_layout`
    picks: ViT, DeiT (distillation token), DINOv2 (LayerScale), DINOv2 with registers.

    With a head, the classification model's keys (`vit.` / `deit.` prefix, `classifier` /
    `cls_classifier` + `distillation_classifier`, or a DeiT's `classifier` alone without
    `head_dist`: `hf_family.heads_of`); without one, the base model's (no prefix;
    `pre_logits` becomes `pooler.dense`, ViTModel's / DeiTModel's pooler).

    Raises:
        CheckpointError: a LayerNorm after pooling (`fc_norm`), no class token (HF ViT has
            no global-average-pooling model), a `pre_logits` layer under a head (the
            classification models have no pooler), or what `writing_layout` refuses.
    """
    if tl.POOLED_NORM + "scale" in arrays:
        raise CheckpointError(
            "Hugging Face ViT has no LayerNorm after pooling (fc_norm, final_norm='pooled'); "
            "write this model as timm or .npz instead."
        )
    if "cls" not in arrays:  # also MAP-head models, which pool without a class token
        raise CheckpointError(
            "Hugging Face ViT always has a class token; a global-average-pooling (gap) model "
            "cannot be written in its layout. Write it as timm or .npz instead."
        )
    has_head = "head/kernel" in arrays
    if has_head and "pre_logits/kernel" in arrays:
        raise CheckpointError(
            "ViTForImageClassification has no pre_logits (pooler) before its classifier; a "
            "model with both cannot be written in the Hugging Face layout. Write it as timm "
            "or .npz, or drop the head (include_top=False) to write a ViTModel with pooler."
        )
    layout = hf_family.writing_layout(arrays)
    out = {
        "embeddings.cls_token": arrays["cls"],
        "embeddings.position_embeddings": arrays[tl.POSITION],
        "embeddings.patch_embeddings.projection.weight": tl.kernel_to_conv(
            arrays["embedding/kernel"]
        ),
        "embeddings.patch_embeddings.projection.bias": arrays["embedding/bias"],
        "layernorm.weight": arrays[tl.ENCODER_NORM + "scale"],
        "layernorm.bias": arrays[tl.ENCODER_NORM + "bias"],
    }
    depth = tl.num_release_blocks(arrays)
    for i in range(depth):
        out.update(_block_to_hf(arrays, layout, i))
    hidden = int(arrays["embedding/bias"].shape[0])
    out.update(hf_family.extras_to_hf(layout, arrays, depth, hidden))
    if "pre_logits/kernel" in arrays:
        out["pooler.dense.weight"] = tl.kernel_to_linear(arrays["pre_logits/kernel"])
        out["pooler.dense.bias"] = arrays["pre_logits/bias"]
    if not has_head:
        return out
    out = {layout.prefix + key: value for key, value in out.items()}
    for name, release in hf_family.heads_of(layout, arrays).items():
        out[name + ".weight"] = tl.kernel_to_linear(arrays[release + "/kernel"])
        out[name + ".bias"] = arrays[release + "/bias"]
    return out


def _block_to_hf(arrays, layout, i) -> dict:
    hf, block = LAYER.format(i), tl.BLOCK.format(i)
    out = tl.norms_and_mlp_to_torch(arrays, hf, block, layout.norms, layout.denses)
    for name in ("query", "key", "value"):
        attention = f"{block}{tl.ATTENTION}{name}/"
        out[f"{hf}attention.attention.{name}.weight"] = tl.flat_head_linear(
            arrays[attention + "kernel"]
        )
        out[f"{hf}attention.attention.{name}.bias"] = arrays[attention + "bias"].reshape(-1)
    out[f"{hf}attention.output.dense.weight"] = tl.flat_linear(
        arrays[f"{block}{tl.ATTENTION}out/kernel"]
    )
    out[f"{hf}attention.output.dense.bias"] = arrays[f"{block}{tl.ATTENTION}out/bias"]
    return out


def hf_config(contents: CheckpointContents) -> dict:
    """The `config.json` of the HF model for `contents` (architecture from the array shapes,
    model type from `hf_family.writing_layout`)."""
    arrays = contents.arrays
    arch = Architecture.from_arrays(arrays)
    patch = arch.patch_size
    if patch[0] != patch[1]:
        raise CheckpointError(f"Hugging Face ViT needs square patches; this one is {patch}.")
    if contents.no_embed_class:
        raise CheckpointError(
            "Hugging Face ViT/DeiT/DINOv2 give the class token a position row; a model "
            "without one (no_embed_class=True, e.g. DeiT III, timm's DINOv2 '-reg') cannot "
            "be written in their layout. Write it as timm or .keras."
        )
    if contents.image_size is not None:
        image_size = contents.image_size
    elif arch.grid is not None:
        image_size = (arch.grid[0] * patch[0], arch.grid[1] * patch[1])
    else:
        raise CheckpointError(
            f"The position table's {arch.num_patch_tokens} grid rows are not a square grid; "
            "give the image size."
        )
    layout = hf_family.writing_layout(arrays)
    has_head = "head/kernel" in arrays
    config = {
        "architectures": ["ViTForImageClassification" if has_head else "ViTModel"],
        "model_type": layout.model_type,
        "hidden_size": arch.hidden_dim,
        "num_hidden_layers": arch.num_layers,
        "num_attention_heads": int(contents.num_heads),
        "intermediate_size": arch.mlp_dim,
        "hidden_act": _hidden_act(contents),
        "layer_norm_eps": float(contents.layer_norm_epsilon),
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "initializer_range": 0.02,
        "image_size": int(image_size[0]) if image_size[0] == image_size[1] else list(image_size),
        "patch_size": int(patch[0]),
        "num_channels": arch.channels,
        "qkv_bias": True,
        "encoder_stride": int(patch[0]),
    }
    config.update(hf_family.family_config(layout, arch, contents))
    if has_head:
        classes = int(arrays["head/bias"].shape[0])
        config["id2label"] = {str(i): f"LABEL_{i}" for i in range(classes)}
        config["label2id"] = {f"LABEL_{i}": i for i in range(classes)}
    return config


def _preprocessor_config(contents, image_size, channels, kind="ViTImageProcessor") -> dict:
    mean, std = tl.mean_std(contents.preprocessing, channels)
    return {
        "image_processor_type": kind,
        "do_resize": True,
        "size": {"height": int(image_size[0]), "width": int(image_size[1])},
        "resample": 2,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": list(mean),
        "image_std": list(std),
    }


@contextlib.contextmanager
def _atomic_folder(folder):
    """Yields a temporary sibling folder that replaces `folder` when the body succeeds."""
    folder = os.path.abspath(os.fspath(folder))
    parent = os.path.dirname(folder)
    os.makedirs(parent, exist_ok=True)
    temporary = tempfile.mkdtemp(prefix=f".{os.path.basename(folder)}.", dir=parent)
    try:
        yield temporary
        if os.path.isdir(folder):
            old = temporary + ".old"
            os.replace(folder, old)
            os.replace(temporary, folder)
            shutil.rmtree(old)
        else:
            os.replace(temporary, folder)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def write_hf(folder, contents: CheckpointContents) -> dict:
    """Writes `contents` as a Hugging Face ViT folder (config.json, model.safetensors,
    preprocessor_config.json), atomically (a temporary folder renamed into place).

    Returns:
        The `config.json` written.

    Raises:
        CheckpointError: a model the HF layout cannot hold (see `release_to_hf`).
    """
    if contents.num_heads is None:
        raise CheckpointError("The number of heads is unknown; it is needed for config.json.")
    if contents.position_embedding == hf_dinov3.ROPE:  # DINOv3ViTModel
        arch = Architecture.from_contents(contents)
        config = hf_dinov3.hf_dinov3_config(contents, arch, _hidden_act(contents))
        state = hf_dinov3.release_to_hf_dinov3(contents.arrays, arch.hidden_dim)
    else:
        config = hf_config(contents)
        state = release_to_hf(contents.arrays, contents.num_heads)
    size = config["image_size"]
    image_size = (size, size) if isinstance(size, int) else size
    with _atomic_folder(folder) as temporary:
        write_safetensors(os.path.join(temporary, WEIGHTS), state, metadata={"format": "pt"})
        for name, data in (
            (CONFIG, config),
            (PREPROCESSOR, _preprocessor_config(contents, image_size, config["num_channels"])),
        ):
            with open(os.path.join(temporary, name), "w", encoding="utf-8") as stream:
                json.dump(data, stream, indent=2)
    logger.info("Wrote a Hugging Face %s to %s", config["architectures"][0], folder)
    return config
