"""Sharded large models on JAX: keras_vit's `keras.distribution.LayoutMap` and a
`keras.distribution.ModelParallel` over a `batch` x `model` device mesh.

Every Transformer kernel is split over the `model` axis along its heads or MLP units (the
Megatron split: q/k/v and the MLP's first dense by output, the attention output and the MLP's
second dense by input), and along the token width `hidden_dim` over the `batch` axis, so that
with both axes each device holds `1 / (batch x model)` of those kernels (FSDP-style; XLA
gathers a kernel's `batch` shards for the step that uses it). The patch embedding is split by
its output width over `model`, and so is each convolution kernel of a hybrid's ResNet stem
whose output channels the `model` axis divides (`stem_kernels`; given the architecture, as
`vit_model_parallel` gives it); the stem's other kernels are replicated. Everything else
(LayerNorms, GroupNorms, class token, position table, the head, a stem given as `backbone`) is
replicated. Optimizer slots take their variable's layout
(Keras' `add_variable_from_reference`). The sharding changes where numbers live, never what
a step computes: GSPMD inserts the collectives.

Variable paths (`variable.path`, the release's layer names, `keras_vit.spec.layer_names`) and
their layouts, `LAYOUT_RULES`:

    embedding/conv/kernel (P, P, C, D)                          (-, -, -, model)
    embedding/conv/bias (D,)                                    (model,)
    .../MultiHeadDotProductAttention_i/{query,key,value}/kernel (D, H, D/H)   (batch, model, -)
    .../MultiHeadDotProductAttention_i/{query,key,value}/bias (H, D/H)        (model, -)
    .../MultiHeadDotProductAttention_i/out/kernel (H, D/H, D)   (model, -, batch)
    .../MlpBlock_i/{Dense_0,Dense_gate}/kernel (D, M)           (batch, model)
    .../MlpBlock_i/{Dense_0,Dense_gate}/bias (M,)               (model,)
    .../MlpBlock_i/Dense_1/kernel (M, D)                        (model, batch)

(`...` matches the blocks `encoderblock_i` and a MAP head `MAPHead_0`; `Dense_gate` is the
gated MLP's gate, `mlp_activation="swiglu"`, split as `Dense_0`.) So the `model` axis
must divide `num_heads`, `hidden_dim` and `mlp_dim`, and the `batch` axis `hidden_dim`; every
named size and hybrid of `keras_vit.spec.configs` shards on 1, 2 and 4 devices.

A hybrid's ResNet stem (`keras_vit.model.hybrid.resnet_features`, width W = `resnet_width`,
64 in the release; StdConv2D kernels (kh, kw, in, out), no bias), where `model` divides `out`:

    conv_root/kernel (7, 7, C, W)                               (-, -, -, model)
    block{s}_unit{u}/conv1/kernel, conv2/kernel (., ., ., W * 2**(s-1))   (-, -, -, model)
    block{s}_unit{u}/conv3/kernel, conv_proj/kernel (., ., ., 4W * 2**(s-1)) (-, -, -, model)

and replicated where it does not (e.g. W = 3 on a model axis of 2: the root and stage 1's
conv1/conv2). The weight standardisation reduces over (kh, kw, in), within each output
channel, so each device standardises its own channels. `layout_rules` lists the rules of one
architecture and model axis.

In a user's own script, on KERAS_BACKEND=jax, before the model is built::

    from keras_vit.runtime import model_parallel

    distribution = model_parallel.vit_model_parallel("L/16")  # every device, model axis 4
    keras.distribution.set_distribution(distribution)
    model = keras_vit.ViT_L16(num_classes=1000)
    model.compile(...)
    model.fit(images, labels, batch_size=64)  # the batch splits over the `batch` axis

Megatron-LM (Shoeybi et al. 2019, section 3) for the split of the attention and MLP; ZeRO /
FSDP (Rajbhandari et al. 2020) for the split of the parameters over the data axis.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

import keras

logger = logging.getLogger(__name__)

BATCH_AXIS = "batch"
MODEL_AXIS = "model"
MESH_AXES = (BATCH_AXIS, MODEL_AXIS)

_ATTENTION = r"(?:.*/)?MultiHeadDotProductAttention_\d+"
_MLP = r"(?:.*/)?MlpBlock_\d+"
_EMBEDDING = r"(?:.*/)?embedding/conv"

LAYOUT_RULES: tuple[tuple[str, tuple], ...] = (
    (_EMBEDDING + "/kernel", (None, None, None, MODEL_AXIS)),
    (_EMBEDDING + "/bias", (MODEL_AXIS,)),
    (_ATTENTION + "/(?:query|key|value)/kernel", (BATCH_AXIS, MODEL_AXIS, None)),
    (_ATTENTION + "/(?:query|key|value)/bias", (MODEL_AXIS, None)),
    (_ATTENTION + "/out/kernel", (MODEL_AXIS, None, BATCH_AXIS)),
    (_MLP + "/(?:Dense_0|Dense_gate)/kernel", (BATCH_AXIS, MODEL_AXIS)),
    (_MLP + "/(?:Dense_0|Dense_gate)/bias", (MODEL_AXIS,)),
    (_MLP + "/Dense_1/kernel", (MODEL_AXIS, BATCH_AXIS)),
)
"""(regular expression matched in full against `variable.path`, mesh axis of each dimension)."""

_SIZES = ("num_heads", "hidden_dim", "mlp_dim")


def stem_kernels(architecture) -> dict[str, int]:
    """`{pattern: output channels}` of the convolution kernels of a hybrid's ResNet stem (the
    patterns match `variable.path` in full, as `LAYOUT_RULES`): the root's `conv_root`
    (`resnet_width`), then in stage s (from 1) each unit's conv1 and conv2
    (`resnet_width * 2**(s - 1)`) and its conv3 and conv_proj (4x that). `{}` for a ViT
    (no `resnet_stages`) and a stem given as `backbone` (its layers are the user's).

    Args:
        architecture: as `architecture_sizes` takes it; `resnet_width` defaults to 64.
    """
    from keras_vit.spec import configs

    kwargs = _architecture_kwargs(architecture)
    stages = kwargs.get("resnet_stages")
    if stages is None or kwargs.get("backbone") is not None:
        return {}
    width = kwargs.get("resnet_width") or configs.RESNET_ROOT_WIDTH
    kernels = {r"(?:.*/)?conv_root/kernel": width}
    for stage in range(1, len(stages) + 1):
        unit = rf"(?:.*/)?block{stage}_unit\d+"
        kernels[unit + "/(?:conv1|conv2)/kernel"] = width * 2 ** (stage - 1)
        kernels[unit + "/(?:conv3|conv_proj)/kernel"] = 4 * width * 2 ** (stage - 1)
    return kernels


def layout_rules(architecture=None, model_axis: int = 1) -> tuple[tuple[str, tuple], ...]:
    """The layout rules of a model on a `model` axis of `model_axis` devices: `LAYOUT_RULES`,
    then for a hybrid's ResNet stem each convolution kernel whose output channels
    `model_axis` divides, sharded by output channel over `model` (`stem_kernels`); the stem
    kernels it does not divide match no rule and are replicated. Without `architecture`:
    `LAYOUT_RULES` alone (a stem replicated).
    """
    if architecture is None:
        return LAYOUT_RULES
    stem = tuple(
        (pattern, (None, None, None, MODEL_AXIS))
        for pattern, channels in stem_kernels(architecture).items()
        if channels % model_axis == 0
    )
    return LAYOUT_RULES + stem


class ModelParallelError(ValueError):
    """A device mesh that cannot shard this model, or a backend without `ModelParallel`."""


def vit_layout_map(device_mesh, architecture=None) -> keras.distribution.LayoutMap:
    """keras_vit's `LayoutMap` on `device_mesh` (`layout_rules`; module docstring).

    Args:
        device_mesh: a `keras.distribution.DeviceMesh` with the axes "batch" and "model"
            (either may have size 1).
        architecture: the model's architecture (as `architecture_sizes` takes it): a
            hybrid's ResNet stem kernels are then sharded where the model axis divides
            their output channels. None: the stem is replicated.

    Raises:
        ModelParallelError: a mesh without those two axis names.
    """
    names = tuple(device_mesh.axis_names)
    if sorted(names) != sorted(MESH_AXES):
        raise ModelParallelError(
            f"keras_vit's layout map needs a device mesh with the axes {MESH_AXES}. "
            f"Received: axis_names={names}"
        )
    model_axis = device_mesh.shape[names.index(MODEL_AXIS)]
    layout_map = keras.distribution.LayoutMap(device_mesh)
    for pattern, axes in layout_rules(architecture, model_axis):
        layout_map[pattern] = axes
    return layout_map


def architecture_sizes(architecture) -> dict[str, int]:
    """`{"num_heads", "hidden_dim", "mlp_dim"}` of `architecture`: a table name ("B/16",
    "R50+B/16", "default" for the training recipe), a `ViTConfig` / `HybridConfig`, or a
    mapping with those keys (the keyword arguments of `keras_vit.ViT`).

    Raises:
        ModelParallelError: a mapping without one of the three sizes, or a size that is no
            positive integer.
        ValueError: an unknown model name (`keras_vit.spec.configs.resolve_model`).
    """
    architecture = _architecture_kwargs(architecture)
    sizes = {name: architecture.get(name) for name in _SIZES}
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ModelParallelError(
                f"{name} must be a positive int to shard the model. Received: {name}={value!r}"
            )
    return sizes


def _architecture_kwargs(architecture) -> Mapping:
    """The keyword arguments of `keras_vit.ViT` / `HybridViT` of `architecture` (a name, a
    config or a mapping; `architecture_sizes`)."""
    from keras_vit.spec import configs

    if isinstance(architecture, str):
        architecture = configs.resolve_model(architecture, recipes=True).config or (
            configs.RECIPE_VIT
        )
    if isinstance(architecture, (configs.ViTConfig, configs.HybridConfig)):
        architecture = architecture.as_kwargs()
    if not isinstance(architecture, Mapping):
        raise ModelParallelError(
            "architecture must be a model name, a ViTConfig/HybridConfig or a mapping with "
            f"{', '.join(_SIZES)}. Received: {architecture!r}"
        )
    return architecture


def check_mesh(sizes: Mapping[str, int], batch: int, model: int) -> None:
    """Raises one line when a `batch` x `model` mesh cannot hold the kernels of a model of
    `sizes` (`architecture_sizes`): the model axis must divide num_heads, hidden_dim and
    mlp_dim, the batch axis hidden_dim (`LAYOUT_RULES`).

    Raises:
        ModelParallelError: naming the size, its value and the axis.
    """
    for name in _SIZES:
        if sizes[name] % model:
            raise ModelParallelError(
                f"A model axis of {model} devices does not divide {name}={sizes[name]}: "
                f"every sharded kernel splits num_heads, hidden_dim and mlp_dim evenly over "
                "it. Choose a model_axis that divides all three."
            )
    if sizes["hidden_dim"] % batch:
        raise ModelParallelError(
            f"A batch axis of {batch} devices does not divide hidden_dim="
            f"{sizes['hidden_dim']}: the kernels are also split over it along hidden_dim "
            "(FSDP-style). Choose a model_axis (or a device count) that leaves a batch axis "
            "dividing hidden_dim."
        )


def default_model_axis(sizes: Mapping[str, int], device_count: int) -> int:
    """The largest divisor of `device_count` that divides num_heads, hidden_dim and mlp_dim
    and leaves a batch axis dividing hidden_dim: the most sharding that fits; 1 when none
    does (`check_mesh` then names the rule)."""
    common = math.gcd(*(sizes[name] for name in _SIZES))
    fits = [
        model
        for model in range(device_count, 0, -1)
        if device_count % model == 0
        and common % model == 0
        and sizes["hidden_dim"] % (device_count // model) == 0
    ]
    return fits[0] if fits else 1


def vit_model_parallel(architecture, *, devices=None, model_axis: int | None = None):
    """A `keras.distribution.ModelParallel` that shards a keras_vit model's kernels.

    Set it (`keras.distribution.set_distribution`, or `with distribution.scope():`) before
    the model is built: each variable takes its layout when it is created.

    Args:
        architecture: the model's sizes: a table name ("B/16", "R50+B/16"), a config, or
            the keyword arguments of `keras_vit.ViT` (see `architecture_sizes`).
        devices: the devices of the mesh (`keras.distribution.list_devices()` strings);
            default: every device of every process.
        model_axis: devices along the "model" axis (a divisor of the device count);
            default: `default_model_axis` (all of them where the sizes allow). The other
            devices, `len(devices) // model_axis`, form the "batch" axis: each batch is split
            over them.

    Returns:
        The distribution; its mesh is (batch, model) with the axis names ("batch", "model")
        and its data split along "batch".

    Raises:
        ModelParallelError: another backend than JAX; a model_axis that is no positive
            divisor of the device count, or a mesh `check_mesh` refuses (naming the value).
    """
    backend = keras.backend.backend()
    if backend != "jax":
        raise ModelParallelError(
            "keras_vit's model parallelism (keras.distribution.ModelParallel) needs "
            f"KERAS_BACKEND=jax; the Keras backend is {backend!r}."
        )
    sizes = architecture_sizes(architecture)
    devices = list(devices) if devices is not None else keras.distribution.list_devices()
    count = len(devices)
    if count == 0:
        raise ModelParallelError("model parallelism needs at least one device; none given.")
    if model_axis is None:
        model_axis = default_model_axis(sizes, count)
    if (
        isinstance(model_axis, bool)
        or not isinstance(model_axis, int)
        or model_axis <= 0
        or count % model_axis
    ):
        raise ModelParallelError(
            f"model_axis must be a positive divisor of the {count} devices. "
            f"Received: model_axis={model_axis!r}"
        )
    batch_axis = count // model_axis
    check_mesh(sizes, batch_axis, model_axis)
    mesh = keras.distribution.DeviceMesh(
        shape=(batch_axis, model_axis), axis_names=MESH_AXES, devices=devices
    )
    logger.info(
        "ModelParallel over %d devices: batch axis %d x model axis %d", count, batch_axis,
        model_axis,
    )  # fmt: skip
    return keras.distribution.ModelParallel(
        layout_map=vit_layout_map(mesh, architecture), batch_dim_name=BATCH_AXIS
    )
