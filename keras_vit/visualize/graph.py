"""Finding the Transformer blocks of a keras_vit model, also when it sits inside other models.

A fine-tuned model is often `keras.Model(x, Dense(...)(vit(preprocess(x))))`: the ViT is one
layer of an outer functional (or Sequential) model, and its blocks live in the inner graph.
The helpers here walk down to the innermost model that holds the `TransformerBlock` layers
(the "encoder host") and build keras.Models that map the OUTER model's input to tensors of
the inner graph, by chaining the outer prefix (outer input -> the tensor fed to the inner
model) with the inner sub-graph. Nothing here changes the model's weights, layers or graph:
only new `keras.Model` views sharing the same layers are created.
"""

from __future__ import annotations

from dataclasses import dataclass

import keras

from keras_vit.layers import TransformerBlock


@dataclass(frozen=True)
class TokenGrid:
    """Where the tokens of a ViT or hybrid come from.

    Attributes:
        grid: `(grid_h, grid_w)` patch tokens in row-major order.
        patch_size: `(height, width)` in input pixels covered by one patch token (the patch
            size for a ViT; the ResNet stride times the patch for a hybrid).
        num_prefix_tokens: tokens before the patches: the class token (pooling="token"),
            DeiT's distillation token and the register tokens ([cls][dist][registers...]);
            0 for a plain "gap" model.
        class_token: whether token 0 is a class token (the token the maps are read from);
            None (default): when there is a prefix.
    """

    grid: tuple[int, int]
    patch_size: tuple[int, int]
    num_prefix_tokens: int
    class_token: bool | None = None

    @property
    def has_class_token(self) -> bool:
        """Token 0 is a class token (`class_token`, else any prefix)."""
        return self.num_prefix_tokens > 0 if self.class_token is None else self.class_token

    @property
    def num_tokens(self) -> int:
        """Sequence length T = num_prefix_tokens + grid_h * grid_w."""
        return self.num_prefix_tokens + self.grid[0] * self.grid[1]


@dataclass(frozen=True)
class EncoderPath:
    """The chain of models from the outer model down to the one holding the blocks.

    Attributes:
        models: `(outer, ..., host)`; `host` has the `TransformerBlock`s among its layers.
        blocks: the host's `TransformerBlock` layers in graph order.
    """

    models: tuple[keras.Model, ...]
    blocks: tuple[TransformerBlock, ...]

    @property
    def host(self) -> keras.Model:
        return self.models[-1]


def _inputs(model: keras.Model):
    """The model's input tensor, or the list of them for a multi-input model."""
    return model.inputs[0] if len(model.inputs) == 1 else model.inputs


def _sub_models(model: keras.Model) -> list[keras.Model]:
    return [layer for layer in model.layers if isinstance(layer, keras.Model)]


def find_encoder(model: keras.Model) -> EncoderPath:
    """Locates the `TransformerBlock`s of `model`, descending into nested models.

    Args:
        model: a keras_vit model (ViT or hybrid), or any functional / Sequential model that
            contains exactly one such model at some depth.

    Returns:
        An `EncoderPath`.

    Raises:
        ValueError: if `model` is not a `keras.Model`, holds no `TransformerBlock`, or holds
            several sub-models with blocks (ambiguous).
    """
    if not isinstance(model, keras.Model):
        raise ValueError(f"Expected a keras.Model. Received: model={model!r}")
    blocks = tuple(layer for layer in model.layers if isinstance(layer, TransformerBlock))
    if blocks:
        return EncoderPath((model,), blocks)
    found = []
    for sub in _sub_models(model):
        try:
            found.append(find_encoder(sub))
        except ValueError:
            continue
    if len(found) != 1:
        rule = "no TransformerBlock layers" if not found else "several sub-models with blocks"
        raise ValueError(
            f"Model {model.name!r} must contain exactly one ViT encoder (TransformerBlock "
            f"layers, directly or in one nested model); found {rule}."
        )
    inner = found[0]
    return EncoderPath((model, *inner.models), inner.blocks)


def _input_of_child(parent: keras.Model, child: keras.Model):
    """The tensors of `parent`'s graph that are fed into the nested model `child`."""
    for node in reversed(child._inbound_nodes):
        tensors = node.input_tensors
        tensors = tensors[0] if len(tensors) == 1 else tensors
        try:
            keras.Model(_inputs(parent), tensors)
        except ValueError:
            continue
        return tensors
    raise ValueError(
        f"Nested model {child.name!r} is not connected to the inputs of {parent.name!r}; "
        "call it on a tensor derived from the outer model's input."
    )


def sub_graph_model(path: EncoderPath, outputs, name: str | None = None) -> keras.Model:
    """A keras.Model from the outer model's input to `outputs`, tensors of the host's graph.

    For a host that is the model itself this is `keras.Model(host.inputs, outputs)`; for a
    nested host each outer level contributes a prefix model (its input -> the tensor given to
    the next level), and the prefixes are chained in front of the host sub-graph.

    Args:
        path: from `find_encoder`.
        outputs: a symbolic tensor, list or dict of tensors of the host's graph.
        name: name of the returned model (default "<outer name>_view").

    Returns:
        A `keras.Model` taking the outer model's inputs; it shares the original layers.
    """
    name = name or f"{path.models[0].name}_view"
    if len(path.models) == 1:
        return keras.Model(_inputs(path.host), outputs, name=name)
    host_view = keras.Model(_inputs(path.host), outputs, name=f"{path.host.name}_view")
    outer = path.models[0]
    inputs = [keras.Input(t.shape[1:], dtype=t.dtype, name=t.name) for t in outer.inputs]
    x = inputs if len(inputs) > 1 else inputs[0]
    x_host = x
    for parent, child in zip(path.models[:-1], path.models[1:], strict=True):
        fed = _input_of_child(parent, child)
        prefix = keras.Model(_inputs(parent), fed, name=f"{parent.name}_prefix")
        x_host = prefix(x_host)
    return keras.Model(x, host_view(x_host), name=name)


def token_grid(model: keras.Model) -> TokenGrid:
    """Reads the token grid of a keras_vit model (ViT or hybrid) from its layers.

    The grid is taken from the `PatchEmbed` layer of the encoder host (built for a fixed
    image size), the pixels per token from the host's input size divided by the grid, and the
    prefix from the presence of a `ClassToken` layer. Never guessed from the sequence length.

    Args:
        model: a keras_vit model, possibly nested inside other models.

    Returns:
        A `TokenGrid`.

    Raises:
        ValueError: if the model has no `PatchEmbed` layer with a known grid (e.g. an input of
            unknown height or width).
    """
    from keras_vit.checkpoints.base.architecture import Architecture

    host = find_encoder(model).host
    arch = Architecture.from_model(host)
    if arch.grid is None:
        raise ValueError(
            f"Cannot read the token grid of model {model.name!r}: it needs exactly one built "
            "PatchEmbed layer with a fixed image size. Found 1 PatchEmbed layers."
        )
    if arch.pixels_per_token is None:
        raise ValueError(
            f"Model {model.name!r} has an input of unknown size {host.inputs[0].shape}; "
            "build it for a fixed image size."
        )
    return TokenGrid(arch.grid, arch.pixels_per_token, arch.num_prefix_tokens, arch.has_class_token)
