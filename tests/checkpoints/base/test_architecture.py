"""`Architecture`: one reading of a model or of checkpoint arrays.

Expected values come from the paper's table 1 and the release's key layout (ViT-B/16: patch
16, D 768, 12 heads of 64, MLP 3072, 12 blocks; 14x14 grid + class token at 224), not from
the code under test.
"""

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints.base.architecture import Architecture

# The tiny test size: image 32, patch 8, hidden 32, 4 heads, MLP 64, 2 layers.
TRANSFORMER = dict(hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2)
TINY = dict(image_size=32, patch_size=8, **TRANSFORMER)


def release_b16_arrays(num_classes=1000, cls=True, grid=14):
    """Zero arrays with the release's ViT-B/16 keys and shapes (only the ones read)."""
    arrays = {
        "embedding/kernel": np.zeros((16, 16, 3, 768), np.float32),
        "Transformer/posembed_input/pos_embedding": np.zeros(
            (1, grid * grid + int(cls), 768), np.float32
        ),
        "head/kernel": np.zeros((768, num_classes), np.float32),
    }
    if cls:
        arrays["cls"] = np.zeros((1, 1, 768), np.float32)
    for i in range(12):
        block = f"Transformer/encoderblock_{i}/"
        arrays[block + "MultiHeadDotProductAttention_1/query/kernel"] = np.zeros((768, 12, 64))
        arrays[block + "MlpBlock_3/Dense_0/kernel"] = np.zeros((768, 3072))
    return arrays


def test_from_arrays_reads_the_release_b16_layout():
    arch = Architecture.from_arrays(release_b16_arrays())
    assert (arch.patch_size, arch.hidden_dim, arch.num_heads) == ((16, 16), 768, 12)
    assert (arch.mlp_dim, arch.num_layers, arch.channels) == (3072, 12, 3)
    assert (arch.grid, arch.num_prefix_tokens, arch.num_classes) == ((14, 14), 1, 1000)
    assert arch.representation_size is None and arch.resnet_stages is None
    assert arch.release_name() == "ViT-B_16"


def test_from_arrays_gap_and_missing_keys():
    arrays = release_b16_arrays(cls=False)
    del arrays["head/kernel"]
    arch = Architecture.from_arrays(arrays)
    assert arch.pooling == "gap" and arch.grid == (14, 14)
    assert arch.num_classes is None
    assert arch.missing_key("patch_size", "num_classes") == "head/kernel"
    assert arch.missing_key("patch_size") is None


def test_a_non_square_table_has_no_grid():
    arrays = release_b16_arrays()
    arrays["Transformer/posembed_input/pos_embedding"] = np.zeros((1, 1 + 14 * 10, 768))
    arch = Architecture.from_arrays(arrays)
    assert arch.num_patch_tokens == 140 and arch.grid is None


@pytest.mark.parametrize("pooling", ["token", "gap"])
def test_model_and_its_checkpoint_read_the_same(tmp_path, pooling):
    model = keras_vit.ViT(**{**TINY, "pooling": pooling}, num_classes=5, representation_size=16)
    keras_vit.save_npz(model, tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz", allow_pickle=False) as data:
        from_file = Architecture.from_arrays(dict(data))
    from_model = Architecture.from_model(model)
    assert from_model.grid == (4, 4) and from_model.image_size == (32, 32)
    assert from_model.num_prefix_tokens == int(pooling == "token")
    # Everything a file can say agrees with the model (image size is the model's alone).
    assert from_file == Architecture(**{**from_model.__dict__, "image_size": None})


def test_hybrid_stages_from_model_and_file(tmp_path):
    model = keras_vit.HybridViT(
        resnet_stages=(1, 2),
        resnet_width=16,
        resnet_groups=8,
        image_size=32,
        patch_size=1,
        num_classes=3,
        **TRANSFORMER,
    )
    keras_vit.save_npz(model, tmp_path / "h.npz")
    with np.load(tmp_path / "h.npz", allow_pickle=False) as data:
        from_file = Architecture.from_arrays(dict(data))
    from_model = Architecture.from_model(model)
    assert from_model.resnet_stages == from_file.resnet_stages == (1, 2)
    # Root /4, stage 2 /2: a 32-pixel image gives a 4x4 map, 8 pixels per token.
    assert from_model.grid == (4, 4) and from_model.pixels_per_token == (8, 8)
    assert from_file.channels == 3
