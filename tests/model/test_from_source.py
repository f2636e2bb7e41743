"""`keras_vit.model.from_source`: one function from any source (a model name, a run directory, a
`.keras` file, a run's `.npz`, a checkpoint) to (builder, keyword arguments)."""

import json

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints import save_npz
from keras_vit.model import from_source
from tests.output_checks import assert_informative, assert_outputs_close, randomize_weights

TINY = dict(
    patch_size=8, hidden_dim=32, num_heads=2, mlp_dim=32, num_layers=1, image_size=16,
    num_classes=3,
)  # fmt: skip


def _images():
    return np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")


@pytest.fixture(scope="module")
def tiny_model():
    return randomize_weights(keras_vit.ViT(**TINY))


@pytest.mark.parametrize("name, builder", [("ti16", "ViT_Ti16"), ("R50_B16", "R50_B16")])
def test_a_name_gives_its_shortcut_without_weights(name, builder):
    source = from_source.describe(name)
    assert source.builder is getattr(keras_vit, builder)
    assert (source.kwargs, source.path, source.kind) == ({}, None, "name")
    with pytest.raises(ValueError, match="names an architecture, not weights"):
        from_source.load(name)


def test_a_checkpoint_file_gives_the_architecture_it_holds(tiny_model, tmp_path):
    path = tmp_path / "model.npz"
    save_npz(tiny_model, path)
    source = from_source.describe(path)
    assert source.builder is keras_vit.ViT and source.kind == "checkpoint"
    picked = {k: source.kwargs[k] for k in ("hidden_dim", "num_heads", "mlp_dim", "num_layers")}
    assert picked == {k: TINY[k] for k in picked}
    assert tuple(source.kwargs["image_size"]) == (16, 16) and source.kwargs["num_classes"] == 3
    loaded = from_source.load(path)
    expected = tiny_model.predict(_images(), verbose=0)
    assert_informative(expected)
    assert_outputs_close(loaded.predict(_images(), verbose=0), expected)


def test_a_run_directory_and_its_npz(tiny_model, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    tiny_model.save(run / "best.keras")
    save_npz(tiny_model, run / "best.npz")
    stored = {**TINY, "pooling": "gap"}  # config.json's word wins over the file's shapes
    (run / "config.json").write_text(json.dumps({"resolved": {"model_kwargs": stored}}))
    from_dir = from_source.describe(run)
    assert from_dir.kind == "keras" and from_dir.path == str(run / "best.keras")
    assert from_dir.kwargs["hidden_dim"] == 32 and from_dir.builder is keras_vit.ViT
    from_npz = from_source.describe(run / "best.npz")
    assert (from_npz.kind, from_npz.kwargs) == ("run", stored)
    assert from_npz.build().count_params() == keras_vit.ViT(**stored).count_params()


def test_a_hybrid_checkpoint_gives_the_hybrid_builder(tmp_path):
    model = keras_vit.HybridViT(
        resnet_stages=(), resnet_width=32, resnet_groups=8, **{**TINY, "patch_size": 2}
    )
    save_npz(model, tmp_path / "hybrid.npz")
    source = from_source.describe(tmp_path / "hybrid.npz")
    assert source.builder is keras_vit.HybridViT
    assert list(source.kwargs["resnet_stages"]) == [] and source.kwargs["resnet_width"] == 32


def test_an_unknown_source_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a file or folder nor a published"):
        from_source.describe(str(tmp_path / "absent.npz"))
    with pytest.raises(FileNotFoundError):
        from_source.describe("Q/7")
    with pytest.raises(ValueError, match="Unknown model 'Q/7'"):
        from_source.named("Q/7")
