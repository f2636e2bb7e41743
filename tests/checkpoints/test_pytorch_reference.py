"""Optional lane: real random `transformers` and `timm` models, saved as safetensors, loaded
here, logits compared with the PyTorch forward pass (at the file's resolution and a larger
one). Skipped unless torch, transformers and timm are installed; run with `-m pytorch`."""

from __future__ import annotations

import numpy as np
import pytest

import keras_vit

pytestmark = pytest.mark.pytorch
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")
safetensors_torch = pytest.importorskip("safetensors.torch")

SIZE, BIG = 32, 48


def _randomise(module, seed=0):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2)
    return module.eval()


def _images(size, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


def _torch_logits(module, images, **kwargs):
    with torch.no_grad():
        out = module(torch.from_numpy(images.transpose(0, 3, 1, 2)), **kwargs)
    return (out.logits if hasattr(out, "logits") else out).numpy()


def _table(model):
    return torch.from_numpy(np.asarray(model.get_layer("posembed_input").pos_embedding))


def _hf_config(image_size):
    return transformers.ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        image_size=image_size,
        patch_size=8,
        num_labels=10,
        layer_norm_eps=1e-12,
    )


def test_transformers_vit_matches_pytorch(tmp_path):
    reference = _randomise(transformers.ViTForImageClassification(_hf_config(SIZE)))
    reference.save_pretrained(tmp_path / "hf", safe_serialization=True)
    model = keras_vit.from_checkpoint(tmp_path / "hf")
    x = _images(SIZE)
    np.testing.assert_allclose(
        model.predict(x, verbose=0), _torch_logits(reference, x), atol=1e-4, rtol=0
    )
    big = keras_vit.from_checkpoint(tmp_path / "hf", image_size=BIG)
    state = reference.state_dict()
    state["vit.embeddings.position_embeddings"] = _table(big)
    at_big = transformers.ViTForImageClassification(_hf_config(BIG)).eval()
    at_big.load_state_dict(state)
    x = _images(BIG)
    np.testing.assert_allclose(
        big.predict(x, verbose=0), _torch_logits(at_big, x), atol=1e-4, rtol=0
    )


@pytest.mark.parametrize("class_token", [True, False], ids=["token", "gap"])
def test_timm_vit_matches_pytorch(tmp_path, class_token):
    kwargs = dict(patch_size=8, embed_dim=32, depth=2, num_heads=4, mlp_ratio=2.0, num_classes=10)
    kwargs.update(class_token=class_token, global_pool="token" if class_token else "avg")
    if not class_token:
        kwargs["fc_norm"] = False
    reference = _randomise(timm.models.VisionTransformer(img_size=SIZE, **kwargs))
    path = tmp_path / "timm.safetensors"
    safetensors_torch.save_file(reference.state_dict(), str(path))
    model = keras_vit.from_checkpoint(path, num_heads=4)
    x = _images(SIZE)
    np.testing.assert_allclose(
        model.predict(x, verbose=0), _torch_logits(reference, x), atol=1e-4, rtol=0
    )
    big = keras_vit.from_checkpoint(path, num_heads=4, image_size=BIG)
    at_big = timm.models.VisionTransformer(img_size=BIG, **kwargs).eval()
    state = reference.state_dict()
    state["pos_embed"] = _table(big)
    at_big.load_state_dict(state)
    x = _images(BIG)
    np.testing.assert_allclose(
        big.predict(x, verbose=0), _torch_logits(at_big, x), atol=1e-4, rtol=0
    )
