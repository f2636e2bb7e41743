"""Mapping between keras_vit variables and the official checkpoint keys (vit_jax/checkpoint.py).

Official keys are derived by rules from the layer names (which mirror the release) and the
variable path inside each layer, so no per-variant table is needed:

- `embedding` (PatchEmbed): `conv/kernel`, `conv/bias` -> `embedding/kernel`, `embedding/bias`
- `cls`: `cls` -> `cls`; `dist` (DeiT's distillation token): `dist` -> `dist`; `reg` (register
  tokens, `(1, R, D)`): `reg` -> `reg` (keras_vit's keys; no release file has them)
- `posembed_input`: `pos_embedding` -> `Transformer/posembed_input/pos_embedding`
- `encoderblock_{i}`: `LayerNorm_0/gamma` ... -> `Transformer/encoderblock_{i}/LayerNorm_0/scale`;
  LayerScale: `LayerScale_1/scale` (attention branch), `LayerScale_3/scale` (MLP branch)
- `norm_pre` (timm's LayerNorm before the blocks): -> `Transformer/norm_pre/scale`, `.../bias`
- `encoder_norm`: `gamma`, `beta` -> `Transformer/encoder_norm/scale`, `.../bias`
- `fc_norm` (final_norm="pooled", timm's; no release key): -> `fc_norm/scale`, `fc_norm/bias`
- `pre_logits`, `head`, `head_dist` (DeiT's distillation head): `kernel`, `bias` -> unchanged
- hybrids: `conv_root/kernel`, `gn_root/gamma` -> `conv_root/kernel`, `gn_root/scale`;
  `block{s}_unit{u}` with `conv1/kernel`, `gn1/gamma` ... -> `block{s}/unit{u}/conv1/kernel` ...

Everywhere, a final `gamma` becomes `scale` and `beta` becomes `bias` (Flax's names). To
support a new layer, add one `NamingRule` to `NAMING_RULES`.

Layers are found by walking the model, not by parsing full variable paths, so prefixes that
Keras may add (an enclosing model or layer) do not matter, and a ViT nested inside another
`keras.Model` is found.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import keras

from keras_vit.checkpoints.base import limits, quantized
from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.spec import layer_names as names

LEAF_RENAMES = {"gamma": "scale", "beta": "bias"}


@dataclasses.dataclass(frozen=True)
class NamingRule:
    """How the variables of layers whose name fully matches `pattern` are named officially.

    Attributes:
        pattern: regular expression matched against the whole layer name.
        prefix: function of the match giving the official key prefix ("" for none).
        drop_segments: path segments inside the layer that the official key omits (the
            PatchEmbed's inner `conv`).
    """

    pattern: str
    prefix: Callable[[re.Match], str]
    drop_segments: tuple[str, ...] = ()

    def match(self, layer_name: str):
        return re.fullmatch(self.pattern, layer_name)


def _same(match: re.Match) -> str:
    return match[0]


def _in_transformer(match: re.Match) -> str:
    return f"{names.TRANSFORMER}/{match[0]}"


NAMING_RULES: tuple[NamingRule, ...] = (
    NamingRule(names.EMBEDDING, _same, drop_segments=("conv",)),
    NamingRule(f"{names.CLASS_TOKEN}|{names.DIST_TOKEN}|{names.REGISTERS}", lambda m: ""),
    NamingRule(names.POSITION_EMBEDDING, _in_transformer),
    NamingRule(names.BLOCK_PATTERN, _in_transformer),
    NamingRule(f"{names.ENCODER_NORM}|{names.NORM_PRE}", _in_transformer),
    NamingRule(
        f"{names.PRE_LOGITS}|{names.HEAD}|{names.HEAD_DIST}|{names.MAP_HEAD}|{names.POOLED_NORM}",
        _same,
    ),
    NamingRule(f"{names.ROOT_CONV}|{names.ROOT_NORM}", _same),
    NamingRule(names.UNIT_PATTERN, lambda m: f"block{m[1]}/unit{m[2]}"),
)


def _rule_for(layer_name: str):
    for rule in NAMING_RULES:
        match = rule.match(layer_name)
        if match:
            return rule, match
    return None, None


def _path_inside(layer, variable) -> list[str]:
    """Segments of `variable.path` after the layer's own name (prefix-independent)."""
    layer_path = getattr(layer, "path", None)
    if layer_path and variable.path.startswith(layer_path + "/"):
        return variable.path[len(layer_path) + 1 :].split("/")
    segments = variable.path.split("/")
    if layer.name in segments:
        return segments[segments.index(layer.name) + 1 :]
    return [variable.name]


def official_key(layer_name: str, inner_segments: list[str]) -> str | None:
    """The official key of a variable, or None when no rule covers the layer.

    Args:
        layer_name: name of the layer directly inside the ViT model (e.g. "encoderblock_3").
        inner_segments: the variable's path inside that layer (e.g. ["LayerNorm_0", "gamma"]).
    """
    rule, match = _rule_for(layer_name)
    if rule is None:
        return None
    segments = [s for s in inner_segments if s not in rule.drop_segments]
    if segments:
        segments[-1] = LEAF_RENAMES.get(segments[-1], segments[-1])
    prefix = rule.prefix(match)
    return "/".join(([prefix] if prefix else []) + segments)


def _is_vit_root(model) -> bool:
    return any(layer.name == names.EMBEDDING for layer in getattr(model, "layers", ()))


def find_vit_model(model):
    """The (possibly nested) keras.Model that directly holds the ViT layers (`embedding`).

    Raises:
        CheckpointError: if there is none, or more than one.
    """
    if _is_vit_root(model):
        return model
    found = []
    stack = list(getattr(model, "layers", ()))
    while stack:
        layer = stack.pop(0)
        if isinstance(layer, keras.Model):
            if _is_vit_root(layer):
                found.append(layer)
            else:
                stack.extend(layer.layers)
    if len(found) != 1:
        what = "no" if not found else f"{len(found)} ({[m.name for m in found]})"
        raise CheckpointError(
            f"Model {model.name!r} contains {what} keras_vit ViT models (a model with a layer "
            "named 'embedding'); pass the ViT model itself."
        )
    return found[0]


def _named_layers(model):
    """Layers of the ViT model, descending into nested models that no rule covers."""
    for layer in model.layers:
        rule, _ = _rule_for(layer.name)
        if rule is None and isinstance(layer, keras.Model):
            yield from _named_layers(layer)
        else:
            yield layer


def official_variables(model) -> tuple[dict, list[str]]:
    """Maps official keys to the model's variables.

    Args:
        model: a keras_vit model (ViT or hybrid), or a keras.Model containing exactly one.

    Returns:
        `(variables, unnamed)`: `{official_key: keras.Variable}` in the model's weight order,
        and the paths of weights that no rule covers (e.g. layers a user added).

    Raises:
        CheckpointError: if two variables map to the same key.
    """
    vit = find_vit_model(model)
    variables, unnamed = {}, []
    for layer in _named_layers(vit):
        for variable in layer.weights:
            key = official_key(layer.name, _path_inside(layer, variable))
            if key is None:
                unnamed.append(variable.path)
            elif key in variables:
                raise CheckpointError(
                    f"Two variables map to the official key {key!r}: "
                    f"{variables[key].path} and {variable.path}."
                )
            else:
                variables[key] = variable
    return variables, unnamed


def official_arrays(model) -> dict:
    """`{official_key: float32 array}` of every weight of a keras_vit model, in weight order.

    A model quantized with `model.quantize("int8")` gives its kernels dequantized to float32
    (`kernel / kernel_scale`, `keras_vit.checkpoints.base.quantized`), without the scales, so
    every writer writes the float layout it reads back.

    Raises:
        CheckpointError: weights that no rule covers (e.g. layers a user added), a layer
            quantized in another mode than int8, or a NaN or infinity in a weight (named).
    """
    vit = find_vit_model(model)
    variables, unnamed = official_variables(model)
    if unnamed:
        raise CheckpointError(
            f"Cannot write {model.name!r} in the release's checkpoint layout: these weights "
            f"have no official key: {unnamed}."
        )
    arrays = {key: keras.ops.convert_to_numpy(variable) for key, variable in variables.items()}
    paths = {key: variable.path for key, variable in variables.items()}
    arrays = quantized.float_arrays(model.name, arrays, paths, quantized.quantization_modes(vit))
    limits.check_finite(f"model {model.name!r}", arrays, what="weight")
    return arrays
