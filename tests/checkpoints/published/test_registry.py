"""Published checkpoint names and `weights=` resolution through keras.utils.get_file, with a
file:// origin, a local HTTP server on 127.0.0.1, and no network."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import shutil
import socket
import threading

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints import PUBLISHED_CHECKPOINTS, load_weights_argument, resolve_checkpoint
from keras_vit.checkpoints.base.architecture import release_model_name
from keras_vit.checkpoints.published import registry
from tests.numpy_reference import random_official_params, vit_forward

ARCH = dict(patch_size=8, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2)
BUCKET = "https://storage.googleapis.com/vit_models/"


@pytest.fixture
def tiny_file(tmp_path):
    rng = np.random.default_rng(0)
    params = random_official_params(rng, image_size=32, channels=3, num_classes=10, **ARCH)
    path = tmp_path / "tiny.npz"
    np.savez(path, **params)
    return path, params


def _serve(folder):
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_release_names_and_urls():
    """vit_facts.md section 7: every listed file has a name and a bucket URL."""
    pretrained = "ViT-B_16 ViT-B_32 ViT-B_8 ViT-L_16 ViT-L_32 ViT-H_14 R50+ViT-B_16 "
    pretrained += "R26+ViT-B_32 R50+ViT-L_32"
    finetuned = "ViT-B_16 ViT-B_32 ViT-B_8 ViT-L_16 ViT-L_32 R50+ViT-B_16 ViT-B_16-224 "
    finetuned += "ViT-L_16-224"
    for model in pretrained.split():
        entry = PUBLISHED_CHECKPOINTS[f"imagenet21k/{model}"]
        assert entry.url() == BUCKET + f"imagenet21k/{model.replace('+', '%2B')}.npz"
    for model in finetuned.split():
        entry = PUBLISHED_CHECKPOINTS[f"imagenet21k+imagenet2012/{model}"]
        assert entry.url().startswith(BUCKET + "imagenet21k%2Bimagenet2012/")
    assert len(PUBLISHED_CHECKPOINTS) == 17
    assert registry.lookup("ViT-B_16").folder == "imagenet21k"
    assert registry.lookup("ViT-L_16-224.npz").folder == "imagenet21k+imagenet2012"
    augreg = registry.lookup("augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0")
    assert augreg.url().startswith(BUCKET + "augreg/B_16-i21k-300ep")
    assert registry.lookup("ViT-Z_99") is None
    assert registry.collection_entry("imagenet21k", "ViT-B_16").url() == (
        BUCKET + "imagenet21k/ViT-B_16.npz"
    )


def test_file_origin_with_sha256(tiny_file, tmp_path):
    path, _ = tiny_file
    (tmp_path / "mirror" / "imagenet21k").mkdir(parents=True)
    shutil.copy(path, tmp_path / "mirror" / "imagenet21k" / "ViT-B_16.npz")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    entry = registry.PublishedCheckpoint("imagenet21k", "ViT-B_16", "ViT-B_16.npz", digest)
    base = (tmp_path / "mirror").as_uri() + "/"
    local = resolve_checkpoint(entry, base_url=base, cache_dir=tmp_path / "cache")
    assert local == str(tmp_path / "cache" / "keras_vit" / "imagenet21k_ViT-B_16.npz")
    assert open(local, "rb").read() == path.read_bytes()
    wrong = registry.PublishedCheckpoint("imagenet21k", "ViT-B_16", "ViT-B_16.npz", "0" * 64)
    os.remove(local)
    with pytest.raises(ValueError, match="SHA-256"):
        resolve_checkpoint(wrong, base_url=base, cache_dir=tmp_path / "cache")


def test_weights_name_through_local_http_server(tiny_file, tmp_path, monkeypatch):
    path, params = tiny_file
    (tmp_path / "site" / "augreg").mkdir(parents=True)
    shutil.copy(path, tmp_path / "site" / "augreg" / "tiny-test.npz")
    server = _serve(tmp_path / "site")
    monkeypatch.setenv(registry.BASE_URL_ENV, f"http://127.0.0.1:{server.server_port}/")
    monkeypatch.setenv(registry.CACHE_DIR_ENV, str(tmp_path / "cache"))
    x = np.random.default_rng(2).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    expected = vit_forward(params, x, num_heads=4)
    try:
        model = keras_vit.ViT(image_size=32, num_classes=10, weights="augreg/tiny-test", **ARCH)
    finally:
        server.shutdown()
        server.server_close()
    np.testing.assert_allclose(np.asarray(model(x)), expected, atol=1e-4)
    assert (tmp_path / "cache" / "keras_vit" / "augreg_tiny-test.npz").is_file()
    # the server is gone: the cached copy is used
    again = keras_vit.ViT(image_size=32, num_classes=10, weights="augreg/tiny-test", **ARCH)
    np.testing.assert_allclose(np.asarray(again(x)), expected, atol=1e-4)


def test_without_network_the_error_names_url_and_cache_path(tmp_path):
    with socket.socket() as probe:  # a port with nobody listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}/"
    with pytest.raises(OSError) as info:
        resolve_checkpoint("imagenet21k/ViT-B_16", base_url=base, cache_dir=tmp_path)
    message = str(info.value)
    assert base + "imagenet21k/ViT-B_16.npz" in message
    assert str(tmp_path / "keras_vit" / "imagenet21k_ViT-B_16.npz") in message


def test_weights_argument_errors(tmp_path):
    tiny = keras_vit.ViT(image_size=32, num_classes=10, **ARCH)
    with pytest.raises(ValueError, match="neither an existing file nor a published"):
        load_weights_argument(tiny, str(tmp_path / "missing.npz"))
    with pytest.raises(ValueError, match="architecture is one of the release"):
        load_weights_argument(tiny, "imagenet21k")
    with pytest.raises(ValueError, match="must be None, a path"):
        load_weights_argument(tiny, 3)


def test_collection_name_resolves_by_architecture():
    """weights="imagenet21k" picks the file of the model's architecture (or says none)."""
    model = keras_vit.ViT_Ti16(num_classes=10, image_size=32)
    assert release_model_name(model) == "ViT-Ti_16"
    with pytest.raises(ValueError, match="no published 'imagenet21k' checkpoint for ViT-Ti_16"):
        load_weights_argument(model, "imagenet21k")
    with pytest.raises(ValueError, match="ViT-B_16 checkpoint but the model is a ViT-Ti_16"):
        load_weights_argument(model, "imagenet21k/ViT-B_16")
