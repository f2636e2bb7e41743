"""What DINOv3's two file layouts share: timm's (its EVA model with `rope_type="dinov3"`,
`keras_vit.checkpoints.timm.timm_dinov3`) and Hugging Face's `DINOv3ViTModel`
(`keras_vit.checkpoints.hf.hf_dinov3`).

Both hold no position table: DINOv3 rotates the patch tokens' queries and keys
(`position_embedding="rope"`, `keras_vit.layers.rotary`), which the readers record in
`CheckpointContents.position_embedding`. Both have storage (register) tokens after the class
token, LayerScale, GELU and LayerNorm eps 1e-5, and neither a distillation token, `norm_pre`,
`fc_norm`, a MAP head nor a pre-logits layer (`check_dinov3_model`).
"""

from __future__ import annotations

from keras_vit.checkpoints.base import torch_layout as tl
from keras_vit.checkpoints.base.contents import CheckpointContents
from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.spec import layer_names as names

ROPE = "rope"
EPSILON = 1e-5  # timm's DINOv3 `norm_layer=partial(LayerNorm, eps=1e-5)`, HF's default
LAYER_SCALES = (names.LAYER_SCALE_ATTENTION, names.LAYER_SCALE_MLP)
NORMS = {"norm1": "LayerNorm_0", "norm2": "LayerNorm_2"}
QKV = ("query", "key", "value")


def check_dinov3_model(contents: CheckpointContents, what: str) -> None:
    """Refuses a RoPE model that no DINOv3 file layout holds: without a class token, with a
    distillation token, `norm_pre`, `fc_norm`, a MAP head or `pre_logits`.

    Raises:
        CheckpointError: naming each such part and `what` (the format).
    """
    arrays = contents.arrays
    problems = [
        text
        for present, text in (
            ("cls" not in arrays, "no class token (pooling 'gap')"),
            (names.DIST_TOKEN in arrays, "a distillation token"),
            (names.NORM_PRE_KEY in arrays, "norm_pre"),
            (tl.POOLED_NORM + "scale" in arrays, "final_norm='pooled' (fc_norm)"),
            (f"{names.MAP_HEAD}/probe" in arrays, "a MAP head"),
            ("pre_logits/kernel" in arrays, "pre_logits"),
        )
        if present
    ]
    if problems:
        raise CheckpointError(
            f"{what} holds a DINOv3 ViT (class token, storage tokens, RoPE); this model has "
            f"{', '.join(problems)}. Write it as keras."
        )
