"""Optional lane (`-m pytorch`): SigLIP and SigLIP 2 image towers against timm's and
transformers' own models.

Random weights in the source library's model (tiny sizes), saved in its own format (timm's
`save_for_hf`; transformers' `save_pretrained`), read by keras_vit: the forward pass must match
the library's within 1e-5. keras_vit then writes the file back; the library loads it strictly
and reproduces the outputs within 1e-5. The towers: timm's `*_siglip_*` (attention pooling,
`global_pool="map"`) and `*_siglip_gap_*` (`global_pool="avg"`), with the exact GELU (SigLIP)
and the tanh one (`act_layer="gelu_tanh"`: SigLIP 2, said by `model_args` or known from the
architecture's definition).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints import model_contents, write_checkpoint
from tests.torch_helpers import randomise_torch

pytestmark = pytest.mark.pytorch
torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
safetensors_torch = pytest.importorskip("safetensors.torch")

TOLERANCE = 1e-5
SIZE, PATCH, WIDTH, HEADS, CLASSES = 28, 7, 32, 4, 5
TINY_TIMM = dict(
    img_size=SIZE, patch_size=PATCH, embed_dim=WIDTH, depth=2, num_heads=HEADS, mlp_ratio=2.0
)


def _check(case, got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (case, got.shape, want.shape)
    assert np.abs(want).max() > 1e-2, f"{case}: the reference output is ~0"
    diff = float(np.abs(got - want).max())
    print(f"FIGURE {case} max|diff|={diff:.3g} (atol {TOLERANCE:g})")
    assert diff <= TOLERANCE, (case, diff)


def _images(size=SIZE, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


def _torch(module, images):
    with torch.no_grad():
        return module(torch.from_numpy(images.transpose(0, 3, 1, 2).copy())).numpy()


# case -> (timm architecture, extra model_args, classes (0: pooled features), act_layer the
# model runs).
TIMM_SIGLIP = {
    "siglip2-map-architecture": ("vit_so400m_patch16_siglip_256", {}, CLASSES, "gelu_tanh"),
    "siglip2-gap-architecture": ("vit_so400m_patch16_siglip_gap_256", {}, 0, "gelu_tanh"),
    "siglip2-map-model_args": (
        "vit_base_patch16_siglip_224",
        {"act_layer": "gelu_tanh"},
        CLASSES,
        "gelu_tanh",
    ),
    "siglip-map-exact": ("vit_so400m_patch14_siglip_224", {}, 0, "gelu"),
}


@pytest.mark.parametrize("case", sorted(TIMM_SIGLIP))
def test_timm_siglip_towers_read_and_write_back(tmp_path, case):
    name, extra, classes, act_layer = TIMM_SIGLIP[case]
    args = dict(TINY_TIMM, **extra)
    reference = randomise_torch(
        timm.create_model(name, pretrained=False, num_classes=classes, **args)
    )
    assert reference.blocks[0].mlp.act.__class__.__name__ == (
        "GELUTanh" if act_layer == "gelu_tanh" else "GELU"
    )
    timm.models.save_for_hf(
        reference, str(tmp_path / "timm"), model_args=args, safe_serialization=True
    )
    config_path = tmp_path / "timm" / "config.json"
    config = json.loads(config_path.read_text())
    config["pretrained_cfg"]["input_size"] = [3, SIZE, SIZE]  # the tiny model's, as real files
    config_path.write_text(json.dumps(config))
    model = keras_vit.from_checkpoint(tmp_path / "timm" / "model.safetensors")
    assert model.get_layer("encoderblock_0").gelu_approximate == (act_layer == "gelu_tanh")
    x = _images()
    want = _torch(reference, x)
    _check(f"timm-{case}", np.asarray(model(x, training=False)), want)

    back = tmp_path / "back.safetensors"
    write_checkpoint(model_contents(model), back, "timm")
    loaded = timm.create_model(name, pretrained=False, num_classes=classes, **args).eval()
    loaded.load_state_dict(safetensors_torch.load_file(str(back)), strict=True)
    _check(f"keras_vit->timm-{case}", _torch(loaded, x), want)


# ------------------------------------------------------------------ Hugging Face

transformers = pytest.importorskip("transformers")
# model type -> (model class, config class)
HF_SIGLIP = {
    "siglip_vision_model": ("SiglipVisionModel", "SiglipVisionConfig"),
    "siglip2_vision_model": ("Siglip2VisionModel", "Siglip2VisionConfig"),
}


def _hf_tower(model_type, **kwargs):
    cls_name, config_name = HF_SIGLIP[model_type]
    sizes = dict(hidden_size=WIDTH, intermediate_size=2 * WIDTH, num_hidden_layers=2)
    sizes.update(num_attention_heads=HEADS, patch_size=PATCH, **kwargs)
    if model_type == "siglip2_vision_model":
        sizes["num_patches"] = (SIZE // PATCH) ** 2
    else:
        sizes["image_size"] = SIZE
    config = getattr(transformers, config_name)(**sizes)
    return randomise_torch(getattr(transformers, cls_name)(config))


def _hf_pooled(module, model_type, images):
    """The tower's pooled output; SigLIP 2 takes patches flattened row, column, channel
    (transformers' `convert_image_to_patches`), all of one image valid."""
    pixels = torch.from_numpy(images.transpose(0, 3, 1, 2).copy())
    with torch.no_grad():
        if model_type == "siglip_vision_model":
            return module(pixel_values=pixels).pooler_output.numpy()
        b, c, h, w = pixels.shape
        grid = (h // PATCH, w // PATCH)
        patches = pixels.reshape(b, c, grid[0], PATCH, grid[1], PATCH).permute(0, 2, 4, 3, 5, 1)
        patches = patches.reshape(b, grid[0] * grid[1], -1)
        mask = torch.ones(b, grid[0] * grid[1], dtype=torch.int32)
        shapes = torch.tensor([grid] * b)
        out = module(pixel_values=patches, pixel_attention_mask=mask, spatial_shapes=shapes)
        return out.pooler_output.numpy()


@pytest.mark.parametrize("hidden_act", ["gelu_pytorch_tanh", "gelu"])
@pytest.mark.parametrize("model_type", sorted(HF_SIGLIP))
def test_hugging_face_siglip_towers_read_and_write_back(tmp_path, model_type, hidden_act):
    from keras_vit.checkpoints.hf.hf_siglip import write_siglip

    reference = _hf_tower(model_type, hidden_act=hidden_act)
    reference.save_pretrained(tmp_path / "hf")
    model = keras_vit.from_checkpoint(tmp_path / "hf")
    assert model.get_layer("encoderblock_0").gelu_approximate == (hidden_act != "gelu")
    x = _images()
    want = _hf_pooled(reference, model_type, x)
    _check(f"hf-{model_type}-{hidden_act}", np.asarray(model(x, training=False)), want)

    write_siglip(tmp_path / "back", model_contents(model), model_type)
    cls = getattr(transformers, HF_SIGLIP[model_type][0])
    loaded, info = cls.from_pretrained(tmp_path / "back", output_loading_info=True)
    assert not any(info.values()), info
    _check(
        f"keras_vit->hf-{model_type}-{hidden_act}", _hf_pooled(loaded.eval(), model_type, x), want
    )


def test_a_whole_siglip_model_folder_reads_its_image_tower(tmp_path):
    """`SiglipModel.save_pretrained` (image and text towers, `vision_model.` keys, the
    tower's config under `vision_config`): keras_vit reads the image tower alone."""
    vision = dict(hidden_size=WIDTH, intermediate_size=2 * WIDTH, num_hidden_layers=2)
    vision.update(num_attention_heads=HEADS, patch_size=PATCH, image_size=SIZE)
    text = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    config = transformers.SiglipConfig(vision_config=vision, text_config=text)
    reference = randomise_torch(transformers.SiglipModel(config))
    reference.save_pretrained(tmp_path / "hf")
    model = keras_vit.from_checkpoint(tmp_path / "hf")
    x = _images()
    want = _hf_pooled(reference.vision_model, "siglip_vision_model", x)
    _check("hf-siglip-whole-model", np.asarray(model(x, training=False)), want)
