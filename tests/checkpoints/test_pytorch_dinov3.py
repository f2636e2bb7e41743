"""Optional lane (`-m pytorch`): DINOv3 ViTs against timm's and transformers' own models.

Random weights in the SOURCE library's model, tiny sizes: timm's `vit_small_patch16_dinov3`
(and `_qkvb`, query and value biases) through `timm.create_model(..., pretrained=False)`,
saved with timm's `save_for_hf` (model.safetensors + config.json); transformers'
`DINOv3ViTModel`, saved with `save_pretrained`. keras_vit reads each file with
`from_checkpoint`; its forward pass must match the library's within 1e-5 at the file's image
size and, built with `dynamic_image_size=True`, at another (non-square) size, where timm
(`dynamic_img_size`) and transformers rotate by the new grid. keras_vit then writes the
model back; the library loads it strictly and reproduces the outputs within 1e-5. The gated
(SwiGLU) MLP of the H+/16 and 7B/16 sizes: timm's `vit_huge_plus_patch16_dinov3` and
`vit_7b_patch16_dinov3` at tiny widths (their `mlp_ratio` and `swiglu_align_to`: timm's
`SwiGLU`, `fc1_g` / `fc1_x`), the same with `swiglu_align_to=0` (timm's packed `GluMlp`, read,
written back as `SwiGLU`), and transformers' `DINOv3ViTModel` with `use_gated_mlp=True`.
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
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

TOLERANCE = 1e-5
SIZE, OTHER, PATCH, WIDTH, HEADS, CLASSES = 32, (24, 40), 8, 32, 4, 5
TINY_TIMM = dict(img_size=SIZE, patch_size=PATCH, embed_dim=WIDTH, depth=2, num_heads=HEADS)


def _check(case, got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (case, got.shape, want.shape)
    assert np.abs(want).max() > 1e-2, f"{case}: the reference output is ~0"
    diff = float(np.abs(got - want).max())
    print(f"FIGURE {case} max|diff|={diff:.3g} (atol {TOLERANCE:g})")
    assert diff <= TOLERANCE, (case, diff)


def _images(size, seed=1):
    height, width = (size, size) if isinstance(size, int) else size
    return np.random.default_rng(seed).uniform(-1, 1, (2, height, width, 3)).astype("float32")


def _torch(module, images):
    with torch.no_grad():
        out = module(torch.from_numpy(images.transpose(0, 3, 1, 2).copy()))
    return out.pooler_output.numpy() if hasattr(out, "pooler_output") else out.numpy()


def _keras(model, images):
    return np.asarray(model(images, training=False))


def _timm(name, classes, pool="token"):
    model = timm.create_model(
        name, pretrained=False, num_classes=classes, global_pool=pool, **TINY_TIMM
    )
    return model.eval()


@pytest.mark.parametrize("pool", ["token", "avg"])  # "avg": timm's default, the patch tokens
@pytest.mark.parametrize("classes", [CLASSES, 0])
@pytest.mark.parametrize("name", ["vit_small_patch16_dinov3", "vit_small_patch16_dinov3_qkvb"])
def test_timm_dinov3_reads_and_writes_back(tmp_path, name, classes, pool):
    reference = randomise_torch(_timm(name, classes, pool))
    folder = tmp_path / "timm"
    timm.models.save_for_hf(
        reference,
        str(folder),
        model_args=dict(TINY_TIMM, global_pool=pool),
        safe_serialization=True,
    )
    assert json.loads((folder / "config.json").read_text())["architecture"] == name
    path = folder / "model.safetensors"
    model = keras_vit.from_checkpoint(path, image_size=SIZE)
    x = _images(SIZE)
    want = _torch(reference, x)
    _check(f"timm-{name}-{classes}-{pool}-{SIZE}", _keras(model, x), want)

    dynamic = keras_vit.from_checkpoint(path, image_size=SIZE, dynamic_image_size=True)
    other = _images(OTHER, seed=2)
    _check(f"timm-{name}-{classes}-{OTHER}", _keras(dynamic, other), _torch(reference, other))

    back = tmp_path / "back.safetensors"
    write_checkpoint(model_contents(model), back, "timm")
    loaded = _timm(name, classes, pool)
    loaded.load_state_dict(safetensors_torch.load_file(str(back)), strict=True)
    _check(f"keras_vit->timm-{name}-{classes}", _torch(loaded, x), want)


def _hf_config(**kwargs):
    return transformers.DINOv3ViTConfig(
        hidden_size=WIDTH,
        intermediate_size=2 * WIDTH,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        patch_size=PATCH,
        image_size=SIZE,
        num_register_tokens=4,
        **kwargs,
    )


@pytest.mark.parametrize("biases", [{}, {"query_bias": False, "value_bias": False}])
def test_hugging_face_dinov3_reads_and_writes_back(tmp_path, biases):
    reference = randomise_torch(transformers.DINOv3ViTModel(_hf_config(**biases)))
    reference.save_pretrained(tmp_path / "hf")
    model = keras_vit.from_checkpoint(tmp_path / "hf")
    x = _images(SIZE)
    want = _torch(reference, x)
    case = "qv" if not biases else "none"
    _check(f"hf-dinov3-{case}-{SIZE}", _keras(model, x), want)

    dynamic = keras_vit.from_checkpoint(tmp_path / "hf", dynamic_image_size=True)
    other = _images(OTHER, seed=2)
    _check(f"hf-dinov3-{case}-{OTHER}", _keras(dynamic, other), _torch(reference, other))

    write_checkpoint(model_contents(model), tmp_path / "back", "hf")
    loaded, info = transformers.DINOv3ViTModel.from_pretrained(
        tmp_path / "back", output_loading_info=True
    )
    assert not any(info.values()), info
    _check(f"keras_vit->hf-dinov3-{case}", _torch(loaded.eval(), x), want)


def test_timm_dinov3_written_as_hugging_face_loads_in_transformers(tmp_path):
    """Across libraries: timm's DINOv3 (query and value biases) read by keras_vit as a
    feature model, written as a HF DINOv3ViTModel: the same pooled class token."""
    reference = randomise_torch(_timm("vit_small_patch16_dinov3_qkvb", 0))
    folder = tmp_path / "timm"
    _check_timm_to_hf(reference, folder, dict(TINY_TIMM), tmp_path / "hf", "timm-dinov3->hf")


GATED_TIMM = ["vit_huge_plus_patch16_dinov3", "vit_7b_patch16_dinov3"]


@pytest.mark.parametrize(
    "name,align",
    [(GATED_TIMM[0], None), (GATED_TIMM[1], None), (GATED_TIMM[0], 0)],
    ids=["hplus", "7b", "hplus-packed"],
)
def test_timm_gated_dinov3_reads_and_writes_back(tmp_path, name, align):
    args = dict(TINY_TIMM) if align is None else dict(TINY_TIMM, swiglu_align_to=align)
    reference = timm.create_model(name, pretrained=False, num_classes=CLASSES, **args)
    reference = randomise_torch(reference)
    packed = type(reference.blocks[0].mlp).__name__ == "GluMlp"
    assert packed == (align == 0)
    folder = tmp_path / "timm"
    timm.models.save_for_hf(reference, str(folder), model_args=args, safe_serialization=True)
    model = keras_vit.from_checkpoint(folder / "model.safetensors", image_size=SIZE)
    assert model.get_layer("encoderblock_0").mlp_activation == "swiglu"
    x = _images(SIZE)
    want = _torch(reference, x)
    case = f"timm-{name}{'-packed' if packed else ''}"
    _check(f"{case}-{SIZE}", _keras(model, x), want)

    back = tmp_path / "back.safetensors"
    write_checkpoint(model_contents(model), back, "timm")
    loaded = timm.create_model(name, pretrained=False, num_classes=CLASSES, **TINY_TIMM)
    loaded.load_state_dict(safetensors_torch.load_file(str(back)), strict=True)
    _check(f"keras_vit->{case}", _torch(loaded.eval(), x), want)


def test_hugging_face_gated_dinov3_reads_and_writes_back(tmp_path):
    config = _hf_config(use_gated_mlp=True, hidden_act="silu")
    reference = randomise_torch(transformers.DINOv3ViTModel(config))
    reference.save_pretrained(tmp_path / "hf")
    model = keras_vit.from_checkpoint(tmp_path / "hf")
    assert model.get_layer("encoderblock_0").mlp_activation == "swiglu"
    x = _images(SIZE)
    want = _torch(reference, x)
    _check(f"hf-dinov3-gated-{SIZE}", _keras(model, x), want)

    write_checkpoint(model_contents(model), tmp_path / "back", "hf")
    loaded, info = transformers.DINOv3ViTModel.from_pretrained(
        tmp_path / "back", output_loading_info=True
    )
    assert loaded.config.use_gated_mlp and loaded.config.hidden_act == "silu"
    assert not any(info.values()), info
    _check("keras_vit->hf-dinov3-gated", _torch(loaded.eval(), x), want)


def test_timm_gated_dinov3_written_as_hugging_face_loads_in_transformers(tmp_path):
    """Across libraries: timm's H+ shape read by keras_vit as a feature model, written as a
    HF DINOv3ViTModel with `use_gated_mlp=True`: the same pooled class token."""
    args = dict(TINY_TIMM, qkv_bias=True, global_pool="token")
    reference = randomise_torch(
        timm.create_model(GATED_TIMM[0], pretrained=False, num_classes=0, **args)
    )
    folder = tmp_path / "timm"
    _check_timm_to_hf(reference, folder, args, tmp_path / "hf", "timm-dinov3-gated->hf")


def _check_timm_to_hf(reference, folder, model_args, hf_folder, figure):
    """timm's `reference` saved to `folder`, read by keras_vit, written as an HF folder that
    DINOv3ViTModel loads strictly with `reference`'s outputs."""
    timm.models.save_for_hf(reference, str(folder), model_args=model_args, safe_serialization=True)
    model = keras_vit.from_checkpoint(folder / "model.safetensors", image_size=SIZE)
    write_checkpoint(model_contents(model), hf_folder, "hf")
    loaded, info = transformers.DINOv3ViTModel.from_pretrained(hf_folder, output_loading_info=True)
    assert not any(info.values()), info
    x = _images(SIZE)
    _check(figure, _torch(loaded.eval(), x), _torch(reference, x))
