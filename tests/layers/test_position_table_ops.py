"""The in-graph position-table resize against scipy.ndimage.zoom(order=1) (the release's)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage

from keras_vit.layers.position_table_ops import resize_table


@pytest.mark.parametrize("new_grid", [(4, 4), (6, 8), (3, 5), (1, 7)])
def test_equals_scipy_zoom_order_1(new_grid):
    table = np.random.default_rng(0).standard_normal((1, 1 + 16, 8)).astype("float32")
    grid = table[0, 1:].astype("float64").reshape(4, 4, 8)
    factors = (new_grid[0] / 4, new_grid[1] / 4, 1)
    expected = scipy.ndimage.zoom(grid, factors, order=1).reshape(1, -1, 8)
    got = np.asarray(resize_table(table, (4, 4), new_grid, 1))
    np.testing.assert_array_equal(got[:, :1], table[:, :1])
    np.testing.assert_allclose(got[:, 1:], expected, atol=1e-6, rtol=0)
