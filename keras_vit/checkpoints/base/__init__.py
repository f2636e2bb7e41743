"""The pieces every checkpoint format shares: `CheckpointError` (`errors`), hostile-file
limits (`limits`), the `.npz` and `.safetensors` containers (`npz_io`, `safetensors_io`), the
release's flat key names (`naming`, `quantized`), `CheckpointContents` (`contents`), what a
model or file is (`architecture`), input-channel adaptation (`channels`) and the PyTorch
layouts and release-style key names the Hugging Face and timm formats share (`torch_layout`,
the attention-pooling head: `map_head`; DINOv3: `dinov3`).
Imports nothing else from `keras_vit.checkpoints`."""
