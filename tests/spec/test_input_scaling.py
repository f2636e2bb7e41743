"""spec/input_scaling: the per-channel mean/std are timm's (timm/data/constants.py:
IMAGENET_DEFAULT_MEAN / _STD, OPENAI_CLIP_MEAN / _STD), and the pipeline scales by them."""

import numpy as np

from keras_vit.spec import input_scaling

# timm/data/constants.py, copied literally.
IMAGENET_DEFAULT_MEAN = (0.485, 0.456, 0.406)
IMAGENET_DEFAULT_STD = (0.229, 0.224, 0.225)
OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def test_constants_are_timms():
    assert input_scaling.IMAGENET_MEAN == IMAGENET_DEFAULT_MEAN
    assert input_scaling.IMAGENET_STD == IMAGENET_DEFAULT_STD
    assert input_scaling.CLIP_MEAN == OPENAI_CLIP_MEAN
    assert input_scaling.CLIP_STD == OPENAI_CLIP_STD


def test_mean_std_names_each_scaling_but_the_releases():
    assert input_scaling.MEAN_STD == {
        "imagenet": (IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD),
        "clip": (OPENAI_CLIP_MEAN, OPENAI_CLIP_STD),
    }
    assert "[-1,1]" not in input_scaling.MEAN_STD


def test_the_pipeline_normalises_by_them():
    """data.preprocess takes the pipeline's [-1, 1] images to (pixel / 255 - mean) / std with
    these numbers, pixel / 255 = (x + 1) / 2."""
    from keras_vit.data.preprocess import from_unit_range

    pixels = np.random.default_rng(0).uniform(-1, 1, (2, 3, 3, 3)).astype("float32")
    for name, (mean, std) in (
        ("imagenet", (IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD)),
        ("clip", (OPENAI_CLIP_MEAN, OPENAI_CLIP_STD)),
    ):
        out = np.asarray(from_unit_range(pixels, name))
        want = ((pixels + 1) / 2 - np.array(mean)) / np.array(std)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
