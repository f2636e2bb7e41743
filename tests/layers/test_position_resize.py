"""keras_vit.resize_position_embeddings against scipy.ndimage.zoom (the release) and PIL."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import scipy.ndimage
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from keras_vit import resize_position_embeddings


def _table(rng, grid, dim, prefix=1):
    return rng.standard_normal((1, prefix + grid[0] * grid[1], dim)).astype(np.float32)


def _zoom_reference(table, old, new, prefix):
    """The release's `load_pretrained`: scipy.ndimage.zoom(order=1) on the grid part."""
    grid = table[0, prefix:].reshape(old[0], old[1], -1)
    zoomed = scipy.ndimage.zoom(grid, (new[0] / old[0], new[1] / old[1], 1), order=1)
    return np.concatenate([table[0, :prefix], zoomed.reshape(-1, table.shape[-1])])[None]


@pytest.mark.parametrize("old, new", [(14, 24), (7, 12), (2, 8), (24, 14)])
def test_bilinear_matches_release_scipy_zoom(old, new):
    rng = np.random.default_rng(old * 100 + new)
    table = _table(rng, (old, old), 16)
    out = resize_position_embeddings(table, old, new, num_prefix_tokens=1)
    expected = _zoom_reference(table, (old, old), (new, new), 1)
    assert out.shape == (1, 1 + new * new, 16)
    np.testing.assert_allclose(out, expected, atol=1e-6, rtol=0)
    np.testing.assert_array_equal(out[0, 0], table[0, 0])  # class-token row bit for bit


def test_non_square_keeps_rows_as_rows():
    """A table whose vectors encode (row, col): 14x14 -> 14x20 must keep every row's index."""
    rows, cols = np.meshgrid(np.arange(14.0), np.arange(14.0), indexing="ij")
    grid = np.stack([rows, cols], axis=-1).reshape(1, 196, 2).astype(np.float32)
    table = np.concatenate([np.full((1, 1, 2), 7.0, np.float32), grid], axis=1)
    out = resize_position_embeddings(table, (14, 14), (14, 20), num_prefix_tokens=1)
    resized = out[0, 1:].reshape(14, 20, 2)
    np.testing.assert_allclose(resized[..., 0], np.repeat(np.arange(14.0)[:, None], 20, 1))
    # corner aligned: new column j sits at old column j * 13 / 19
    expected_cols = np.arange(20.0) * 13 / 19
    np.testing.assert_allclose(resized[..., 1], np.tile(expected_cols, (14, 1)), atol=1e-5)
    # and the other way round: columns stay columns
    back = resize_position_embeddings(table, (14, 14), (20, 14), num_prefix_tokens=1)
    np.testing.assert_allclose(
        back[0, 1:].reshape(20, 14, 2)[..., 1], np.tile(np.arange(14.0), (20, 1))
    )


def test_non_square_source_grid_matches_zoom():
    rng = np.random.default_rng(3)
    table = _table(rng, (6, 9), 5)
    out = resize_position_embeddings(table, (6, 9), (10, 4), num_prefix_tokens=1)
    np.testing.assert_allclose(out, _zoom_reference(table, (6, 9), (10, 4), 1), atol=1e-6)


def test_b26_every_target_grid_gives_exact_row_count():
    """B26: every target grid gives exactly 1 + h*w rows (no off-by-one from scale factors).

    Patch 16 and grids 14..30 (the row's range), plus every grid 1..30 from the issue.
    """
    rng = np.random.default_rng(26)
    table = _table(rng, (14, 14), 4)
    for h in range(1, 31):
        for w in range(1, 31):
            out = resize_position_embeddings(table, 14, (h, w), num_prefix_tokens=1)
            assert out.shape == (1, 1 + h * w, 4), (h, w)
            assert out.dtype == np.float32


def test_b26_interpolation_in_float32_under_mixed_bfloat16():
    """B26: under mixed_bfloat16 (or from a bfloat16 table) the result is float32."""
    keras.config.set_dtype_policy("mixed_bfloat16")
    rng = np.random.default_rng(5)
    table = _table(rng, (14, 14), 8)
    out = resize_position_embeddings(table, 14, 17, num_prefix_tokens=1)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, _zoom_reference(table, (14, 14), (17, 17), 1), atol=1e-6)


@pytest.mark.parametrize("method", ["bilinear", "bicubic"])
def test_identity_resize_is_exact(method):
    rng = np.random.default_rng(1)
    table = _table(rng, (5, 7), 6)
    out = resize_position_embeddings(table, (5, 7), (5, 7), 1, method=method)
    np.testing.assert_array_equal(out, table)


def test_gap_tables_have_no_prefix_row_and_rank_two_tables_work():
    rng = np.random.default_rng(2)
    table = _table(rng, (4, 4), 3, prefix=0)[0]  # (16, 3), no class token
    out = resize_position_embeddings(table, 4, 6, num_prefix_tokens=0)
    assert out.shape == (36, 3)
    np.testing.assert_allclose(
        out[None], _zoom_reference(table[None], (4, 4), (6, 6), 0), atol=1e-6
    )


@pytest.mark.parametrize("old, new", [(7, 12), (14, 10), (14, 24)])
def test_bicubic_matches_pil_antialiased_bicubic(old, new):
    """bicubic = half-pixel Keys cubic (a=-0.5), antialiased when shrinking: PIL's BICUBIC."""
    rng = np.random.default_rng(old + new)
    table = _table(rng, (old, old), 3)
    out = resize_position_embeddings(table, old, new, 1, method="bicubic")
    grid = table[0, 1:].reshape(old, old, 3)
    pil = np.stack(
        [
            np.asarray(Image.fromarray(grid[..., c], mode="F").resize((new, new), Image.BICUBIC))
            for c in range(3)
        ],
        axis=-1,
    )
    np.testing.assert_allclose(out[0, 1:].reshape(new, new, 3), pil, atol=1e-5)
    np.testing.assert_array_equal(out[0, 0], table[0, 0])


@pytest.mark.parametrize("old, new", [(4, 6), (7, 12), (14, 24), (14, 10), (8, 3)])
def test_torch_bicubic_matches_opencv_inter_cubic(old, new):
    """torch_bicubic = PyTorch's plain bicubic (a = -0.75, half-pixel, border clamped, no
    antialiasing), which OpenCV's INTER_CUBIC also computes."""
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(old * new)
    table = _table(rng, (old, old), 3)
    out = resize_position_embeddings(table, old, new, 1, method="torch_bicubic")
    grid = table[0, 1:].reshape(old, old, 3).astype(np.float32)
    expected = cv2.resize(grid, (new, new), interpolation=cv2.INTER_CUBIC)
    np.testing.assert_allclose(out[0, 1:].reshape(new, new, 3), expected, atol=1e-5)
    np.testing.assert_array_equal(out[0, 0], table[0, 0])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(old_grid=14, new_grid=16, num_prefix_tokens=0), "197 rows"),
        (dict(old_grid=14, new_grid=16, num_prefix_tokens=1, method="nearest"), "method"),
        (dict(old_grid=14, new_grid=0, num_prefix_tokens=1), "new_grid"),
        (dict(old_grid=14, new_grid=16, num_prefix_tokens=-1), "num_prefix_tokens"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, match):
    table = np.zeros((1, 197, 4), np.float32)
    with pytest.raises(ValueError, match=match):
        resize_position_embeddings(table, **kwargs)


def test_bad_table_rank_raises():
    with pytest.raises(ValueError, match="shape"):
        resize_position_embeddings(np.zeros((2, 5, 4)), 2, 3, 1)


@pytest.mark.parametrize("old, new", [(4, 6), (16, 37), (37, 16), (7, 5)])
def test_dinov2_matches_opencv_given_the_offset_scale_factor(old, new):
    """dinov2 = PyTorch's plain bicubic given scale_factor (new + 0.1) / old (facebookresearch
    dinov2 `interpolate_offset=0.1`); OpenCV given fx = fy = that factor maps output i to
    (i + 0.5) / factor - 0.5 as PyTorch does, and rounds the size to `new`."""
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(old * new + 1)
    table = _table(rng, (old, old), 3)
    out = resize_position_embeddings(table, old, new, 1, method="dinov2")
    grid = table[0, 1:].reshape(old, old, 3).astype(np.float32)
    factor = (new + 0.1) / old
    expected = cv2.resize(grid, None, fx=factor, fy=factor, interpolation=cv2.INTER_CUBIC)
    assert expected.shape == (new, new, 3)
    np.testing.assert_allclose(out[0, 1:].reshape(new, new, 3), expected, atol=1e-5)
    plain = resize_position_embeddings(table, old, new, 1, method="torch_bicubic")
    assert np.abs(out - plain).max() > 1e-3  # the offset moves the samples
    same = resize_position_embeddings(table, old, old, 1, method="dinov2")
    np.testing.assert_array_equal(same, table.astype(np.float32))  # the original's early return


@pytest.mark.pytorch
@pytest.mark.parametrize("old, new", [(16, 37), (37, 16)])
def test_dinov2_bicubic_and_torch_bicubic_match_torch_interpolate(old, new):
    """The PyTorch lane: each cubic method against `F.interpolate` as its source calls it
    (facebookresearch dinov2, timm `resample_abs_pos_embed` / HF Dinov2WithRegisters, HF
    Dinov2 v5)."""
    torch = pytest.importorskip("torch")
    functional = torch.nn.functional
    rng = np.random.default_rng(old + new)
    table = _table(rng, (old, old), 8)
    grid = torch.tensor(table[:, 1:].astype(np.float32)).reshape(1, old, old, 8)
    grid = grid.permute(0, 3, 1, 2)
    factor = (new + 0.1) / old
    calls = {
        "dinov2": dict(scale_factor=(factor, factor), mode="bicubic", antialias=False),
        "bicubic": dict(size=(new, new), mode="bicubic", antialias=True, align_corners=False),
        "torch_bicubic": dict(size=(new, new), mode="bicubic", align_corners=False),
    }
    for method, call in calls.items():
        expected = functional.interpolate(grid, **call).permute(0, 2, 3, 1).reshape(1, -1, 8)
        out = resize_position_embeddings(table, old, new, 1, method=method)
        np.testing.assert_allclose(out[:, 1:], expected.numpy(), atol=1e-5, err_msg=method)


def _triangle_aa_weights(old: int, new: int) -> np.ndarray:
    """PyTorch's `upsample_bilinear2d_aa` weights of one axis, tap by tap as its
    `_compute_weights_aa` loops: centre scale * (i + 0.5), support scale (>= 1) or 1, taps
    int(centre -/+ support + 0.5) clipped to the input, triangle of (tap - centre + 0.5) /
    support, each row normalised."""
    scale = old / new
    support = scale if scale >= 1.0 else 1.0
    weights = np.zeros((new, old))
    for i in range(new):
        centre = scale * (i + 0.5)
        first = max(int(centre - support + 0.5), 0)
        last = min(int(centre + support + 0.5), old)
        for tap in range(first, last):
            x = abs((tap - centre + 0.5) / support)
            weights[i, tap] = 1.0 - x if x < 1.0 else 0.0
        weights[i] /= weights[i].sum()
    return weights


@settings(max_examples=25, deadline=None)
@given(
    old=st.tuples(st.integers(1, 16), st.integers(1, 16)),
    new=st.tuples(st.integers(1, 24), st.integers(1, 24)),
    prefix=st.integers(0, 1),
)
def test_bilinear_antialias_is_pytorchs_antialiased_triangle_filter(old, new, prefix):
    """bilinear_antialias = `F.interpolate(mode="bilinear", align_corners=False,
    antialias=True)` (SigLIP 2 NaFlex's table resize), shrinking and enlarging each axis, on
    non-square grids."""
    rng = np.random.default_rng(old[0] * 31 + new[1])
    table = _table(rng, old, 3, prefix=prefix)
    out = resize_position_embeddings(table, old, new, prefix, method="bilinear_antialias")
    grid = table[0, prefix:].reshape(*old, 3).astype(np.float64)
    rows, cols = _triangle_aa_weights(old[0], new[0]), _triangle_aa_weights(old[1], new[1])
    expected = np.einsum("ir,rcd,jc->ijd", rows, grid, cols).reshape(1, -1, 3)
    np.testing.assert_allclose(out[:, prefix:], expected, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(out[:, :prefix], table[:, :prefix])


def test_bilinear_antialias_differs_from_the_plain_and_corner_aligned_resizes():
    """Shrinking, the antialiased filter averages more taps than the release's corner-aligned
    linear resize (what a NaFlex table got before it had its own method)."""
    table = _table(np.random.default_rng(9), (16, 16), 4, prefix=0)
    ours = resize_position_embeddings(table, 16, 5, 0, method="bilinear_antialias")
    assert np.abs(ours - resize_position_embeddings(table, 16, 5, 0)).max() > 1e-2
    same = resize_position_embeddings(table, 16, 16, 0, method="bilinear_antialias")
    np.testing.assert_array_equal(same, table)
