"""timm state dicts (`.safetensors`): the reader and writer (`timm_io`), the key map
(`timm_map`), the options a file states (`timm_options`) and the ViT family's extra tensors
(`timm_family`: DeiT, DeiT III, DINOv2, CLIP). Imports `base/` only (never `hf/`)."""
