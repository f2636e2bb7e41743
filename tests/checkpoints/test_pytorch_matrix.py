"""Optional lane (`-m pytorch`): the draws of test_matrix.py against timm's and
transformers' own forward passes. A keras_vit model drawn over the option space is written
as a timm state dict / a Hugging Face folder and loaded by the library itself
(`timm.models.VisionTransformer(...).load_state_dict(strict=True)`,
`transformers.ViT*.from_pretrained`); outputs must agree within 1e-5. Draws a format cannot
express are refused by keras_vit's writer (test_matrix.py checks that); draws the library
has no constructor argument for (timm 1.x has no `representation_size`) are skipped here.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given

import keras_vit
from keras_vit.checkpoints import model_contents, write_checkpoint
from tests.checkpoints.random_models import images_for, logits, randomise
from tests.checkpoints.test_matrix import architectures, expected_refusals

pytestmark = pytest.mark.pytorch
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")
safetensors_torch = pytest.importorskip("safetensors.torch")

TOLERANCE = 1e-5


def _nchw(images):
    return torch.from_numpy(images.transpose(0, 3, 1, 2).copy())


def _timm_model(kwargs):
    """timm's VisionTransformer with the draw's options (eps 1e-6: timm's; the tanh GELU as
    `act_layer="gelu_tanh"`, attention pooling as `global_pool="map"`)."""
    token = kwargs["pooling"] == "token"
    return timm.models.vision_transformer.VisionTransformer(
        img_size=kwargs["image_size"],
        patch_size=kwargs["patch_size"],
        in_chans=kwargs["channels"],
        num_classes=kwargs["num_classes"] if kwargs["include_top"] else 0,
        global_pool={"token": "token", "gap": "avg", "map": "map"}[kwargs["pooling"]],
        act_layer="gelu_tanh" if kwargs["gelu_approximate"] else "gelu",
        class_token=token,
        fc_norm=kwargs["final_norm"] == "pooled",
        embed_dim=kwargs["hidden_dim"],
        depth=kwargs["num_layers"],
        num_heads=kwargs["num_heads"],
        mlp_ratio=kwargs["mlp_dim"] / kwargs["hidden_dim"],
    ).eval()


def _check_timm(model, kwargs, folder, x, expected):
    path = os.path.join(folder, "m.safetensors")
    write_checkpoint(model_contents(model), path, "timm")
    reference = _timm_model(kwargs)
    reference.load_state_dict(safetensors_torch.load_file(path), strict=True)
    with torch.no_grad():
        got = reference(_nchw(x)).numpy()
    np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=0, err_msg="timm")


def _check_hf(model, kwargs, folder, x, expected):
    path = os.path.join(folder, "hf")
    write_checkpoint(model_contents(model), path, "hf")
    if kwargs["pooling"] == "map":  # written as a SigLIP tower (no head: test_matrix refuses one)
        reference = transformers.SiglipVisionModel.from_pretrained(path).eval()
        with torch.no_grad():
            got = reference(pixel_values=_nchw(x)).pooler_output.numpy()
        np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=0, err_msg="hf")
        return
    if kwargs["include_top"]:
        reference = transformers.ViTForImageClassification.from_pretrained(path).eval()
    else:
        pooler = kwargs["representation_size"] is not None
        reference = transformers.ViTModel.from_pretrained(path, add_pooling_layer=pooler).eval()
    with torch.no_grad():
        out = reference(_nchw(x))
    if kwargs["include_top"]:
        got = out.logits.numpy()
    elif kwargs["representation_size"] is not None:
        got = out.pooler_output.numpy()
    else:
        got = out.last_hidden_state[:, 0].numpy()
    np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=0, err_msg="hf")


@given(kwargs=architectures())
def test_drawn_models_match_timm_and_transformers(tmp_path_factory, kwargs):
    folder = str(tmp_path_factory.mktemp("torch_matrix"))
    model = randomise(keras_vit.ViT(**kwargs), seed=2)
    x = images_for(model)
    expected = logits(model, x)
    refused = expected_refusals(kwargs)
    if "timm" not in refused and kwargs["representation_size"] is None:
        _check_timm(model, kwargs, folder, x, expected)
    if "hf" not in refused:
        _check_hf(model, kwargs, folder, x, expected)
