"""spec/resize_methods: the position-table resize methods named once, each one implemented
by `resize_position_embeddings` and offered by `keras-vit convert --resize-method`."""

import numpy as np
import pytest

from keras_vit.spec.resize_methods import RESIZE_METHOD_HELP, RESIZE_METHODS


def test_names_order_and_default():
    assert RESIZE_METHODS == (
        "bilinear", "bicubic", "torch_bicubic", "dinov2", "bilinear_antialias"
    )  # fmt: skip
    assert RESIZE_METHODS[0] == "bilinear"  # the release's scipy.ndimage.zoom, the default
    assert all(RESIZE_METHOD_HELP[m].strip() for m in RESIZE_METHODS)


def test_each_method_is_implemented_and_they_differ():
    from keras_vit.layers.position_resize import resize_position_embeddings

    table = np.random.default_rng(0).normal(size=(1, 1 + 4 * 4, 3)).astype("float32")
    outputs = {m: resize_position_embeddings(table, 4, 6, 1, method=m) for m in RESIZE_METHODS}
    for out in outputs.values():
        assert out.shape == (1, 1 + 6 * 6, 3)
        np.testing.assert_array_equal(out[:, :1], table[:, :1])  # class token row kept
    for i, a in enumerate(RESIZE_METHODS):
        for b in RESIZE_METHODS[i + 1 :]:
            assert not np.allclose(outputs[a], outputs[b]), (a, b)
    with pytest.raises(ValueError, match="method.*'nearest'"):
        resize_position_embeddings(table, 4, 6, 1, method="nearest")


def test_convert_offers_exactly_them():
    from keras_vit.cli.main import build_parser

    parser = build_parser()
    for method in RESIZE_METHODS:
        args = parser.parse_args(["convert", "in.npz", "out.keras", "--resize-method", method])
        assert args.resize_method == method
    with pytest.raises(SystemExit):
        parser.parse_args(["convert", "in.npz", "out.keras", "--resize-method", "nearest"])
