"""Position embeddings added to the token sequence (paper section 3.1 eq. 1, appendix D.4).

One home for every kind a builder can choose (`POSITION_EMBEDDINGS`, made by
`position_embedding_layer`):

- "learned": `AddPositionEmbs`, the release's learned 1-D table (default);
- "sincos2d": `AddSinCosPositionEmbs`, a fixed 2-D sine-cosine table (big_vision's
  `posemb_sincos_2d` in big_vision/models/vit.py; no weights);
- "none": no position information (the paper's appendix D.4 ablation);
- "rope": DINOv3's rotary position embedding, applied inside the attention to the patch
  tokens' queries and keys (`keras_vit.layers.rotary`; no layer here, no weights, any grid).

To add a kind: write its layer here, add its name to `POSITION_EMBEDDINGS` and a branch to
`position_embedding_layer`; the builders, `Architecture` and fine-tuning pick it up.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_vit._validation import check_choice, to_pair
from keras_vit.layers.position_table_ops import resize_table
from keras_vit.spec.resize_methods import RESIZE_METHODS

POSITION_EMBEDDINGS = ("learned", "sincos2d", "none", "rope")
SINCOS_TEMPERATURE = 10_000.0


@keras.saving.register_keras_serializable(package="keras_vit")
class AddPositionEmbs(keras.layers.Layer):
    """Adds a learned table of shape `(1, num_tokens, hidden_dim)` to the tokens.

    The table (checkpoint key `Transformer/posembed_input/pos_embedding`) holds one row per
    token, class token first when the model has one. It is stored in float32 and cast to the
    compute dtype of the input. To use a model at another resolution, the table is resized
    once, outside the graph, with `keras_vit.resize_position_embeddings`.

    With `dynamic_image_size=True` the table is stored for `grid_size` (plus
    `num_prefix_tokens` rows) and resized in the forward pass to the grid of each call's
    images with `resize_method` (`keras_vit.layers.position_table_ops`, every method of
    `keras_vit.resize_position_embeddings`), which equals a model rebuilt at that size and
    loaded with `keras_vit.resize_position_embeddings(..., method=resize_method)`.

    Args:
        initializer: default normal with stddev 0.02, as in the release.
        dynamic_image_size: resize the table to the input's grid in the forward pass.
        grid_size: (rows, cols) the table is stored for (dynamic only).
        patch_size: (height, width) of a patch in pixels (dynamic only).
        num_prefix_tokens: rows before the grid, 1 with a class token (dynamic only).
        resize_method: how the table is resized: in the forward pass (dynamic), and by
            `keras_vit.finetune` at another image size by default: "bilinear" (default,
            the release's), "bicubic" (timm's `dynamic_img_size`), "torch_bicubic" (Hugging
            Face's `interpolate_pos_encoding`), "dinov2" or "bilinear_antialias" (SigLIP 2
            NaFlex's); `keras_vit.from_checkpoint` sets it from the file.
        **kwargs: `name`, `dtype`, `trainable`.

    Call arguments:
        tokens: `(batch, num_tokens, hidden_dim)` with `num_tokens` fixed at build time
            (any length when dynamic).
        images: the model's input images `(batch, height, width, channels)`, whose size
            gives the grid (dynamic only).

    Returns:
        `(batch, num_tokens, hidden_dim)` in the input's dtype.

    Raises:
        ValueError: if the sequence length or width is unknown at build time, a call's
            sequence length differs from the table's, or an unknown `resize_method`.
    """

    def __init__(
        self,
        initializer=None,
        dynamic_image_size=False,
        grid_size=None,
        patch_size=None,
        num_prefix_tokens=0,
        resize_method="bilinear",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.resize_method = check_choice("resize_method", resize_method, RESIZE_METHODS)
        self.dynamic_image_size = bool(dynamic_image_size)
        self.grid_size = None if grid_size is None else tuple(int(g) for g in grid_size)
        self.patch_size = None if patch_size is None else tuple(int(p) for p in patch_size)
        self.num_prefix_tokens = int(num_prefix_tokens)
        if self.dynamic_image_size and (self.grid_size is None or self.patch_size is None):
            raise ValueError(
                "dynamic_image_size=True needs grid_size and patch_size. "
                f"Received: grid_size={grid_size}, patch_size={patch_size}"
            )
        if initializer is None:
            initializer = keras.initializers.RandomNormal(stddev=0.02)
        self.initializer = keras.initializers.get(initializer)

    def build(self, tokens_shape, images_shape=None):
        input_shape = tokens_shape
        if self.dynamic_image_size and len(input_shape) == 3 and input_shape[2] is not None:
            length = self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]
            input_shape = (input_shape[0], length, input_shape[2])
        if len(input_shape) != 3 or input_shape[1] is None or input_shape[2] is None:
            raise ValueError(
                "AddPositionEmbs needs a known (num_tokens, hidden_dim) at build time. "
                f"Received: input_shape={input_shape}"
            )
        self.pos_embedding = self.add_weight(
            name="pos_embedding",
            shape=(1, input_shape[1], input_shape[2]),
            initializer=self.initializer,
        )

    def call(self, tokens, images=None):
        if self.dynamic_image_size:
            if images is None:
                raise ValueError("A dynamic_image_size AddPositionEmbs needs `images=`.")
            shape = ops.shape(images)
            grid = (shape[1] // self.patch_size[0], shape[2] // self.patch_size[1])
            table = resize_table(
                self.pos_embedding,
                self.grid_size,
                grid,
                self.num_prefix_tokens,
                self.resize_method,
            )
            return tokens + ops.cast(table, tokens.dtype)
        length = tokens.shape[1]
        if length is not None and length != self.pos_embedding.shape[1]:
            raise ValueError(
                f"AddPositionEmbs holds {self.pos_embedding.shape[1]} positions but received "
                f"{length} tokens. Resize the table with keras_vit.resize_position_embeddings "
                "or build the model for this image size."
            )
        return tokens + ops.cast(self.pos_embedding, tokens.dtype)

    def compute_output_shape(self, tokens_shape, images_shape=None):
        return tokens_shape

    def get_config(self):
        return {
            **super().get_config(),
            "initializer": keras.initializers.serialize(self.initializer),
            "dynamic_image_size": self.dynamic_image_size,
            "grid_size": self.grid_size,
            "patch_size": self.patch_size,
            "num_prefix_tokens": self.num_prefix_tokens,
            "resize_method": self.resize_method,
        }


def position_layers(model) -> list:
    """The `AddPositionEmbs` layers of `model` (or of a ViT nested in it, one level)."""
    found = []
    for layer in getattr(model, "layers", ()):
        if isinstance(layer, AddPositionEmbs):
            found.append(layer)
        elif isinstance(layer, keras.Model):
            found.extend(position_layers(layer))
    return found


def dynamic_position_layers(model) -> list:
    """The `AddPositionEmbs` layers of `model` (or of a ViT nested in it, one level) that
    resize their table in the forward pass (`dynamic_image_size=True`)."""
    return [layer for layer in position_layers(model) if layer.dynamic_image_size]


def set_forward_resize_method(model, method: str) -> None:
    """Makes every position table of `model` resize with `method`: in the forward pass when
    dynamic, and in `keras_vit.finetune` at another image size
    (`keras_vit.from_checkpoint(..., resize_method=...)`, or the file's own method).

    Raises:
        ValueError: an unknown method.
    """
    method = check_choice("resize_method", method, RESIZE_METHODS)
    for layer in position_layers(model):
        layer.resize_method = method


def recorded_resize_method(model) -> str:
    """The resize method `model`'s position table records ("bilinear" without a table)."""
    layers = position_layers(model)
    return layers[0].resize_method if layers else "bilinear"


def sincos_2d_table(grid_size, hidden_dim, temperature=SINCOS_TEMPERATURE) -> np.ndarray:
    """The `(rows * cols, hidden_dim)` float32 sine-cosine table of a patch grid.

    Row-major positions (row y, column x); the four quarters of the width hold sin(x w),
    cos(x w), sin(y w), cos(y w) for the frequencies w_k = temperature ** (-k / (D/4 - 1)),
    k = 0 .. D/4 - 1 (big_vision's `posemb_sincos_2d`).

    Raises:
        ValueError: `hidden_dim` not a multiple of 4 or below 8.
    """
    rows, cols = to_pair("grid_size", grid_size)
    if hidden_dim % 4 or hidden_dim < 8:
        raise ValueError(
            "position_embedding='sincos2d' needs hidden_dim divisible by 4 and at least 8. "
            f"Received: hidden_dim={hidden_dim}"
        )
    quarter = hidden_dim // 4
    omega = 1.0 / temperature ** (np.arange(quarter, dtype=np.float64) / (quarter - 1))
    y, x = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    x = x.reshape(-1, 1) * omega
    y = y.reshape(-1, 1) * omega
    return np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1).astype("float32")


@keras.saving.register_keras_serializable(package="keras_vit")
class AddSinCosPositionEmbs(keras.layers.Layer):
    """Adds a fixed 2-D sine-cosine table to the tokens (no weights; `sincos_2d_table`).

    The class-token row (first `num_prefix_tokens` rows) gets zeros, so the class token
    carries no position, as in big_vision (which adds the table before prepending it).

    Args:
        grid_size: `(rows, cols)` of the patch tokens (int for a square grid).
        num_prefix_tokens: rows before the grid (class and distillation tokens; default 0).
        temperature: frequency base (default 10000, as big_vision).
        **kwargs: `name`, `dtype`.

    Call arguments:
        tokens: `(batch, num_prefix_tokens + rows * cols, hidden_dim)`.

    Returns:
        `(batch, num_tokens, hidden_dim)` in the input's dtype.

    Raises:
        ValueError: a sequence length other than num_prefix_tokens + rows * cols, or a
            hidden_dim that is not a multiple of 4 (at least 8).
    """

    def __init__(self, grid_size, num_prefix_tokens=0, temperature=SINCOS_TEMPERATURE, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = to_pair("grid_size", grid_size)
        if (
            isinstance(num_prefix_tokens, bool)
            or not isinstance(num_prefix_tokens, int)
            or num_prefix_tokens < 0
        ):
            raise ValueError(
                f"`num_prefix_tokens` must be an int >= 0. Received: {num_prefix_tokens!r}"
            )
        self.num_prefix_tokens = int(num_prefix_tokens)
        if not temperature > 0:
            raise ValueError(f"`temperature` must be > 0. Received: temperature={temperature!r}")
        self.temperature = float(temperature)

    def build(self, input_shape):
        rows, cols = self.grid_size
        expected = self.num_prefix_tokens + rows * cols
        if len(input_shape) != 3 or input_shape[1] != expected or input_shape[2] is None:
            raise ValueError(
                f"AddSinCosPositionEmbs for a {rows}x{cols} grid and {self.num_prefix_tokens} "
                f"class-token row(s) expects (batch, {expected}, hidden_dim). "
                f"Received: input_shape={input_shape}"
            )
        grid = sincos_2d_table(self.grid_size, input_shape[2], self.temperature)
        prefix = np.zeros((self.num_prefix_tokens, input_shape[2]), np.float32)
        self.table = np.concatenate([prefix, grid])[None]

    def call(self, tokens):
        return tokens + ops.cast(self.table, tokens.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "grid_size": list(self.grid_size),
            "num_prefix_tokens": self.num_prefix_tokens,
            "temperature": self.temperature,
        }


def position_embedding_kind(layer) -> str | None:
    """The `POSITION_EMBEDDINGS` name of a position layer, or None for any other layer."""
    if isinstance(layer, AddPositionEmbs):
        return "learned"
    if isinstance(layer, AddSinCosPositionEmbs):
        return "sincos2d"
    return None


def position_embedding_layer(
    kind, grid_size, num_prefix_tokens, name, *, dynamic_image_size=False, patch_size=None
):
    """The layer of one `POSITION_EMBEDDINGS` kind for a patch grid, or None for "none" and
    "rope" (the rotary embedding lives in the attention layers: `rope_config`).

    With `dynamic_image_size=True` a "learned" table is stored for `grid_size` and resized
    in the forward pass to each call's grid (`AddPositionEmbs(dynamic_image_size=True)`,
    which needs the `patch_size` in pixels); "none" has no table to resize.

    Raises:
        ValueError: an unknown kind, or `dynamic_image_size=True` with "sincos2d" (its
            table is fixed for one grid).
    """
    check_choice("position_embedding", kind, POSITION_EMBEDDINGS)
    if dynamic_image_size and kind == "sincos2d":
        raise ValueError(
            "dynamic_image_size=True needs position_embedding 'learned', 'none' or 'rope'. "
            f"Received: position_embedding={kind!r}"
        )
    if kind == "learned":
        if not dynamic_image_size:
            return AddPositionEmbs(name=name)
        return AddPositionEmbs(
            dynamic_image_size=True,
            grid_size=grid_size,
            patch_size=patch_size,
            num_prefix_tokens=num_prefix_tokens,
            name=name,
        )
    if kind == "sincos2d":
        return AddSinCosPositionEmbs(grid_size, num_prefix_tokens, name=name)
    return None


def rope_config(grid_size, num_prefix_tokens, patch_size=None) -> dict:
    """The attention layers' `rope` config for `position_embedding="rope"`: DINOv3's rotary
    embedding of a `grid_size` patch grid after `num_prefix_tokens` unrotated tokens; with
    `patch_size` (a dynamic image size) each call's images give the grid."""
    from keras_vit.layers.rotary import ROPE_TEMPERATURE, check_rope

    return check_rope(
        {
            "num_prefix_tokens": num_prefix_tokens,
            "grid_size": grid_size,
            "patch_size": patch_size,
            "temperature": ROPE_TEMPERATURE,
        }
    )
