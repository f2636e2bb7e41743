"""Under KERAS_BACKEND=torch: a timm ViT (random weights, tiny sizes, non-square input) read
by keras_vit, whose attention layers pick the fused kernel at build time and reach PyTorch's
`scaled_dot_product_attention`; logits compared with timm's own forward (float32) and the
explicit kernel's. Prints one "RESULT {json}" line (tests/backends/test_torch.py)."""

from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np


def main(workdir: str) -> dict:
    import keras
    import timm
    import torch
    import torch.nn.functional as F
    from safetensors.torch import save_file

    import keras_vit

    calls = {"sdpa": 0}
    sdpa = F.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls["sdpa"] += 1
        return sdpa(*args, **kwargs)

    F.scaled_dot_product_attention = counting
    torch.manual_seed(0)
    args = dict(img_size=(24, 20), patch_size=4, embed_dim=32, depth=2, num_heads=4)
    reference = timm.models.vision_transformer.VisionTransformer(num_classes=5, **args).eval()
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.copy_(torch.randn(parameter.shape) * 0.2)
    path = os.path.join(workdir, "timm.safetensors")
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, path)
    x = np.random.default_rng(1).uniform(-1, 1, (2, 24, 20, 3)).astype("float32")
    with torch.no_grad():
        want = reference(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).numpy()
    model = keras_vit.from_checkpoint(path, image_size=(24, 20), num_heads=4)
    attention = [layer for layer in model._flatten_layers() if hasattr(layer, "attention_kernel")]
    kernels = sorted({layer.attention_kernel for layer in attention})
    calls["sdpa"] = 0
    got = keras.ops.convert_to_numpy(model(x))
    fused_calls = calls["sdpa"]
    for layer in attention:
        layer.attention_kernel = "explicit"
    explicit = keras.ops.convert_to_numpy(model(x))
    return {
        "backend": keras.backend.backend(),
        "kernels": kernels,
        "attention_layers": len(attention),
        "sdpa_calls_fused": fused_calls,
        "sdpa_calls_explicit": calls["sdpa"] - fused_calls,
        "fused_vs_timm": float(np.abs(got - want).max()),
        "explicit_vs_timm": float(np.abs(explicit - want).max()),
        "logits_std": float(want.std()),
    }


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        print("RESULT " + json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else folder)))
