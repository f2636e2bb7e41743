"""keras_vit: the Vision Transformer (Dosovitskiy et al., ICLR 2021) for Keras 3 / TensorFlow."""

from keras_vit import checkpoints, configs, data, distribute, layers, runs, training
from keras_vit._version import __version__ as __version__
from keras_vit.checkpoints import load_npz, save_npz
from keras_vit.checkpoints.from_checkpoint import from_checkpoint
from keras_vit.export import export_saved_model
from keras_vit.finetune import finetune
from keras_vit.hybrid import R26_B32, R26_S32, R50_B16, R50_L32, HybridViT, R_Ti16
from keras_vit.models import (
    ViT,
    ViT_B8,
    ViT_B16,
    ViT_B32,
    ViT_H14,
    ViT_L16,
    ViT_L32,
    ViT_S16,
    ViT_S32,
    ViT_Ti16,
)
from keras_vit.position_embeddings import resize_position_embeddings
from keras_vit.preprocessing import preprocess_inputs
from keras_vit.visualize import (
    attention_maps,
    attention_rollout,
    feature_extractor,
    mean_attention_distance,
)

__all__ = [
    "HybridViT",
    "R26_B32",
    "R26_S32",
    "R50_B16",
    "R50_L32",
    "R_Ti16",
    "ViT",
    "ViT_B8",
    "ViT_B16",
    "ViT_B32",
    "ViT_H14",
    "ViT_L16",
    "ViT_L32",
    "ViT_S16",
    "ViT_S32",
    "ViT_Ti16",
    "checkpoints",
    "configs",
    "data",
    "distribute",
    "finetune",
    "from_checkpoint",
    "load_npz",
    "resize_position_embeddings",
    "save_npz",
    "export_saved_model",
    "layers",
    "training",
    "preprocess_inputs",
    "runs",
    "attention_maps",
    "attention_rollout",
    "feature_extractor",
    "mean_attention_distance",
]
