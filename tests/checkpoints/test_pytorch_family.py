"""Optional lane (`-m pytorch`): the ViT family against its source libraries' own models.

For each family member, random weights in the SOURCE library's model (timm.create_model(...,
pretrained=False) with tiny sizes; a transformers config with tiny sizes), saved in that
library's own format (timm's `save_for_hf`: model.safetensors + config.json; transformers'
`save_pretrained`), read by keras_vit: its forward pass must match the library's in float32
at the file's image size and at a larger one (position table interpolated as the library
does it: timm's `dynamic_img_size` = keras_vit's "bicubic", transformers'
`interpolate_pos_encoding` = "torch_bicubic", DINOv2 with registers' antialiased bicubic =
"bicubic"), within 1e-5 on the logits or pooled features. keras_vit then writes the file
back; the library loads it strictly (`load_state_dict(strict=True)`, `from_pretrained` with
no missing / unexpected keys) and reproduces the outputs within 1e-5.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints import model_contents, write_checkpoint
from tests.torch_helpers import randomise_torch

pytestmark = pytest.mark.pytorch
torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

TOLERANCE = 1e-5
SIZE, BIG, PATCH, WIDTH, HEADS, CLASSES = 28, 42, 7, 32, 4, 5
TINY_TIMM = dict(
    img_size=SIZE, patch_size=PATCH, embed_dim=WIDTH, depth=2, num_heads=HEADS, mlp_ratio=2.0
)
# timm architecture -> its head (classes; 0: pooled features).
TIMM_FAMILY = {
    "deit_tiny_patch16_224": CLASSES,
    "deit_tiny_distilled_patch16_224": CLASSES,
    "deit3_small_patch16_224": CLASSES,
    "vit_small_patch14_dinov2": 0,
    "vit_small_patch14_reg4_dinov2": 0,
    "vit_base_patch16_clip_224": CLASSES,
    "vit_base_patch16_clip_quickgelu_224": 0,
}


def _check(case, got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (case, got.shape, want.shape)
    assert np.abs(want).max() > 1e-2, f"{case}: the reference output is ~0"
    diff = float(np.abs(got - want).max())
    print(f"FIGURE {case} max|diff|={diff:.3g} (atol {TOLERANCE:g})")
    assert diff <= TOLERANCE, (case, diff)


def _images(size, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


def _torch(module, images, **kwargs):
    with torch.no_grad():
        out = module(torch.from_numpy(images.transpose(0, 3, 1, 2).copy()), **kwargs)
    if hasattr(out, "logits"):
        return out.logits.numpy()
    if getattr(out, "pooler_output", None) is not None:
        return out.pooler_output.numpy()
    if hasattr(out, "last_hidden_state"):  # DeiTModel without its pooler: the class token
        return out.last_hidden_state[:, 0].numpy()
    return out.numpy()


def _keras(model, images):
    return np.asarray(model(images, training=False))


# ------------------------------------------------------------------ timm


def _timm(name, size=SIZE, **kwargs):
    kwargs = dict(TINY_TIMM, img_size=size, num_classes=TIMM_FAMILY[name], **kwargs)
    return timm.create_model(name, pretrained=False, **kwargs).eval()


def _save_timm(model, folder, name, size=SIZE, patch=PATCH):
    """timm's own hub format; the config's input size is the tiny model's (as in real files,
    where `pretrained_cfg.input_size` is the model's)."""
    args = dict(TINY_TIMM, img_size=size, patch_size=patch)
    timm.models.save_for_hf(model, str(folder), model_args=args, safe_serialization=True)
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    assert config["architecture"] == name
    config["pretrained_cfg"]["input_size"] = [3, size, size]
    config_path.write_text(json.dumps(config))
    return folder / "model.safetensors"


@pytest.mark.parametrize("name", sorted(TIMM_FAMILY))
def test_timm_family_reads_and_writes_back(tmp_path, name):
    reference = randomise_torch(_timm(name))
    path = _save_timm(reference, tmp_path / "timm", name)
    model = keras_vit.from_checkpoint(path)
    x = _images(SIZE)
    want = _torch(reference, x)
    _check(f"timm-{name}-{SIZE}", _keras(model, x), want)

    dynamic = _timm(name, dynamic_img_size=True)
    dynamic.load_state_dict(reference.state_dict())
    big = keras_vit.from_checkpoint(path, image_size=BIG, resize_method="bicubic")
    x_big = _images(BIG)
    _check(f"timm-{name}-{BIG}-dynamic_img_size", _keras(big, x_big), _torch(dynamic, x_big))

    back = tmp_path / "back.safetensors"
    write_checkpoint(model_contents(model), back, "timm")
    loaded = _timm(name)
    loaded.load_state_dict(safetensors_torch.load_file(str(back)), strict=True)
    _check(f"keras_vit->timm-{name}", _torch(loaded, x), want)


def test_timm_dinov2_written_as_hugging_face_loads_in_transformers(tmp_path):
    """Across libraries: timm's DINOv2 read by keras_vit, written as a HF Dinov2Model."""
    reference = randomise_torch(_timm("vit_small_patch14_dinov2"))
    model = keras_vit.from_checkpoint(
        _save_timm(reference, tmp_path / "timm", "vit_small_patch14_dinov2")
    )
    write_checkpoint(model_contents(model), tmp_path / "hf", "hf")
    loaded, info = transformers.Dinov2Model.from_pretrained(
        tmp_path / "hf", output_loading_info=True
    )
    assert not any(info.values()), info
    x = _images(SIZE)
    _check("timm-dinov2->hf", _torch(loaded.eval(), x), _torch(reference, x))


# ------------------------------------------------------------------ Hugging Face


def _hf_config(model_type, **kwargs):
    sizes = dict(
        hidden_size=WIDTH,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        image_size=SIZE,
        patch_size=PATCH,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    if model_type == "deit":
        return transformers.DeiTConfig(
            intermediate_size=2 * WIDTH, num_labels=CLASSES, **sizes, **kwargs
        )
    if model_type == "dinov2":
        return transformers.Dinov2Config(mlp_ratio=2, **sizes, **kwargs)
    return transformers.Dinov2WithRegistersConfig(
        mlp_ratio=2, num_register_tokens=4, **sizes, **kwargs
    )


# case -> (model class, config model type, keras_vit resize method of its interpolation,
# config kwargs). "deit-model" is built and loaded with add_pooling_layer=False (a config.json
# cannot say whether a pooler is present); "deit-model-pooler" has DeiTModel's default pooler
# (24 wide: `pooler_output_size`), keras_vit's pre_logits of a distilled feature model.
# DeiTForImageClassification: one classifier on the class token beside the distillation
# token (keras_vit's distillation_head=False).
HF_FAMILY = {
    "deit-with-teacher": ("DeiTForImageClassificationWithTeacher", "deit", "torch_bicubic", {}),
    "deit-classification": ("DeiTForImageClassification", "deit", "torch_bicubic", {}),
    "deit-model": ("DeiTModel", "deit", "torch_bicubic", {}),
    "deit-model-pooler": ("DeiTModel", "deit", "torch_bicubic", {"pooler_output_size": 24}),
    "dinov2": ("Dinov2Model", "dinov2", "torch_bicubic", {}),
    "dinov2-quick_gelu": ("Dinov2Model", "dinov2", "torch_bicubic", {"hidden_act": "quick_gelu"}),
    "dinov2-registers": ("Dinov2WithRegistersModel", "dinov2_with_registers", "bicubic", {}),
}


def _interpolating(cls_name):
    """DeiT interpolates only when asked; DINOv2 always does."""
    return {"interpolate_pos_encoding": True} if cls_name.startswith("DeiT") else {}


@pytest.mark.parametrize("case", sorted(HF_FAMILY))
def test_hugging_face_family_reads_and_writes_back(tmp_path, case):
    cls_name, model_type, method, extra = HF_FAMILY[case]
    cls = getattr(transformers, cls_name)
    pooler = {"add_pooling_layer": False} if case == "deit-model" else {}
    reference = randomise_torch(cls(_hf_config(model_type, **extra), **pooler))
    reference.save_pretrained(tmp_path / "hf")
    model = keras_vit.from_checkpoint(tmp_path / "hf")
    x = _images(SIZE)
    want = _torch(reference, x)
    _check(f"hf-{case}-{SIZE}", _keras(model, x), want)

    big = keras_vit.from_checkpoint(tmp_path / "hf", image_size=BIG, resize_method=method)
    x_big = _images(BIG)
    _check(
        f"hf-{case}-{BIG}-interpolate_pos_encoding",
        _keras(big, x_big),
        _torch(reference, x_big, **_interpolating(cls_name)),
    )

    write_checkpoint(model_contents(model), tmp_path / "back", "hf")
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert (config["model_type"], config["architectures"]) == (model_type, [cls_name])
    loaded, info = cls.from_pretrained(tmp_path / "back", output_loading_info=True, **pooler)
    assert not any(info.values()), info
    _check(f"keras_vit->hf-{case}", _torch(loaded.eval(), x), want)
    assert os.path.isfile(tmp_path / "back" / "model.safetensors")


@pytest.mark.parametrize("library", ["timm", "hf", "hf-registers"])
def test_dinov2_at_518_used_at_224(tmp_path, library):
    """DINOv2's own sizes: patch 14, a 37x37 table (518 px) used at 224 px (16x16), where
    timm's antialiased bicubic and transformers 5's plain bicubic part ways (shrinking)."""
    x = _images(224)
    if library == "timm":
        kwargs = dict(TINY_TIMM, img_size=518, patch_size=14, num_classes=0)
        reference = randomise_torch(timm.create_model("vit_small_patch14_dinov2", **kwargs))
        path = _save_timm(
            reference, tmp_path / "timm", "vit_small_patch14_dinov2", size=518, patch=14
        )
        dynamic = timm.create_model("vit_small_patch14_dinov2", dynamic_img_size=True, **kwargs)
        dynamic.load_state_dict(reference.state_dict())
        model = keras_vit.from_checkpoint(path, image_size=224, resize_method="bicubic")
        want = _torch(dynamic.eval(), x)
    else:
        registers = library == "hf-registers"
        model_type = "dinov2_with_registers" if registers else "dinov2"
        cls = transformers.Dinov2WithRegistersModel if registers else transformers.Dinov2Model
        config = _hf_config(model_type)
        config.image_size, config.patch_size = 518, 14
        reference = randomise_torch(cls(config))
        reference.save_pretrained(tmp_path / "hf")
        method = "bicubic" if registers else "torch_bicubic"
        model = keras_vit.from_checkpoint(tmp_path / "hf", image_size=224, resize_method=method)
        want = _torch(reference, x)
    _check(f"{library}-dinov2-518->224", _keras(model, x), want)
