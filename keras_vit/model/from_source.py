"""The model anything describes: a named model, a run directory, a `.keras` file, a
checkpoint file or folder, or a published checkpoint name -> `(builder, keyword arguments)`.

`describe(source)` is the one function that turns a source into a `ModelSource` (the builder,
its keyword arguments and the file the weights are in); `load(source)` gives the model with
its weights. `keras-vit convert`, the run plans (`keras-vit finetune --weights`, the transfer
suite) and `keras_vit.from_checkpoint` (in `keras_vit.model.from_kwargs`) go through here. It
sits above the builders (`keras_vit.model.vit`, `keras_vit.model.hybrid`) and the checkpoint
readers (`keras_vit.checkpoints`), which never import it.

Sources, tried in this order:

- an existing path: a run directory (its best.keras), a `.keras` file (loaded with
  `safe_mode=True`; arguments read from its layers), a `.npz` inside a run directory
  (arguments from the run's config.json), or any checkpoint `keras_vit.from_checkpoint`
  reads (release/big_vision `.npz`, Hugging Face folder, timm `.safetensors`; arguments from
  the file);
- a published checkpoint name ("imagenet21k/ViT-B_32", "augreg/ViT-S_16-224", ...),
  downloaded into the Keras cache;
- a model name in any spelling `keras_vit.spec.configs.resolve_model` takes ("B/16", "ti16",
  "R50_B16"): its named builder, no weights. A release file name that is also a published
  name ("ViT-B_16", "R50+ViT-B_16") is the published checkpoint here; `named` reads it as
  the architecture.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from keras_vit.model import from_kwargs
from keras_vit.model.from_kwargs import builder_of
from keras_vit.spec import configs, run_files
from keras_vit.spec.run_config_file import kwargs_from_run_config

RUN_MODEL_FILE = run_files.BEST_MODEL


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """What a source describes.

    Attributes:
        builder: `keras_vit.ViT`, `keras_vit.HybridViT` or a named shortcut (`ViT_B16`).
        kwargs: its keyword arguments (for a named shortcut only the image size its name
            gives, "B/16-384"; the table has the other sizes).
        path: the file the weights are in; None for a model name.
        kind: "name", "run" (a `.npz` of a run: config.json's arguments), "keras" (a `.keras`
            file: the architecture read from its layers) or "checkpoint" (read from the file).
    """

    builder: Callable
    kwargs: dict
    path: str | None = None
    kind: str = "name"

    def build(self, **overrides):
        """`builder(**kwargs, **overrides)`: the model, without the file's weights."""
        kwargs = {**self.kwargs, **overrides}
        return self.builder(**kwargs) if self.kind == "name" else from_kwargs.build(kwargs)


def named(name: str) -> ModelSource:
    """The named shortcut of a model name (`ViT_B16` for "B/16", "b16", "ViT-B_16"...).

    Raises:
        ValueError: an unknown name; the message lists the valid ones.
    """
    from keras_vit.model import hybrid, vit  # the modules that define the shortcuts

    resolved = configs.resolve_model(name)
    size = {"image_size": resolved.image_size} if resolved.image_size else {}  # "B/16-384"
    module = hybrid if resolved.is_hybrid else vit
    return ModelSource(getattr(module, resolved.builder_name), size)


def locate(source) -> str:
    """The file or folder a path or published name stands for (a run directory gives its
    best.keras; a published name is downloaded, once, into the Keras cache).

    Raises:
        FileNotFoundError: neither an existing path nor a published checkpoint name.
        OSError, ValueError: a failed download (the message gives the URL and cache path).
    """
    from keras_vit.checkpoints.published import registry

    path = os.fspath(source)
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, RUN_MODEL_FILE)):
        return os.path.join(path, RUN_MODEL_FILE)
    if os.path.exists(path):
        return path
    entry = registry.lookup(path)
    if entry is None:
        raise FileNotFoundError(registry.not_found_message(path))
    return registry.resolve_checkpoint(entry)


def _is_model_name(source) -> bool:
    if not isinstance(source, str) or os.path.exists(source):
        return False
    from keras_vit.checkpoints.published import registry

    if registry.lookup(source) is not None:
        return False
    try:
        configs.resolve_model(source)
    except ValueError:
        return False
    return True


def describe(source, *, num_heads=None) -> ModelSource:
    """The `ModelSource` of any source (see the module docstring for the order).

    Args:
        source: a path (str or os.PathLike), a published checkpoint name or a model name.
        num_heads: heads of a timm file, which does not record them.

    Raises:
        FileNotFoundError: an unknown name that is no path either.
        ValueError, OSError: a file that cannot be read (`keras_vit.checkpoints`'
            CheckpointError is a ValueError) or a failed download.
    """
    if _is_model_name(source):
        return named(source)
    path = locate(source)
    if path.endswith(".keras"):
        kwargs = kwargs_of_model(load_keras(path, compile=False))
        return ModelSource(builder_of(kwargs), kwargs, path, "keras")
    run_kwargs = kwargs_from_run_config(path) if path.endswith(".npz") else None
    if run_kwargs is not None:
        return ModelSource(builder_of(run_kwargs), run_kwargs, path, "run")
    from keras_vit.checkpoints.formats import read_checkpoint
    from keras_vit.checkpoints.from_checkpoint import architecture_kwargs

    kwargs = architecture_kwargs(read_checkpoint(path, num_heads=num_heads))
    return ModelSource(builder_of(kwargs), kwargs, path, "checkpoint")


def load(source):
    """The model `source` describes, with its weights (a `.keras` file as saved; a run's
    `.npz` built from the run's config.json; another checkpoint by
    `keras_vit.from_checkpoint`).

    Raises:
        FileNotFoundError, ValueError, OSError: as `describe`; a model name has no weights
            (ValueError).
    """
    if _is_model_name(source):
        raise ValueError(f"{source!r} names an architecture, not weights.")
    path = locate(source)
    if path.endswith(".keras"):
        return load_keras(path, compile=False)
    run_kwargs = kwargs_from_run_config(path) if path.endswith(".npz") else None
    if run_kwargs is not None:
        from keras_vit import checkpoints

        model = from_kwargs.build(run_kwargs)
        checkpoints.load_weights(model, path)
        return model
    return from_kwargs.from_checkpoint(path)


def load_keras(path, *, compile: bool = True):
    """Loads a `.keras` file with `safe_mode=True` (keras_vit's layers are registered).

    Raises:
        FileNotFoundError: no file at `path`.
        CheckpointError (a ValueError): not a whole `.keras` zip archive (truncated or another
            format, which Keras itself reports as "File not found";
            `keras_vit.checkpoints.base.limits.check_keras_archive`).
    """
    import keras

    from keras_vit import layers, visualize  # noqa: F401  (registers the custom layers)
    from keras_vit.checkpoints.base.limits import check_keras_archive

    if not os.path.isfile(path):
        raise FileNotFoundError(f"No .keras file at {path!r}.")
    check_keras_archive(path)
    return keras.saving.load_model(path, compile=compile, safe_mode=True)


def vit_kwargs_from_npz(arrays: dict) -> dict:
    """`keras_vit.ViT` arguments read from an official checkpoint's array shapes.

    Read by `keras_vit.checkpoints.base.architecture.Architecture.from_arrays`: patch size and
    channels from `embedding/kernel`, heads, MLP width and depth from the blocks, the pooling
    from `cls`, the image size from the (square) position table, classes from `head/kernel`,
    `representation_size` from `pre_logits/kernel`.

    Raises:
        ValueError: the arrays are not an official ViT checkpoint.
    """
    from keras_vit.checkpoints.base.architecture import Architecture
    from keras_vit.checkpoints.release.layouts import normalise_layout

    arrays, _ = normalise_layout(arrays)
    arch = Architecture.from_arrays(arrays)
    missing = arch.missing_key(
        "patch_size", "num_heads", "mlp_dim", "num_patch_tokens", "num_classes"
    )
    if missing:
        raise ValueError(f"Not an official ViT checkpoint: missing key {missing!r}.")
    side = int(round(arch.num_patch_tokens**0.5))
    return {
        "patch_size": arch.patch_size[0],
        **arch.transformer_kwargs(),
        **arch.pooling_kwargs(),
        **arch.family_kwargs(),
        "image_size": side * arch.patch_size[0],
        "num_classes": arch.num_classes,
        "representation_size": arch.representation_size,
    }


def kwargs_of_model(model) -> dict:
    """`keras_vit.ViT` arguments of a built keras_vit model, read from its layers; for a
    hybrid with the built-in ResNet, `keras_vit.HybridViT` arguments (with `resnet_stages`).

    Raises:
        ValueError: the model is no keras_vit ViT.
    """
    from keras_vit.checkpoints.base.architecture import Architecture
    from keras_vit.model.vit import image_shape_of

    try:
        arch = Architecture.from_model(model)
    except ValueError:
        arch = None
    if arch is None or not arch.num_layers:
        raise ValueError(f"The weights are not a keras_vit ViT model ({model.name!r}).")
    resnet = {}
    if arch.resnet_stages is not None and "conv_root" in {layer.name for layer in model.layers}:
        resnet = {
            "resnet_stages": list(arch.resnet_stages),
            "resnet_width": int(model.get_layer("conv_root").filters),
            "resnet_groups": int(model.get_layer("gn_root").groups),
        }
    return {
        **resnet,
        "patch_size": list(arch.patch_size),
        **arch.transformer_kwargs(),
        **arch.pooling_kwargs(),
        **arch.family_kwargs(),
        "image_size": list(image_shape_of(model)[:2]),
        "position_embedding": arch.position_embedding,
    }
