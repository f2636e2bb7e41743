"""The checkpoint contents of a built keras_vit model (`model_contents`), so a model and a
file convert the same way, and the `.keras` format's reader."""

from __future__ import annotations

import keras

from keras_vit.checkpoints.base import limits
from keras_vit.checkpoints.base.architecture import Architecture
from keras_vit.checkpoints.base.contents import CheckpointContents
from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.checkpoints.base.naming import find_vit_model, official_arrays
from keras_vit.layers import TransformerBlock
from keras_vit.layers.position_embedding import recorded_resize_method
from keras_vit.spec import layer_names as names


def model_numerics(model) -> dict:
    """`{"gelu_approximate", "layer_norm_epsilon"}` of a keras_vit model's blocks, with
    `"mlp_activation"` when it is not "gelu" (as `CheckpointContents.numerics`).

    Raises:
        CheckpointError: a model without Transformer blocks.
    """
    vit = find_vit_model(model)
    for layer in vit.layers:
        if isinstance(layer, TransformerBlock):
            numerics = {
                "gelu_approximate": layer.gelu_approximate,
                "layer_norm_epsilon": layer.layer_norm_epsilon,
            }
            if layer.mlp_activation != "gelu":
                numerics["mlp_activation"] = layer.mlp_activation
            return numerics
    raise CheckpointError(f"Model {model.name!r} has no Transformer blocks.")


def model_input_preprocessing(model) -> str:
    """The input scaling a keras_vit model records: "[-1,1]" (default), "imagenet" or "clip"
    (`keras_vit.spec.input_scaling`).

    Read from the model's `embedding` layer (`PatchEmbed.input_preprocessing`), which
    `keras_vit.from_checkpoint` sets from the checkpoint (timm in1k models: ImageNet
    mean/std). A model without that layer gets "[-1,1]".
    """
    try:
        embed = find_vit_model(model).get_layer(names.EMBEDDING)
    except ValueError:
        return "[-1,1]"
    return getattr(embed, "input_preprocessing", "[-1,1]")


def model_contents(model) -> CheckpointContents:
    """The weights of a built keras_vit model in the release layout, with its numerics and
    image size (a ViT's grid x patch; None for a hybrid, whose stride the file does not say).

    Raises:
        CheckpointError: weights that no release key covers (layers added to the model).
    """
    arrays = official_arrays(model)
    arch = Architecture.from_checkpoint_model(model)
    grid, patch = arch.grid, arch.patch_size
    image_size = None if grid is None else (grid[0] * patch[0], grid[1] * patch[1])
    return CheckpointContents(
        path=model.name,
        format="model",
        arrays=arrays,
        num_heads=arch.num_heads,
        image_size=image_size if arch.resnet_stages is None else None,
        preprocessing=model_input_preprocessing(model),
        no_embed_class=arch.no_embed_class,
        resnet_groups=_resnet_groups(model) if arch.resnet_stages is not None else None,
        position_embedding="rope" if arch.position_embedding == "rope" else None,
        pooling=arch.pooling if arch.pooling == "patch_gap" else None,
        resize_method=_own_resize_method(model),
        **model_numerics(model),
    )


def _own_resize_method(model) -> str | None:
    """The position-table resize the model records when it is not the default "bilinear"
    (`keras_vit.from_checkpoint` sets it from the file: a SigLIP 2 NaFlex tower's
    "bilinear_antialias"), else None."""
    method = recorded_resize_method(find_vit_model(model))
    return None if method == "bilinear" else method


def _resnet_groups(model) -> int:
    """The GroupNorm groups of a hybrid's ResNet (its root norm's; the builder gives every
    GroupNorm of the ResNet the same count)."""
    return int(model.get_layer(names.ROOT_NORM).groups)


def read_keras(path, options=None) -> CheckpointContents:
    """A `.keras` file's contents (loaded with `safe_mode=True`); `options` are not needed."""
    limits.check_keras_archive(path)
    model = keras.saving.load_model(path, safe_mode=True, compile=False)
    contents = model_contents(model)
    contents.path, contents.format = path, "keras"
    return contents
