"""checkpoints/prediction_head: an original ImageNet-21k file of the release (pre_logits
dense + tanh under the 21843-class head, vit_jax/checkpoint.py) keeps both when the asked
head has the file's size; every other case builds the model as asked (None)."""

import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_vit.checkpoints.published.prediction_head import prediction_representation_size


def write(path, head=10, pre_logits=24, prefix=""):
    arrays = {f"{prefix}head/bias": np.zeros(head, "float32"), "cls": np.zeros((1, 1, 8))}
    if pre_logits:
        arrays[f"{prefix}pre_logits/kernel"] = np.zeros((8, pre_logits), "float32")
    np.savez(path, **arrays)
    return path


@settings(max_examples=12, deadline=None)
@given(head=st.integers(1, 30), asked=st.integers(1, 30), width=st.integers(1, 40))
def test_a_local_file_keeps_its_pre_logits_when_the_head_matches(
    tmp_path_factory, head, asked, width
):
    path = write(tmp_path_factory.mktemp("w") / "f.npz", head=head, pre_logits=width)
    want = width if asked == head else None
    assert prediction_representation_size(str(path), asked, hidden_dim=8) == want
    assert prediction_representation_size(path, asked, hidden_dim=8) == want  # os.PathLike


def test_keys_under_a_prefix_count(tmp_path):
    path = write(tmp_path / "f.npz", head=5, pre_logits=16, prefix="params/")
    assert prediction_representation_size(path, 5, 8) == 16


def test_a_file_without_pre_logits_is_built_as_asked(tmp_path):
    assert prediction_representation_size(write(tmp_path / "f.npz", pre_logits=0), 10, 8) is None
    np.savez(tmp_path / "nohead.npz", **{"pre_logits/kernel": np.zeros((8, 4))})
    assert prediction_representation_size(tmp_path / "nohead.npz", 10, 8) is None


def test_a_file_that_is_not_an_npz_is_left_to_the_loader(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    assert prediction_representation_size(tmp_path / "model.safetensors", 10, 8) is None
    pickled = tmp_path / "pickled.npz"
    np.save(tmp_path / "x.npy", np.array([object()], dtype=object), allow_pickle=True)
    pathlib.Path(tmp_path / "x.npy").rename(pickled)
    assert prediction_representation_size(pickled, 10, 8) is None  # never unpickled


@pytest.mark.parametrize(
    "name, num_classes, want",
    [
        ("imagenet21k/ViT-B_16", 21843, 768),
        ("ViT-B_16", 21843, 768),  # the ImageNet-21k file is the published default
        ("imagenet21k", 21843, 768),
        ("imagenet21k/ViT-B_16", 1000, None),  # a new head: the release's fine-tuning
        ("imagenet21k+imagenet2012/ViT-B_16", 21843, None),  # fine-tuned: no pre_logits
        ("imagenet21k+imagenet2012/ViT-B_16", 1000, None),
        ("not-a-file-or-name", 21843, None),
    ],
)
def test_published_names_are_decided_by_their_folder(name, num_classes, want):
    assert prediction_representation_size(name, num_classes, 768) == want


@pytest.mark.parametrize("weights", [None, 3, {"head": 1}, b"imagenet21k"])
def test_other_values_are_built_as_asked(weights):
    assert prediction_representation_size(weights, 21843, 768) is None
