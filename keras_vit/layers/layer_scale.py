"""LayerScale: a learned per-channel gamma on a residual branch (Touvron et al. 2021).

"Going deeper with Image Transformers" (CaiT), section 2, used by DeiT III and DINOv2
(timm `LayerScale` in vision_transformer.py, `init_values`; HF `Dinov2LayerScale`,
`layerscale_value`).
"""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerScale(keras.layers.Layer):
    """Multiplies the last axis by a learned vector `scale` of shape `(hidden_dim,)`.

    The vector is initialised to `init_value` everywhere (CaiT uses 0.1 to 1e-6 by depth;
    DeiT III 1e-4 to 1e-6, DINOv2 1e-5) and stored in float32 (checkpoint key
    `.../LayerScale_1/scale` or `.../LayerScale_3/scale` inside a block).

    Args:
        init_value: the initial gamma, a positive float.
        **kwargs: `name`, `dtype`, `trainable`.

    Call arguments:
        x: `(..., hidden_dim)`.

    Returns:
        `x * scale`, in the input's dtype.

    Raises:
        ValueError: `init_value` not a positive number, or an unknown last axis at build.
    """

    def __init__(self, init_value=1e-5, **kwargs):
        super().__init__(**kwargs)
        self.init_value = check_layer_scale_init(init_value)

    def build(self, input_shape):
        if input_shape[-1] is None:
            raise ValueError(f"LayerScale needs a known last axis. Received: {input_shape}")
        self.scale = self.add_weight(
            name="scale",
            shape=(input_shape[-1],),
            initializer=keras.initializers.Constant(self.init_value),
        )

    def call(self, x):
        return x * ops.cast(self.scale, x.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "init_value": self.init_value}


def check_layer_scale_init(value) -> float:
    """`value` as a float when it is a positive finite number.

    Raises:
        ValueError: naming the value and the rule.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e30:
        raise ValueError(
            "`layer_scale_init` must be a positive number (e.g. 1e-5) or None. "
            f"Received: layer_scale_init={value!r}"
        )
    return float(value)
