"""The tiny ViT config of the user reports (../shared/cases/user_reports.md), defined once:
conftest's `tiny_vit_kwargs` and `numpy_reference.tiny_official_params` build on it. No
imports, so conftest can load it in every environment."""

TINY_ARCH = dict(
    image_size=32,
    patch_size=8,
    channels=3,
    hidden_dim=32,
    num_heads=4,
    mlp_dim=64,
    num_layers=2,
    num_classes=10,
)
