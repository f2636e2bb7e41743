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
`preprocessor_config.json`, when present, the input mean/std.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile

from keras_vit.checkpoints import limits
from keras_vit.checkpoints import torch_layout as tl
from keras_vit.checkpoints.architecture import Architecture
from keras_vit.checkpoints.contents import CheckpointContents
from keras_vit.checkpoints.npz_io import CheckpointError
from keras_vit.checkpoints.safetensors_io import read_safetensors, write_safetensors

logger = logging.getLogger(__name__)

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
PREPROCESSOR = "preprocessor_config.json"
EXACT_GELU = ("gelu",)
TANH_GELU = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
LAYER = "encoder.layer.{}."
# HF sub-layer -> release sub-layer, for the plain (non-attention-projection) parameters.
NORMS = {"layernorm_before": "LayerNorm_0", "layernorm_after": "LayerNorm_2"}
DENSES = {"intermediate.dense": "Dense_0", "output.dense": "Dense_1"}
IGNORED = ("embeddings.mask_token",)


def _paths(path) -> tuple[str, str]:
    """(folder, weights file) for a folder or a `.safetensors` file inside one."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return path, os.path.join(path, WEIGHTS)
    return os.path.dirname(os.path.abspath(path)), path


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as stream:
            return json.load(stream)
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path} is not valid JSON ({error}).") from None


def _gelu_approximate(config, path) -> bool:
    act = config.get("hidden_act", "gelu")
    if act in EXACT_GELU:
        return False
    if act in TANH_GELU:
        return True
    raise CheckpointError(
        f"{path}: hidden_act={act!r} is not a GELU keras_vit has (exact 'gelu' or the tanh "
        f"forms {TANH_GELU})."
    )


def _image_size(config):
    size = config.get("image_size")
    if size is None:
        return None
    return tuple(size) if isinstance(size, (list, tuple)) else (int(size), int(size))


def hf_to_release(state: dict, config: dict, path="checkpoint") -> dict:
    """Converts a HF ViT state dict (with or without the `vit.` prefix) to release keys.

    Raises:
        CheckpointError: a missing tensor, or tensors no release key covers.
    """
    prefix = "vit." if any(k.startswith("vit.") for k in state) else ""
    heads = int(config["num_attention_heads"])
    used = set()

    def get(key):
        used.add(prefix + key)
        return tl.take(state, prefix + key, path)

    embed = "embeddings."
    out = {
        "embedding/kernel": tl.conv_to_kernel(get(embed + "patch_embeddings.projection.weight")),
        "embedding/bias": get(embed + "patch_embeddings.projection.bias"),
        "cls": get(embed + "cls_token"),
        tl.POSITION: get(embed + "position_embeddings"),
        tl.ENCODER_NORM + "scale": get("layernorm.weight"),
        tl.ENCODER_NORM + "bias": get("layernorm.bias"),
    }
    depth = tl.num_blocks(state, rf"{prefix}encoder\.layer\.(\d+)\.")
    for i in range(depth):
        hf, block = LAYER.format(i), tl.BLOCK.format(i)
        out.update(tl.norms_and_mlp_from_torch(get, hf, block, NORMS, DENSES))
        for name in ("query", "key", "value"):
            weight = get(f"{hf}attention.attention.{name}.weight")
            out[f"{block}{tl.ATTENTION}{name}/kernel"] = tl.head_kernel(weight, heads)
            bias_key = f"{prefix}{hf}attention.attention.{name}.bias"
            bias = get(bias_key[len(prefix) :]) if bias_key in state else weight[:, 0] * 0
            out[f"{block}{tl.ATTENTION}{name}/bias"] = tl.head_bias(bias, heads)
        out[f"{block}{tl.ATTENTION}out/kernel"] = tl.out_kernel(
            get(f"{hf}attention.output.dense.weight"), heads
        )
        out[f"{block}{tl.ATTENTION}out/bias"] = get(f"{hf}attention.output.dense.bias")
    if prefix + "pooler.dense.weight" in state:
        act = config.get("pooler_act", "tanh")
        if act != "tanh":
            raise CheckpointError(f"{path}: pooler_act={act!r}; the release's pre_logits is tanh.")
        out["pre_logits/kernel"] = tl.linear_to_kernel(get("pooler.dense.weight"))
        out["pre_logits/bias"] = get("pooler.dense.bias")
    if "classifier.weight" in state:
        used.update(("classifier.weight", "classifier.bias"))
        out["head/kernel"] = tl.linear_to_kernel(state["classifier.weight"])
        out["head/bias"] = tl.take(state, "classifier.bias", path)
    used.update(prefix + k for k in IGNORED)
    left = sorted(set(state) - used)
    if left:
        raise CheckpointError(
            f"{path} has tensors that are not part of a ViT ({len(left)}): "
            f"{', '.join(left[:8])}{', ...' if len(left) > 8 else ''}"
        )
    return out


def read_hf(path) -> CheckpointContents:
    """Reads a Hugging Face ViT folder (or its `model.safetensors`) into the release layout.

    Raises:
        FileNotFoundError: no weights file.
        CheckpointError: no `config.json`, a model type other than "vit", an unsupported
            activation, or tensors that do not form a ViT.
    """
    folder, weights = _paths(path)
    config = _read_json(os.path.join(folder, CONFIG))
    if config is None:
        raise CheckpointError(f"{folder} has no {CONFIG}; a Hugging Face ViT needs it.")
    limits.check_hf_config(os.path.join(folder, CONFIG), config)
    model_type = config.get("model_type", "vit")
    if model_type != "vit":
        raise CheckpointError(
            f"{folder}/{CONFIG} describes model_type={model_type!r}; only 'vit' "
            "(ViTModel / ViTForImageClassification) is read."
        )
    state, _ = read_safetensors(weights)
    limits.check_hf_config(os.path.join(folder, CONFIG), config, state)
    preprocessing = "[-1,1]"
    processor = _read_json(os.path.join(folder, PREPROCESSOR))
    if processor and processor.get("do_normalize") is not False and "image_mean" in processor:
        preprocessing = tl.preprocessing_from_mean_std(
            processor["image_mean"], processor.get("image_std"), config.get("num_channels", 3)
        )
    return CheckpointContents(
        path=os.fspath(path),
        format="hf",
        arrays=hf_to_release(state, config, weights),
        num_heads=int(config["num_attention_heads"]),
        gelu_approximate=_gelu_approximate(config, folder),
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-12)),
        preprocessing=preprocessing,
        image_size=_image_size(config),
    )


def release_to_hf(arrays: dict, num_heads: int) -> dict:
    """Release-layout arrays -> a HF ViT state dict.

    With a `head`, the keys of `ViTForImageClassification` (`vit.` prefix, `classifier`);
    without one, those of `ViTModel` (no prefix; `pre_logits` becomes `pooler.dense`).

    Raises:
        CheckpointError: a LayerNorm after pooling (`fc_norm`), no class token (HF ViT has
            no global-average-pooling model), or a
            `pre_logits` layer under a head (ViTForImageClassification has no pooler).
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
    prefix = "vit." if has_head else ""
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
        hf, block = LAYER.format(i), tl.BLOCK.format(i)
        out.update(tl.norms_and_mlp_to_torch(arrays, hf, block, NORMS, DENSES))
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
    if "pre_logits/kernel" in arrays:
        out["pooler.dense.weight"] = tl.kernel_to_linear(arrays["pre_logits/kernel"])
        out["pooler.dense.bias"] = arrays["pre_logits/bias"]
    out = {prefix + key: value for key, value in out.items()}
    if has_head:
        out["classifier.weight"] = tl.kernel_to_linear(arrays["head/kernel"])
        out["classifier.bias"] = arrays["head/bias"]
    return out


def hf_config(contents: CheckpointContents) -> dict:
    """The `config.json` of a HF ViT for `contents` (architecture from the array shapes)."""
    arrays = contents.arrays
    arch = Architecture.from_arrays(arrays)
    patch = arch.patch_size
    if patch[0] != patch[1]:
        raise CheckpointError(f"Hugging Face ViT needs square patches; this one is {patch}.")
    if contents.image_size is not None:
        image_size = contents.image_size
    elif arch.grid is not None:
        image_size = (arch.grid[0] * patch[0], arch.grid[1] * patch[1])
    else:
        raise CheckpointError(
            f"The position table's {arch.num_patch_tokens} grid rows are not a square grid; "
            "give the image size."
        )
    has_head = "head/kernel" in arrays
    config = {
        "architectures": ["ViTForImageClassification" if has_head else "ViTModel"],
        "model_type": "vit",
        "hidden_size": arch.hidden_dim,
        "num_hidden_layers": arch.num_layers,
        "num_attention_heads": int(contents.num_heads),
        "intermediate_size": arch.mlp_dim,
        "hidden_act": "gelu_pytorch_tanh" if contents.gelu_approximate else "gelu",
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
    if has_head:
        classes = int(arrays["head/bias"].shape[0])
        config["id2label"] = {str(i): f"LABEL_{i}" for i in range(classes)}
        config["label2id"] = {f"LABEL_{i}": i for i in range(classes)}
    return config


def _preprocessor_config(contents, image_size, channels) -> dict:
    mean, std = tl.mean_std(contents.preprocessing, channels)
    return {
        "image_processor_type": "ViTImageProcessor",
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
