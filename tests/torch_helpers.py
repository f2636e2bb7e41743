"""Helpers of the PyTorch lane's tests (tests marked `pytorch`, which import torch first)."""

from __future__ import annotations


def randomise_torch(module, seed=0):
    """`module` (a torch.nn.Module) with every parameter drawn from N(0, 0.2^2), seeded, and put
    in eval mode: library-made models start with zero heads and unit norms, which would hide a
    mapped-wrong weight."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2)
    return module.eval()
