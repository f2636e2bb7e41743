"""Hugging Face ViT folders (`config.json`, `model.safetensors`, `preprocessor_config.json`):
file names (`hf_files`), the plain ViT reader and writer (`hf_io`) and the family's extra
tensors (`hf_family`: DeiT, DINOv2). Imports `base/` only (never `timm/`)."""
