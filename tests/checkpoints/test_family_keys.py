"""The ViT family's key mappings (DeiT, DeiT III, DINOv2, CLIP towers) on NumPy state dicts
written by the tests in timm's and Hugging Face's layouts (tests/checkpoints/family_state.py):
timm <-> release-style keys, HF <-> release-style keys, both readers agree on the same
weights, and each variant keras_vit does not build is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from keras_vit.checkpoints.base.errors import CheckpointError
from keras_vit.checkpoints.hf import hf_family, hf_io
from keras_vit.checkpoints.timm import timm_family, timm_io
from tests.checkpoints.family_state import TINY, hf_config, random_params, to_hf, to_timm

LS1 = "Transformer/encoderblock_{}/LayerScale_1/scale"
LS3 = "Transformer/encoderblock_{}/LayerScale_3/scale"


@st.composite
def timm_members(draw):
    """A draw of the options timm's layout holds: distillation, registers (timm: always with
    no_embed_class=True), LayerScale, norm_pre, no_embed_class, a head."""
    registers = draw(st.sampled_from([0, 0, 2]))
    return dict(
        dist=draw(st.booleans()) and not registers,
        registers=registers,
        layer_scale=draw(st.booleans()),
        norm_pre=draw(st.booleans()),
        no_embed_class=bool(registers) or draw(st.booleans()),
        head=draw(st.booleans()),
    )


def _assert_same(got: dict, want: dict):
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        np.testing.assert_array_equal(np.asarray(got[key]), value, err_msg=key)


@given(timm_members(), st.integers(0, 2**16))
def test_timm_family_keys_map_to_the_contract_and_back(options, seed):
    params = random_params(np.random.default_rng(seed), **options)
    state = to_timm(params)
    arrays, heads = timm_io.timm_to_release(state, 4, no_embed_class=options["no_embed_class"])
    assert heads == 4
    np.testing.assert_array_equal(arrays["Transformer/posembed_input/pos_embedding"], params["pos"])
    if options["dist"]:
        np.testing.assert_array_equal(arrays["dist"], params["dist"])
    if options["registers"]:
        assert arrays["reg"].shape == (1, options["registers"], TINY["hidden"])
    if options["layer_scale"]:
        np.testing.assert_array_equal(arrays[LS1.format(1)], params["blocks"][1]["ls1"])
        np.testing.assert_array_equal(arrays[LS3.format(0)], params["blocks"][0]["ls2"])
    else:
        assert not any("LayerScale" in key for key in arrays)
    if options["norm_pre"]:
        np.testing.assert_array_equal(arrays["Transformer/norm_pre/scale"], params["norm_pre.w"])
    if options["dist"] and options["head"]:
        np.testing.assert_array_equal(arrays["head_dist/kernel"], params["head_dist.w"].T)
    _assert_same(timm_io.release_to_timm(arrays), state)


@pytest.mark.parametrize(
    "model_type, options",
    [
        ("deit", dict(dist=True, head=True)),
        ("deit", dict(dist=True, head=False)),
        ("dinov2", dict(layer_scale=True, head=False)),
        ("dinov2_with_registers", dict(layer_scale=True, registers=4, head=False)),
    ],
)
def test_hf_family_keys_match_timm_and_map_back(model_type, options):
    """The same weights spelled in transformers' and in timm's layout read to the same
    release-style arrays (DINOv2 with registers: timm has no such layout with a class
    position row, so only HF is read); the HF writer gives back the HF dict."""
    params = random_params(np.random.default_rng(0), **options)
    state = to_hf(params, model_type)
    config = hf_config(model_type, registers=options.get("registers", 0), head=options["head"])
    arrays = hf_io.hf_to_release(state, config)
    if not options.get("registers"):
        timm_arrays, _ = timm_io.timm_to_release(to_timm(params), 4, no_embed_class=False)
        _assert_same(arrays, timm_arrays)
    else:
        np.testing.assert_array_equal(arrays["reg"], params["reg"])
    assert hf_family.writing_layout(arrays).model_type == model_type
    _assert_same(hf_io.release_to_hf(arrays, 4), state)


@pytest.mark.parametrize(
    "options, head_keys",
    [
        (dict(dist=True, head=True, head_dist=False), {"classifier.weight", "classifier.bias"}),
        (dict(dist=True, head=False, pooler=24), {"pooler.dense.weight", "pooler.dense.bias"}),
    ],
    ids=["DeiTForImageClassification", "DeiTModel-pooler"],
)
def test_hf_deit_classifier_and_pooler_map_to_the_contract_and_back(options, head_keys):
    """`classifier` on the class token beside a distillation token (no `head_dist`), and
    DeiTModel's `pooler.dense` (the release's `pre_logits`), both ways."""
    params = random_params(np.random.default_rng(0), **options)
    state = to_hf(params, "deit")
    assert head_keys <= set(state)
    arrays = hf_io.hf_to_release(state, hf_config("deit", head=options["head"]))
    assert "dist" in arrays and "head_dist/kernel" not in arrays
    if options["head"]:
        np.testing.assert_array_equal(arrays["head/kernel"], params["head.w"].T)
    else:
        np.testing.assert_array_equal(arrays["pre_logits/kernel"], params["pooler.w"].T)
    _assert_same(hf_io.release_to_hf(arrays, 4), state)


def test_hf_deit_with_both_classifier_kinds_is_refused():
    params = random_params(np.random.default_rng(0), dist=True, head=True)
    state = to_hf(params, "deit")
    state["classifier.weight"] = state["cls_classifier.weight"]
    state["classifier.bias"] = state["cls_classifier.bias"]
    with pytest.raises(CheckpointError, match="both `classifier`"):
        hf_io.hf_to_release(state, hf_config("deit", head=True))


def _timm_dinov2():
    return to_timm(random_params(np.random.default_rng(0), layer_scale=True, head=False))


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda s: s.update({"blocks.0.attn.q_norm.weight": np.ones(8, np.float32)}), "q/k"),
        (lambda s: s.update({"attn_pool.latent": np.ones((1, 1, 32), np.float32)}), "MAP"),
        (
            lambda s: s.update({"blocks.0.mlp.fc1.weight": np.ones((128, 32), np.float32)}),
            "SwiGLU",
        ),
        (lambda s: s.update({"reg_token": np.ones((1, 4, 32), np.float32)}), "register"),
    ],
    ids=["qk_norm", "attn_pool", "swiglu_packed", "registers_with_rows"],
)
def test_timm_variants_keras_vit_lacks_are_refused_by_name(change, match):
    state = _timm_dinov2()
    change(state)
    with pytest.raises(CheckpointError, match=match):
        timm_io.timm_to_release(state, 4, no_embed_class=False)


def test_hf_variants_keras_vit_lacks_are_refused_by_name():
    params = random_params(np.random.default_rng(0), layer_scale=True, head=False)
    state = to_hf(params, "dinov2")
    with pytest.raises(CheckpointError, match="use_swiglu_ffn"):
        hf_io.hf_to_release(state, dict(hf_config("dinov2"), use_swiglu_ffn=True))
    classifier = {"dinov2." + k: v for k, v in state.items()}
    classifier["classifier.weight"] = np.ones((5, 64), np.float32)
    with pytest.raises(CheckpointError, match="Dinov2ForImageClassification"):
        hf_io.hf_to_release(classifier, hf_config("dinov2"))
    with pytest.raises(CheckpointError, match="model_type='beit'"):
        hf_io.hf_to_release(state, dict(hf_config("dinov2"), model_type="beit"))


@pytest.mark.parametrize(
    "options, match",
    [
        (dict(norm_pre=True, head=False), "norm_pre"),
        (dict(dist=True, layer_scale=True, head=False), "DeiT"),
        (dict(layer_scale=True, head=True), "Dinov2Model has no head"),
    ],
)
def test_hf_writer_refuses_what_no_hf_model_type_holds(options, match):
    params = random_params(np.random.default_rng(0), **options)
    arrays, _ = timm_io.timm_to_release(to_timm(params), 4, no_embed_class=False)
    with pytest.raises(CheckpointError, match=match):
        hf_io.release_to_hf(arrays, 4)


@pytest.mark.parametrize(
    "config, activation, eps",
    [
        ({"architecture": "vit_base_patch16_clip_quickgelu_224"}, "quick_gelu", 1e-5),
        (
            {"architecture": "vit_base_patch16_clip_224", "pretrained_cfg": {"tag": "openai"}},
            "gelu",
            1e-5,
        ),
        ({"architecture": "x", "model_args": {"act_layer": "quick_gelu"}}, "quick_gelu", 1e-6),
        ({"architecture": "vit_small_patch14_dinov2"}, "gelu", 1e-6),
    ],
)
def test_timm_activation_and_epsilon_come_from_the_architecture(config, activation, eps):
    assert timm_family.mlp_activation_of({}, config, "f") == activation
    assert timm_family.layer_norm_epsilon_of({}, config) == eps


def test_timm_unknown_activation_is_refused_by_name():
    with pytest.raises(CheckpointError, match="act_layer='silu'"):
        timm_family.mlp_activation_of({}, {"model_args": {"act_layer": "silu"}}, "f")


def test_timm_writer_refuses_registers_with_a_class_position_row(tmp_path):
    """HF DINOv2-with-registers (registers after a class row) has no timm layout: timm would
    give the registers position rows."""
    from keras_vit.checkpoints import write_checkpoint
    from keras_vit.checkpoints.base.contents import CheckpointContents

    params = random_params(np.random.default_rng(0), layer_scale=True, registers=4, head=False)
    state = to_hf(params, "dinov2_with_registers")
    arrays = hf_io.hf_to_release(state, hf_config("dinov2_with_registers", registers=4))
    contents = CheckpointContents("x", "hf", arrays, num_heads=4, gelu_approximate=False)
    with pytest.raises(CheckpointError, match="register tokens"):
        write_checkpoint(contents, tmp_path / "m.safetensors", "timm")
    assert not (tmp_path / "m.safetensors").exists()
