"""Optional lane (`-m pytorch`): SigLIP 2's NaFlex tower at other grids against transformers.

`F.interpolate(mode="bilinear", align_corners=False, antialias=True)` against keras_vit's
"bilinear_antialias" (the NumPy load-time resize and the `keras.ops` forward-pass one); then a
tiny random `Siglip2VisionModel` saved with `save_pretrained` and read by
`keras_vit.from_checkpoint` at image sizes whose grids differ from its table's: its pooled
output on each image, given as patches with `spatial_shapes` (H / P, W / P) and no padding,
must equal keras_vit's within 1e-5. Where timm imports, its NaFlexVit SigLIP towers' table
resize too.
"""

from __future__ import annotations

import numpy as np
import pytest

import keras_vit
from keras_vit.layers.position_resize import resize_position_embeddings
from keras_vit.layers.position_table_ops import resize_table
from tests.torch_helpers import randomise_torch

pytestmark = pytest.mark.pytorch
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-5
PATCH, WIDTH, HEADS, SIDE = 7, 32, 4, 4  # a 4x4 table of 7-pixel patches


def _figure(case, got, want, tolerance=TOLERANCE):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (case, got.shape, want.shape)
    assert np.abs(want).max() > 1e-2, f"{case}: the reference output is ~0"
    diff = float(np.abs(got - want).max())
    print(f"FIGURE {case} max|diff|={diff:.3g} (atol {tolerance:g})")
    assert diff <= tolerance, (case, diff)


@pytest.mark.parametrize(
    "old, new", [((16, 16), (7, 9)), ((16, 16), (24, 31)), ((5, 7), (13, 3)), ((4, 4), (8, 2))]
)
def test_bilinear_antialias_equals_torch_interpolate(old, new):
    table = np.random.default_rng(old[1] * new[0]).normal(size=(1, old[0] * old[1], 8))
    table = table.astype("float32")
    grid = torch.from_numpy(table).reshape(1, *old, 8).permute(0, 3, 1, 2)
    want = torch.nn.functional.interpolate(
        grid, size=new, mode="bilinear", align_corners=False, antialias=True
    )
    want = want.permute(0, 2, 3, 1).reshape(1, -1, 8).numpy()
    case = f"{old[0]}x{old[1]}->{new[0]}x{new[1]}"
    loaded = resize_position_embeddings(table, old, new, 0, method="bilinear_antialias")
    _figure(f"naflex-resize-numpy-{case}", loaded, want)
    forward = np.asarray(resize_table(table, old, new, 0, "bilinear_antialias"))
    _figure(f"naflex-resize-ops-{case}", forward, want)


def _naflex_pooled(module, images):
    """Siglip2VisionModel's pooled output: each image's patches flattened row, column, channel
    (transformers' `convert_image_to_patches`), every patch valid, its own spatial shape."""
    pixels = torch.from_numpy(images.transpose(0, 3, 1, 2).copy())
    b, c, h, w = pixels.shape
    grid = (h // PATCH, w // PATCH)
    patches = pixels.reshape(b, c, grid[0], PATCH, grid[1], PATCH).permute(0, 2, 4, 3, 5, 1)
    patches = patches.reshape(b, grid[0] * grid[1], -1)
    mask = torch.ones(b, grid[0] * grid[1], dtype=torch.int32)
    with torch.no_grad():
        out = module(
            pixel_values=patches, pixel_attention_mask=mask, spatial_shapes=torch.tensor([grid] * b)
        )
    return out.pooler_output.numpy()


@pytest.fixture(scope="module")
def naflex_tower(tmp_path_factory):
    config = transformers.Siglip2VisionConfig(
        hidden_size=WIDTH, intermediate_size=2 * WIDTH, num_hidden_layers=2,
        num_attention_heads=HEADS, patch_size=PATCH, num_patches=SIDE * SIDE,
    )  # fmt: skip
    reference = randomise_torch(transformers.Siglip2VisionModel(config))
    folder = tmp_path_factory.mktemp("naflex") / "hf"
    reference.save_pretrained(folder)
    return reference, folder


@pytest.mark.parametrize("grid", [(3, 5), (8, 2), (6, 6)])
def test_a_naflex_tower_at_other_grids_equals_transformers(naflex_tower, grid):
    reference, folder = naflex_tower
    size = (grid[0] * PATCH, grid[1] * PATCH)
    model = keras_vit.from_checkpoint(folder, image_size=size)
    x = np.random.default_rng(grid[0] * 10 + grid[1]).uniform(-1, 1, (2, *size, 3))
    x = x.astype("float32")
    want = _naflex_pooled(reference, x)
    _figure(f"hf-naflex-{grid[0]}x{grid[1]}", np.asarray(model(x, training=False)), want)
    dynamic = keras_vit.from_checkpoint(folder, dynamic_image_size=True)
    _figure(f"hf-naflex-dynamic-{grid[0]}x{grid[1]}", np.asarray(dynamic(x)), want)


def _timm():
    """timm, or a skip where it does not import (its import reaches torchvision)."""
    try:
        import timm
    except (ImportError, RuntimeError) as error:
        pytest.skip(f"timm does not import here: {type(error).__name__}")
    return timm


@pytest.mark.parametrize(
    "name", ["naflexvit_base_patch16_siglip", "naflexvit_so400m_patch16_siglip"]
)
def test_timms_naflexvit_siglip_resizes_its_table_the_same_way(name):
    """timm's NaFlexVit SigLIP towers: with the patch projection zeroed, the tokens of an image
    of grid (h, w) are the table resized to it (`_apply_learned_pos_embed`), which must be
    keras_vit's "bilinear_antialias" (not `NaFlexVitCfg`'s default bicubic)."""
    timm = _timm()
    model = timm.create_model(
        name, pretrained=False, patch_size=PATCH, embed_dim=WIDTH, depth=1, num_heads=HEADS,
        mlp_ratio=2.0, num_classes=0, pos_embed_grid_size=(SIDE * 2, SIDE * 2),
    ).eval()  # fmt: skip
    side = SIDE * 2
    with torch.no_grad():
        model.embeds.pos_embed.copy_(torch.randn(model.embeds.pos_embed.shape) * 0.2)
        model.embeds.proj.weight.zero_()
        model.embeds.proj.bias.zero_()
        table = model.embeds.pos_embed.numpy().reshape(1, side * side, WIDTH)
        for grid in [(3, 5), (13, 11), (2, 16)]:
            pixels = torch.zeros(1, 3, grid[0] * PATCH, grid[1] * PATCH)
            tokens = model.embeds(pixels)[0].numpy()
            ours = resize_position_embeddings(table, side, grid, 0, method="bilinear_antialias")
            _figure(f"timm-{name}-table-{grid[0]}x{grid[1]}", ours, tokens)
