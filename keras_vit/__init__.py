"""keras_vit: the Vision Transformer (Dosovitskiy et al., ICLR 2021) for Keras 3 / TensorFlow.

The public names are imported on first use (PEP 562 module `__getattr__`), so that
`import keras_vit` and `keras-vit --help` do not start TensorFlow. The layers are registered
with Keras' serialization as soon as Keras is imported too (keras_vit/_registration.py), so
`keras.models.load_model` reads `.keras` files of keras_vit models after `import keras_vit`.
"""

from __future__ import annotations

from keras_vit import _backend_check

# before anything else: an unknown KERAS_BACKEND or a missing backend package is one line
_backend_check.check_backend_on_import()

from keras_vit import _registration  # noqa: E402
from keras_vit._lazy import lazy_exports  # noqa: E402
from keras_vit._version import __version__ as __version__  # noqa: E402
from keras_vit.kernels import tf_allocator  # noqa: E402
from keras_vit.spec import configs  # noqa: E402

tf_allocator.prefer_bfc_cpu_allocator()  # before TensorFlow makes its CPU allocator

# public name -> the module that defines it ("" for a sub-package of the same name)
_EXPORTS = {
    "checkpoints": "",
    "configs": "keras_vit.spec",
    "data": "",
    "evaluate": "",
    "layers": "",
    "runtime": "",
    "train": "",
    "visualize": "",
    "load_weights": "keras_vit.checkpoints",
    "save_npz": "keras_vit.checkpoints",
    "export_saved_model": "keras_vit.export",
    "fewshot_evaluate": "keras_vit.evaluate.fewshot",
    "finetune": "keras_vit.model.finetune",
    "from_checkpoint": "keras_vit.model.from_kwargs",
    "HybridViT": "keras_vit.model.hybrid",
    "ViT": "keras_vit.model.vit",
    "DINOv3": "keras_vit.model.dinov3",
    "DINOv3_S16": "keras_vit.model.dinov3",
    "DINOv3_B16": "keras_vit.model.dinov3",
    "DINOv3_L16": "keras_vit.model.dinov3",
    "DINOv3_Hplus16": "keras_vit.model.dinov3",
    "DINOv3_7B16": "keras_vit.model.dinov3",
    "resize_position_embeddings": "keras_vit.layers.position_resize",
    "preprocess_inputs": "keras_vit.data.preprocess",
    "attention_maps": "keras_vit.visualize",
    "attention_rollout": "keras_vit.visualize",
    "feature_extractor": "keras_vit.visualize",
    "mean_attention_distance": "keras_vit.visualize",
    "WeightsWarning": "keras_vit._warnings",
    # the named shortcuts, one per row of the size table: ViT_B16 ..., R50_B16 ...
    **{configs.builder_name(v): "keras_vit.model.vit" for v in configs.VIT_CONFIGS},
    **{configs.builder_name(v): "keras_vit.model.hybrid" for v in configs.HYBRID_CONFIGS},
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


# Layers register with Keras' serialization once Keras is imported (for .keras loading).
_registration.register_layers_with_keras()
