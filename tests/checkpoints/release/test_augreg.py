"""AugReg names and aliases, the resolution a collection picks, ImageNet-21k files kept whole
for prediction, and `--weights NAME` for fine-tuning (files served from a local folder)."""

from __future__ import annotations

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints.base.npz_io import write_npz
from keras_vit.checkpoints.published import registry
from keras_vit.train import run_config, run_plan
from tests.numpy_reference import random_official_params, vit_forward

S16_224 = (
    "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0"
    "--imagenet2012-steps_20k-lr_0.03-res_224"
)
TI16 = "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0"
TINY = dict(patch_size=8, channels=3, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2)


@pytest.fixture
def bucket(tmp_path, monkeypatch):
    """A local folder standing in for the vit_models bucket, and a fresh cache."""
    root = tmp_path / "bucket"
    (root / "augreg").mkdir(parents=True)
    (root / "imagenet21k").mkdir()
    monkeypatch.setenv(registry.BASE_URL_ENV, root.as_uri() + "/")
    monkeypatch.setenv(registry.CACHE_DIR_ENV, str(tmp_path / "cache"))
    return root


def test_release_grammar_names_and_aliases():
    for name in (S16_224, f"augreg/{S16_224}", f"augreg/{S16_224}.npz"):
        entry = registry.lookup(name)
        assert (entry.folder, entry.model, entry.filename) == (
            "augreg",
            "ViT-S_16",
            S16_224 + ".npz",
        )
    assert registry.lookup("augreg/ViT-S_16-224").filename == S16_224 + ".npz"
    assert registry.lookup("augreg/ViT-Ti_16").filename == TI16 + ".npz"
    hybrid = "R26_S_32-i21k-300ep-lr_0.001-aug_light0-wd_0.03-do_0.1-sd_0.1"
    assert registry.lookup(hybrid).model == "R26+ViT-S_32"


# The files timm's vision_transformer_hybrid.py ships as its augreg weights (its URLs).
HYBRID_ALIASES = {
    "augreg/R26+ViT-S_32": "R26_S_32-i21k-300ep-lr_0.001-aug_medium2-wd_0.03-do_0.0-sd_0.0",
    "augreg/R26+ViT-S_32-224": "R26_S_32-i21k-300ep-lr_0.001-aug_light0-wd_0.03-do_0.1-sd_0.1"
    "--imagenet2012-steps_20k-lr_0.03-res_224",
    "augreg/R26+ViT-S_32-384": "R26_S_32-i21k-300ep-lr_0.001-aug_medium2-wd_0.03-do_0.0-sd_0.0"
    "--imagenet2012-steps_20k-lr_0.03-res_384",
    "augreg/R50+ViT-L_32": "R50_L_32-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0",
    "augreg/R50+ViT-L_32-224": "R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1"
    "--imagenet2012-steps_20k-lr_0.01-res_224",
    "augreg/R50+ViT-L_32-384": "R50_L_32-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0"
    "--imagenet2012-steps_20k-lr_0.01-res_384",
    "augreg/R+ViT-Ti_16-384": "R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0"
    "--imagenet2012-steps_20k-lr_0.03-res_384",
}


@pytest.mark.parametrize("alias", sorted(HYBRID_ALIASES))
def test_hybrid_aliases_name_timms_augreg_files(alias):
    entry = registry.lookup(alias)
    assert (entry.folder, entry.filename) == ("augreg", HYBRID_ALIASES[alias] + ".npz")
    assert alias.startswith(f"augreg/{entry.model}")


def test_collections_pick_the_file_at_the_model_resolution():
    ft = registry.IMAGENET21K_FT
    assert registry.collection_entry(ft, "ViT-B_16", (224, 224)).filename == "ViT-B_16-224.npz"
    assert registry.collection_entry(ft, "ViT-B_16", (384, 384)).filename == "ViT-B_16.npz"
    assert registry.collection_entry(ft, "ViT-B_32", (224, 224)).filename == "ViT-B_32.npz"
    entry = registry.collection_entry("augreg+imagenet2012", "ViT-S_16", (224, 224))
    assert entry.filename == S16_224 + ".npz"
    assert registry.collection_entry("augreg", "ViT-Ti_16", None).filename == TI16 + ".npz"


def test_vit_ti16_takes_an_augreg_alias(bucket):
    params = random_official_params(
        np.random.default_rng(0),
        image_size=224,
        patch_size=16,
        channels=3,
        hidden_dim=192,
        num_heads=3,
        mlp_dim=768,
        num_layers=12,
        num_classes=1000,
        scale=0.05,
    )
    name = TI16 + "--imagenet2012-steps_20k-lr_0.03-res_224"
    write_npz(bucket / "augreg" / f"{name}.npz", params)
    model = keras_vit.ViT_Ti16(weights="augreg+imagenet2012")
    x = np.random.default_rng(1).uniform(-1, 1, (1, 224, 224, 3)).astype("float32")
    expected = vit_forward(params, x, num_heads=3)
    assert np.std(expected) > 1e-2
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-4, rtol=0)


def test_imagenet21k_file_keeps_pre_logits_and_head_for_prediction(tmp_path):
    params = random_official_params(
        np.random.default_rng(0), image_size=32, num_classes=10, representation_size=32, **TINY
    )
    write_npz(tmp_path / "i21k.npz", params)
    arch = {k: v for k, v in TINY.items() if k != "channels"}
    model = keras_vit.ViT(image_size=32, num_classes=10, weights=tmp_path / "i21k.npz", **arch)
    x = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    expected = vit_forward(params, x, num_heads=4)
    assert np.std(expected) > 1e-2
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-4, rtol=0)
    finetune = keras_vit.ViT(image_size=32, num_classes=5, weights=tmp_path / "i21k.npz", **arch)
    assert "pre_logits" not in [layer.name for layer in finetune.layers]


def test_finetune_weights_by_name_reads_the_architecture(bucket):
    params = random_official_params(np.random.default_rng(0), image_size=32, num_classes=7, **TINY)
    write_npz(bucket / "augreg" / f"{TI16}.npz", params)
    model = run_plan.load_source_model(f"augreg/{TI16}")
    assert model.get_layer("encoderblock_0").num_heads == 4 and model.output_shape == (None, 7)


def test_finetune_weights_offline_error_names_url_and_cache(bucket, tmp_path):
    with pytest.raises(run_config.ConfigError) as info:
        run_plan.load_source_model("imagenet21k/ViT-B_32")
    message = str(info.value)
    assert (bucket / "imagenet21k" / "ViT-B_32.npz").as_uri() in message
    assert str(tmp_path / "cache" / "keras_vit" / "imagenet21k_ViT-B_32.npz") in message
