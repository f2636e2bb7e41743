"""`Architecture`: what a keras_vit model or an official checkpoint is, read in one place.

`Architecture.from_model(model)` reads a built model's layers (by type: `PatchEmbed`,
`ClassToken`, `TransformerBlock`; the hybrid's ResNet units by name);
`Architecture.from_arrays(arrays)` reads the release's `.npz` keys and shapes (the layout of
the release's ``vit_jax/checkpoint.py``). The class-token decision comes from the model (a
class-token layer) or the file (a `cls` array), never from a token count. Checkpoint loading,
fine-tuning, run plans, `keras-vit convert` and the visualisation helpers all read sizes
through it.
"""

from __future__ import annotations

import dataclasses
import math
import re

import keras

from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.checkpoints.base.naming import find_vit_model
from keras_vit.layers import ClassToken, PatchEmbed, TransformerBlock
from keras_vit.layers.position_embedding import position_embedding_kind
from keras_vit.spec import configs
from keras_vit.spec import layer_names as names
from keras_vit.spec.configs import PATCH_GAP, SWIGLU, has_class_token

# The checkpoint key each field of `from_arrays` is read from (for "missing key" errors).
FIELD_KEYS = {
    "patch_size": "embedding/kernel",
    "channels": "embedding/kernel",
    "hidden_dim": "embedding/kernel",
    "num_heads": names.block_key(0, names.QUERY_KERNEL),
    "mlp_dim": names.block_key(0, names.MLP_IN_KERNEL),
    "num_patch_tokens": names.POSITION_KEY,
    "num_classes": "head/kernel",
}
# The LayerScale value a model read from a file or model is built with (then overwritten by
# the loaded gammas); DINOv2's `layerscale_value` (HF Dinov2Config), timm's `init_values`.
LAYER_SCALE_INIT = 1e-5


@dataclasses.dataclass(frozen=True)
class Architecture:
    """The sizes of a ViT or hybrid; a field is None where the source does not say.

    Attributes:
        patch_size: `(height, width)` of a patch on the embedding's input (pixels for a ViT,
            feature-map cells for a hybrid).
        hidden_dim, num_heads, mlp_dim, num_layers: the Transformer (paper table 1).
        channels: image channels (the ResNet root's input channels for a hybrid file).
        pooling: "token" with a class token, else "gap"; "patch_gap" for a model whose
            class token is not pooled (its `pool` averages the patch tokens past it) or a
            file whose reader says so (`CheckpointContents.pooling`).
        num_patch_tokens: patch tokens (grid rows x cols; the position-table rows minus the
            class-token row for a file).
        grid: `(rows, cols)` of the patch tokens; from a file only when square.
        image_size: `(height, width)` of the model's input (models only).
        num_classes: head outputs; None without a head.
        representation_size: width of `pre_logits`; None without one.
        resnet_stages: units per ResNet stage of a hybrid (() root only); None for a ViT.
        position_embedding: "learned", "sincos2d", "none" or "rope" for a model (its blocks'
            attention rotates: "rope"); "learned" for a file with a position table, None for
            one without (sincos2d, none or rope: the arrays cannot tell).
        final_norm: "tokens" (`encoder_norm` before pooling) or "pooled" (timm's `fc_norm`
            after pooling: a `fc_norm` layer, or `fc_norm/scale` in a file).
        layer_scale: LayerScale gammas in the blocks (`LayerScale_1/scale` in a file).
        num_register_tokens: register tokens (the `reg` layer or array, `(1, R, D)`).
        distilled: a DeiT distillation token (`dist`).
        distillation_head: with `distilled`, False when the model has a `head` on the class
            token but no `head_dist` (HF `DeiTForImageClassification`); True otherwise,
            also without a head (timm's and HF's headless DeiTs are the same model).
        norm_pre: a LayerNorm before the blocks (`Transformer/norm_pre/scale`).
        no_embed_class: the position table has patch rows only (a model: a class token
            with a table of exactly the grid's rows; a file: what the reader recorded,
            `CheckpointContents.no_embed_class`).
        mlp_activation: "gelu", "quick_gelu" or "swiglu" (a model's blocks; a file: the
            contents', "swiglu" whenever block 0 has a `Dense_gate`).
        qkv_bias: which attention projections have a bias, "qkv", "qv" or "none" (a model's
            blocks; a file: block 0's `query/bias` and `key/bias` keys).
    """

    patch_size: tuple[int, int] | None = None
    hidden_dim: int | None = None
    num_heads: int | None = None
    mlp_dim: int | None = None
    num_layers: int = 0
    channels: int | None = None
    pooling: str = "gap"
    num_patch_tokens: int | None = None
    grid: tuple[int, int] | None = None
    image_size: tuple | None = None
    num_classes: int | None = None
    representation_size: int | None = None
    resnet_stages: tuple[int, ...] | None = None
    position_embedding: str | None = None
    final_norm: str = "tokens"
    layer_scale: bool = False
    num_register_tokens: int = 0
    distilled: bool = False
    distillation_head: bool = True
    norm_pre: bool = False
    no_embed_class: bool = False
    mlp_activation: str = "gelu"
    qkv_bias: str = "qkv"

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patch tokens in the encoder's sequence: the class token
        ("token" pooling), the distillation token and the register tokens
        ([cls][dist][registers...][patches])."""
        return int(self.has_class_token) + int(self.distilled) + self.num_register_tokens

    @property
    def has_class_token(self) -> bool:
        """A class token leads the sequence ("token" and "patch_gap" pooling)."""
        return has_class_token(self.pooling)

    @property
    def num_position_prefix_rows(self) -> int:
        """Rows of the position table before the patch grid: 0 with `no_embed_class`, else
        the class token's and the distillation token's (registers never have rows)."""
        if self.no_embed_class:
            return 0
        return int(self.has_class_token) + int(self.distilled)

    def family_kwargs(self) -> dict:
        """The builder keywords of the ViT-family switches that are not off (e.g.
        `{"num_register_tokens": 4, "layer_scale_init": 1e-5}`), to pass with
        `transformer_kwargs` and `pooling_kwargs` so a file's switches reach the builder.

        A file or model records LayerScale's gammas, not their initial value: the model is
        built with `layer_scale_init=LAYER_SCALE_INIT` (1e-5, DINOv2's) and the gammas are
        then loaded over it.
        """
        kwargs = {}
        if self.layer_scale:
            kwargs["layer_scale_init"] = LAYER_SCALE_INIT
        if self.num_register_tokens:
            kwargs["num_register_tokens"] = self.num_register_tokens
        for switch in ("distilled", "norm_pre", "no_embed_class"):
            if getattr(self, switch):
                kwargs[switch] = True
        if self.distilled and not self.distillation_head:
            kwargs["distillation_head"] = False
        if self.mlp_activation != "gelu":
            kwargs["mlp_activation"] = self.mlp_activation
        if self.qkv_bias != "qkv":
            kwargs["qkv_bias"] = self.qkv_bias
        return kwargs

    @property
    def pixels_per_token(self) -> tuple[int, int] | None:
        """`(height, width)` in input pixels one patch token covers (image size / grid)."""
        if self.grid is None or self.image_size is None or None in self.image_size:
            return None
        return (int(self.image_size[0]) // self.grid[0], int(self.image_size[1]) // self.grid[1])

    def transformer_kwargs(self) -> dict:
        """`channels`, `hidden_dim`, `num_heads`, `mlp_dim`, `num_layers` as builder
        arguments (the caller adds patch size, image size, pooling and head in its format)."""
        return {
            "channels": self.channels,
            "hidden_dim": self.hidden_dim,
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "num_layers": self.num_layers,
        }

    def pooling_kwargs(self) -> dict:
        """`pooling`, and `final_norm` when it is "pooled", as builder arguments."""
        kwargs = {"pooling": self.pooling}
        if self.final_norm != "tokens":
            kwargs["final_norm"] = self.final_norm
        return kwargs

    def head_kwargs(self) -> dict:
        """The head as builder arguments: `num_classes` (or `include_top=False` for a file
        without a head) and `representation_size` when the file has `pre_logits`."""
        kwargs = {}
        if self.num_classes is not None:
            kwargs["num_classes"] = self.num_classes
        else:
            kwargs["include_top"] = False
        if self.representation_size is not None:
            kwargs["representation_size"] = self.representation_size
        return kwargs

    def missing_key(self, *fields: str) -> str | None:
        """The checkpoint key of the first of `fields` that is None (e.g. "head/kernel" for
        `num_classes`), or None when all are known."""
        for field in fields:
            if getattr(self, field) is None:
                return FIELD_KEYS.get(field, field)
        return None

    def release_name(self) -> str | None:
        """The release's name ("ViT-B_16", "R50+ViT-B_16"), or None if it is none of them."""
        if not self.num_layers or self.patch_size is None:
            return None
        sizes = (self.hidden_dim, self.mlp_dim, self.num_heads, self.num_layers)
        table = configs.VIT_CONFIGS if self.resnet_stages is None else configs.HYBRID_CONFIGS
        for variant, config in table.items():
            kwargs = config.as_kwargs()
            fields = tuple(kwargs[k] for k in ("hidden_dim", "mlp_dim", "num_heads", "num_layers"))
            stages = kwargs.get("resnet_stages")
            if (
                self.patch_size == (kwargs["patch_size"],) * 2
                and sizes == fields
                and (stages is None or tuple(stages) == self.resnet_stages)
            ):
                return configs.release_name(variant)
        return None

    @classmethod
    def from_model(cls, model) -> Architecture:
        """Reads a built model that holds the ViT layers (its embedding among `model.layers`,
        or inside one of its sub-models, e.g. a custom hybrid backbone).

        Raises:
            ValueError: the model holds no or several `PatchEmbed` layers.
        """
        layers = list(model.layers)
        embeds = [layer for layer in layers if isinstance(layer, PatchEmbed)]
        if not embeds:
            subs = [layer for layer in layers if isinstance(layer, keras.Model)]
            embeds = [x for sub in subs for x in sub.layers if isinstance(x, PatchEmbed)]
        if len(embeds) != 1:
            raise ValueError(
                f"Cannot read the token grid of model {model.name!r}: it needs exactly one built "
                f"PatchEmbed layer with a fixed image size. Found {len(embeds)} PatchEmbed "
                "layers."
            )
        embed = embeds[0]
        blocks = [layer for layer in layers if isinstance(layer, TransformerBlock)]
        by_name = {layer.name: layer for layer in layers}
        grid = None if embed.grid_size is None else tuple(int(g) for g in embed.grid_size)
        shape = model.inputs[0].shape if model.inputs else None
        has_class = any(isinstance(x, ClassToken) for x in layers)
        registers = by_name.get(names.REGISTERS)
        return cls(
            patch_size=tuple(int(p) for p in embed.patch_size),
            hidden_dim=int(embed.hidden_dim),
            num_heads=int(blocks[0].num_heads) if blocks else None,
            mlp_dim=int(blocks[0].mlp_dim) if blocks else None,
            num_layers=len(blocks),
            channels=None if shape is None or shape[-1] is None else int(shape[-1]),
            pooling=_model_pooling(has_class, by_name.get(names.POOL)),
            num_patch_tokens=None if grid is None else grid[0] * grid[1],
            grid=grid,
            image_size=None if shape is None else tuple(shape[1:3]),
            num_classes=_units(by_name.get(names.HEAD)),
            representation_size=_units(by_name.get(names.PRE_LOGITS)),
            resnet_stages=_resnet_stages(list(by_name)),
            position_embedding="rope"
            if blocks and blocks[0].rope is not None
            else next((kind for x in layers if (kind := position_embedding_kind(x))), "none"),
            final_norm="pooled" if names.POOLED_NORM in by_name else "tokens",
            layer_scale=bool(blocks) and blocks[0].layer_scale_init is not None,
            num_register_tokens=0 if registers is None else int(registers.num_tokens),
            distilled=names.DIST_TOKEN in by_name,
            distillation_head=not _class_head_only(by_name, names.HEAD, names.HEAD_DIST),
            norm_pre=names.NORM_PRE in by_name,
            no_embed_class=has_class and _model_no_embed_class(layers, grid),
            mlp_activation=blocks[0].mlp_activation if blocks else "gelu",
            qkv_bias=blocks[0].qkv_bias if blocks else "qkv",
        )

    @classmethod
    def from_contents(cls, contents) -> Architecture:
        """`from_arrays` of a `CheckpointContents`, with what its reader recorded
        (`no_embed_class`, `mlp_activation`, `pooling`)."""
        arch = cls.from_arrays(
            contents.arrays,
            no_embed_class=contents.no_embed_class,
            mlp_activation=contents.mlp_activation,
        )
        pooling = getattr(contents, "pooling", None)
        return arch if pooling is None else dataclasses.replace(arch, pooling=pooling)

    @classmethod
    def from_checkpoint_model(cls, model) -> Architecture:
        """`from_model` of the keras_vit model inside `model` (see `find_vit_model`).

        Raises:
            CheckpointError: `model` holds no or several keras_vit models.
        """
        return cls.from_model(find_vit_model(model))

    @classmethod
    def from_arrays(cls, arrays, *, no_embed_class=False, mlp_activation="gelu") -> Architecture:
        """Reads official checkpoint arrays in the plain layout (after
        `keras_vit.checkpoints.release.layouts.normalise_layout`); fields of missing keys are None.

        Patch size and channels from `embedding/kernel` (P, P, C, D), heads from block 0's
        query kernel (D, H, hd), MLP width from its `Dense_0`, depth from the block count,
        pooling from a `cls` array, `final_norm` from `fc_norm/scale`, the grid from the
        position table (when square; its rows minus the class and distillation rows, none
        with `no_embed_class`), classes from `head/kernel`, `representation_size` from
        `pre_logits/kernel`; LayerScale from block 0's `LayerScale_1/scale`, registers from
        `reg` (1, R, D), the distillation token from `dist` (`distillation_head` False with
        `head/kernel` and no `head_dist/kernel`), `norm_pre` from
        `Transformer/norm_pre/scale`, the gated MLP ("swiglu") from block 0's `Dense_gate`.
        `no_embed_class` and the other `mlp_activation`s are not in the arrays: the
        reader's (see `from_contents`).
        """
        kernel = arrays.get(FIELD_KEYS["hidden_dim"])
        query = arrays.get(FIELD_KEYS["num_heads"])
        mlp = arrays.get(FIELD_KEYS["mlp_dim"])
        table = arrays.get(names.POSITION_KEY)
        root = arrays.get(f"{names.ROOT_CONV}/kernel")
        distilled = names.DIST_TOKEN in arrays
        has_class = names.CLASS_TOKEN in arrays
        prefix = 0 if no_embed_class else int(has_class) + int(distilled)
        registers = arrays.get(names.REGISTERS)
        blocks = {m[1] for key in arrays if (m := re.match(names.BLOCK_KEY_PATTERN, key))}
        tokens = None if table is None else int(table.shape[1]) - prefix
        side = None if tokens is None or tokens < 0 else math.isqrt(tokens)
        units = [k.split("/")[0] + "_" + k.split("/")[1] for k in arrays if k.count("/") >= 2]
        return cls(
            patch_size=None if kernel is None else (int(kernel.shape[0]), int(kernel.shape[1])),
            hidden_dim=None if kernel is None else int(kernel.shape[3]),
            num_heads=None if query is None else int(query.shape[1]),
            mlp_dim=None if mlp is None else int(mlp.shape[1]),
            num_layers=len(blocks),
            channels=None
            if kernel is None
            else int((root if root is not None else kernel).shape[2]),
            pooling="token" if has_class else "gap",
            num_patch_tokens=tokens,
            grid=(side, side) if side is not None and side * side == tokens else None,
            num_classes=_width(arrays.get("head/kernel")),
            representation_size=_width(arrays.get("pre_logits/kernel")),
            resnet_stages=None if root is None else _resnet_stages([names.ROOT_CONV, *units]),
            position_embedding=None if table is None else "learned",
            final_norm="pooled" if f"{names.POOLED_NORM}/scale" in arrays else "tokens",
            layer_scale=names.block_key(0, names.LAYER_SCALE_KEY) in arrays,
            num_register_tokens=0 if registers is None else int(registers.shape[1]),
            distilled=distilled,
            distillation_head=not _class_head_only(arrays, "head/kernel", names.HEAD_DIST_KERNEL),
            norm_pre=names.NORM_PRE_KEY in arrays,
            no_embed_class=bool(no_embed_class) and has_class,
            mlp_activation=_mlp_activation(arrays, mlp_activation),
            qkv_bias=_qkv_bias(arrays) if query is not None else "qkv",
        )


def _mlp_activation(arrays, said: str) -> str:
    """ "swiglu" when block 0 has the gated MLP's `Dense_gate` (whatever the file says), else
    `said` (the reader's).

    Raises:
        CheckpointError: `said` is "swiglu" but block 0 has no `Dense_gate`.
    """
    gated = names.block_key(0, names.MLP_GATE_KERNEL) in arrays
    if said == SWIGLU and not gated and names.block_key(0, names.MLP_IN_KERNEL) in arrays:
        raise CheckpointError(
            "The file says mlp_activation='swiglu' but block 0's MLP has no "
            f"{names.MLP_GATE_KERNEL!r} (the gate projection)."
        )
    return SWIGLU if gated else said


def _qkv_bias(arrays) -> str:
    """ "qkv", "qv" or "none" from block 0's query and key bias keys."""
    attention = names.block_key(0, names.QUERY_KERNEL).rsplit("/query/", 1)[0]
    if f"{attention}/key/bias" in arrays:
        return "qkv"
    return "qv" if f"{attention}/query/bias" in arrays else "none"


def _model_no_embed_class(layers, grid) -> bool:
    """A class-token model's position layer has no class row: a learned table of exactly
    the grid's rows (its stored grid when dynamic), or a sine-cosine layer with no prefix."""
    for layer in layers:
        kind = position_embedding_kind(layer)
        if kind == "sincos2d":
            return int(layer.num_prefix_tokens) == 0
        if kind == "learned":
            stored = layer.grid_size if layer.dynamic_image_size else grid
            if stored is None or not hasattr(layer, "pos_embedding"):
                return False
            return int(layer.pos_embedding.shape[1]) == stored[0] * stored[1]
    return False


def _class_head_only(present, head, head_dist) -> bool:
    """A distillation token beside a `head` without `head_dist` (layer names or keys)."""
    return names.DIST_TOKEN in present and head in present and head_dist not in present


def _units(layer) -> int | None:
    return None if layer is None else int(layer.units)


def _width(kernel) -> int | None:
    return None if kernel is None else int(kernel.shape[1])


def _resnet_stages(layer_names: list[str]) -> tuple[int, ...] | None:
    """Units per stage from `block{s}_unit{u}` names; None without the ResNet root."""
    if names.ROOT_CONV not in layer_names:
        return None
    units = {}
    for name in layer_names:
        match = re.fullmatch(names.UNIT_PATTERN, name)
        if match:
            stage, unit = int(match[1]), int(match[2])
            units[stage] = max(units.get(stage, 0), unit)
    return tuple(units[s] for s in sorted(units))


def num_prefix_tokens(model) -> int:
    """Tokens before the patches in the ViT's sequence (class, distillation, registers)."""
    return Architecture.from_checkpoint_model(model).num_prefix_tokens


def num_position_prefix_rows(model) -> int:
    """Rows of the ViT's position table before the grid (see
    `Architecture.num_position_prefix_rows`)."""
    return Architecture.from_checkpoint_model(model).num_position_prefix_rows


def patch_grid(model) -> tuple[int, int]:
    """The (rows, cols) patch grid of the model's patch embedding.

    Raises:
        CheckpointError: if the model was built without a fixed image size.
    """
    grid = Architecture.from_checkpoint_model(model).grid
    if grid is None:
        raise CheckpointError(
            "The model's patch embedding has no fixed grid (built without a fixed image "
            "size), so the position table cannot be resized to it."
        )
    return grid


def release_model_name(model) -> str | None:
    """The release's name of the model's architecture, or None if it is not one of them."""
    return Architecture.from_checkpoint_model(model).release_name()


def _model_pooling(has_class: bool, pool) -> str:
    """A model's pooling: "patch_gap" when its `pool` layer averages past a class token."""
    if not has_class:
        return "gap"
    return PATCH_GAP if getattr(pool, "pooling", "token") == "gap" else "token"
