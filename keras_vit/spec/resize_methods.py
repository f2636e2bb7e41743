"""The ways a position table is resized to a new patch grid, named once.

`keras_vit.layers.position_resize.resize_position_embeddings` implements them; the
checkpoint loaders, `from_checkpoint` and `keras-vit convert --resize-method` take their
names from here (a module without Keras, so the command's help starts no TensorFlow).
"""

from __future__ import annotations

# name -> what it is and whose it is (release, timm, transformers, facebookresearch/dinov2,
# transformers' Siglip2VisionModel)
RESIZE_METHOD_HELP = {
    "bilinear": "corner-aligned linear, the release's scipy.ndimage.zoom (default)",
    "bicubic": "half-pixel Keys cubic, antialiased when shrinking (timm's)",
    "torch_bicubic": "PyTorch's bicubic, no antialias (Hugging Face's)",
    "dinov2": "torch_bicubic with the original DINOv2's 0.1 offset",
    "bilinear_antialias": "half-pixel linear, antialiased when shrinking (SigLIP 2 NaFlex's)",
}
RESIZE_METHODS = tuple(RESIZE_METHOD_HELP)
