"""Learned 1-D position embeddings added to the token sequence (paper section 3.1, eq. 1)."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit.layers.position_table_ops import resize_table


@keras.saving.register_keras_serializable(package="keras_vit")
class AddPositionEmbs(keras.layers.Layer):
    """Adds a learned table of shape `(1, num_tokens, hidden_dim)` to the tokens.

    The table (checkpoint key `Transformer/posembed_input/pos_embedding`) holds one row per
    token, class token first when the model has one. It is stored in float32 and cast to the
    compute dtype of the input. To use a model at another resolution, the table is resized
    once, outside the graph, with `keras_vit.resize_position_embeddings`.

    With `dynamic_image_size=True` the table is stored for `grid_size` (plus
    `num_prefix_tokens` rows) and resized in the forward pass to the grid of each call's
    images (corner-aligned bilinear, `keras_vit.layers.position_table_ops`), which equals a
    model rebuilt at that size and loaded with `keras_vit.resize_position_embeddings`.

    Args:
        initializer: default normal with stddev 0.02, as in the release.
        dynamic_image_size: resize the table to the input's grid in the forward pass.
        grid_size: (rows, cols) the table is stored for (dynamic only).
        patch_size: (height, width) of a patch in pixels (dynamic only).
        num_prefix_tokens: rows before the grid, 1 with a class token (dynamic only).
        **kwargs: `name`, `dtype`, `trainable`.

    Call arguments:
        tokens: `(batch, num_tokens, hidden_dim)` with `num_tokens` fixed at build time
            (any length when dynamic).
        images: the model's input images `(batch, height, width, channels)`, whose size
            gives the grid (dynamic only).

    Returns:
        `(batch, num_tokens, hidden_dim)` in the input's dtype.

    Raises:
        ValueError: if the sequence length or width is unknown at build time, or a call's
            sequence length differs from the table's.
    """

    def __init__(
        self,
        initializer=None,
        dynamic_image_size=False,
        grid_size=None,
        patch_size=None,
        num_prefix_tokens=0,
        **kwargs,
    ):
        super().__init__(**kwargs)
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
            table = resize_table(self.pos_embedding, self.grid_size, grid, self.num_prefix_tokens)
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
        }
