"""Hugging Face ViT folders (`config.json`, `model.safetensors`, `preprocessor_config.json`):
file names (`hf_files`), the plain ViT reader and writer (`hf_io`) and the family's extra
tensors (`hf_family`: DeiT, DINOv2), SigLIP towers (`hf_siglip`) and DINOv3 (`hf_dinov3`).
Imports `base/` only (never `timm/`)."""
