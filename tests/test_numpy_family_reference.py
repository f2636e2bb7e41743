"""The PyTorch lane (`-m pytorch`): the NumPy family reference (tests/numpy_family_reference.py),
which the default run compares keras_vit with, against timm's own forward pass.

timm's `VisionTransformer` (vision_transformer.py: `init_values`, `reg_tokens`,
`no_embed_class`, `pre_norm`, `act_layer="quick_gelu"`, `global_pool="avg"`, `mlp_layer=SwiGLU`)
and
`VisionTransformerDistilled` (deit.py), random weights, float32, eval mode; the state dict is
turned into release-style keys here, by hand, from timm's layer definitions. So the
equations the builder is tested against are timm's.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.numpy_family_reference import family_forward

pytestmark = pytest.mark.pytorch
torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")

D, HEADS, PATCH, GRID = 16, 2, 4, (2, 3)


def _release_keys(state, num_layers):
    """timm's state dict -> keras_vit's release-style keys (kernels transposed to in x out)."""
    s = {k: v.detach().numpy().astype(np.float64) for k, v in state.items()}
    out = {
        "embedding/kernel": s["patch_embed.proj.weight"].transpose(2, 3, 1, 0),
        # timm drops the patch bias with pre_norm (CLIP): a zero bias is the same model.
        "embedding/bias": s.get("patch_embed.proj.bias", np.zeros(D)),
        "Transformer/posembed_input/pos_embedding": s["pos_embed"],
        "Transformer/encoder_norm/scale": s["norm.weight"],
        "Transformer/encoder_norm/bias": s["norm.bias"],
    }
    for timm_key, key in (("cls_token", "cls"), ("dist_token", "dist"), ("reg_token", "reg")):
        if timm_key in s:
            out[key] = s[timm_key]
    for timm_key, key in (("head", "head"), ("head_dist", "head_dist")):
        if f"{timm_key}.weight" in s:
            out[f"{key}/kernel"] = s[f"{timm_key}.weight"].T
            out[f"{key}/bias"] = s[f"{timm_key}.bias"]
    if "norm_pre.weight" in s:
        out["Transformer/norm_pre/scale"] = s["norm_pre.weight"]
        out["Transformer/norm_pre/bias"] = s["norm_pre.bias"]
    for i in range(num_layers):
        t, p = f"blocks.{i}.", f"Transformer/encoderblock_{i}/"
        attention = p + "MultiHeadDotProductAttention_1/"
        qkv_w, qkv_b = s[t + "attn.qkv.weight"], s[t + "attn.qkv.bias"]
        for j, name in enumerate(("query", "key", "value")):
            out[attention + name + "/kernel"] = qkv_w[j * D : (j + 1) * D].T
            out[attention + name + "/bias"] = qkv_b[j * D : (j + 1) * D]
        out[attention + "out/kernel"] = s[t + "attn.proj.weight"].T
        out[attention + "out/bias"] = s[t + "attn.proj.bias"]
        for norm, name in (("norm1", "LayerNorm_0"), ("norm2", "LayerNorm_2")):
            out[p + name + "/scale"] = s[t + norm + ".weight"]
            out[p + name + "/bias"] = s[t + norm + ".bias"]
        gated = t + "mlp.fc1_g.weight" in s  # timm's SwiGLU: fc1_g the gate, fc1_x the value
        fcs = [("fc1_x", "Dense_0"), ("fc1_g", "Dense_gate")] if gated else [("fc1", "Dense_0")]
        for fc, name in (*fcs, ("fc2", "Dense_1")):
            out[p + "MlpBlock_3/" + name + "/kernel"] = s[t + f"mlp.{fc}.weight"].T
            out[p + "MlpBlock_3/" + name + "/bias"] = s[t + f"mlp.{fc}.bias"]
        for ls, name in (("ls1", "LayerScale_1"), ("ls2", "LayerScale_3")):
            if t + ls + ".gamma" in s:
                out[p + name + "/scale"] = s[t + ls + ".gamma"]
    return out


def _randomise(model, seed):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2)
            if parameter.ndim == 1 and parameter.shape[0] == D:
                parameter.add_(0.5)  # LayerNorm scales and gammas away from 0
    return model.eval()


CASES = {
    "dinov2_reg_clip": dict(
        init_values=0.5, reg_tokens=2, no_embed_class=True, pre_norm=True, act_layer="quick_gelu"
    ),
    "deit3": dict(init_values=0.5, no_embed_class=True),
    "gap_registers": dict(
        class_token=False, global_pool="avg", fc_norm=False, reg_tokens=3, no_embed_class=True
    ),
    "deit_distilled": dict(distilled=True),
    "swiglu": dict(init_values=0.5, reg_tokens=2, no_embed_class=True, swiglu=True),
}


@pytest.mark.parametrize("case", CASES)
def test_the_numpy_reference_is_timms_forward_pass(case):
    from timm.models.deit import VisionTransformerDistilled
    from timm.models.vision_transformer import VisionTransformer

    options = dict(CASES[case])
    distilled = options.pop("distilled", False)
    swiglu = options.pop("swiglu", False)
    if swiglu:
        from timm.layers import SwiGLU

        options.update(mlp_layer=SwiGLU, act_layer="silu")
    common = dict(
        img_size=(GRID[0] * PATCH, GRID[1] * PATCH),
        patch_size=PATCH,
        embed_dim=D,
        depth=2,
        num_heads=HEADS,
        mlp_ratio=2.0,
        num_classes=5,
    )
    build = VisionTransformerDistilled if distilled else VisionTransformer
    model = _randomise(build(**common, **options), seed=len(case))
    images = np.random.default_rng(0).uniform(-1, 1, (2, *common["img_size"], 3))
    with torch.no_grad():
        expected = model(torch.tensor(images.transpose(0, 3, 1, 2), dtype=torch.float32))
    params = _release_keys(model.state_dict(), 2)
    got = family_forward(
        params,
        images,
        num_heads=HEADS,
        pooling="gap" if options.get("global_pool") == "avg" else "token",
        no_embed_class=options.get("no_embed_class", False),
        mlp_activation="swiglu"
        if swiglu
        else "quick_gelu"
        if options.get("act_layer") == "quick_gelu"
        else "gelu",
        gelu_approximate=False,
    )
    assert np.abs(got).max() > 1e-2
    np.testing.assert_allclose(got, expected.numpy(), atol=1e-5)


def _hf_release_keys(state, num_layers):
    """transformers' Dinov2WithRegistersModel state dict -> release-style keys."""
    s = {k: v.detach().numpy().astype(np.float64) for k, v in state.items()}
    e = "embeddings."
    out = {
        "embedding/kernel": s[e + "patch_embeddings.projection.weight"].transpose(2, 3, 1, 0),
        "embedding/bias": s[e + "patch_embeddings.projection.bias"],
        "cls": s[e + "cls_token"],
        "reg": s[e + "register_tokens"],
        "Transformer/posembed_input/pos_embedding": s[e + "position_embeddings"],
        "Transformer/encoder_norm/scale": s["layernorm.weight"],
        "Transformer/encoder_norm/bias": s["layernorm.bias"],
    }
    for i in range(num_layers):
        t, p = f"encoder.layer.{i}.", f"Transformer/encoderblock_{i}/"
        attention = p + "MultiHeadDotProductAttention_1/"
        # transformers 5 names them q/k/v/o_proj (4.x: attention.attention.query, ...).
        for name, hf in (("query", "q"), ("key", "k"), ("value", "v"), ("out", "o")):
            out[attention + name + "/kernel"] = s[t + f"attention.{hf}_proj.weight"].T
            out[attention + name + "/bias"] = s[t + f"attention.{hf}_proj.bias"]
        for norm, name in (("norm1", "LayerNorm_0"), ("norm2", "LayerNorm_2")):
            out[p + name + "/scale"] = s[t + norm + ".weight"]
            out[p + name + "/bias"] = s[t + norm + ".bias"]
        gated = t + "mlp.fc1_g.weight" in s  # timm's SwiGLU: fc1_g the gate, fc1_x the value
        fcs = [("fc1_x", "Dense_0"), ("fc1_g", "Dense_gate")] if gated else [("fc1", "Dense_0")]
        for fc, name in (*fcs, ("fc2", "Dense_1")):
            out[p + "MlpBlock_3/" + name + "/kernel"] = s[t + f"mlp.{fc}.weight"].T
            out[p + "MlpBlock_3/" + name + "/bias"] = s[t + f"mlp.{fc}.bias"]
        out[p + "LayerScale_1/scale"] = s[t + "layer_scale1.lambda1"]
        out[p + "LayerScale_3/scale"] = s[t + "layer_scale2.lambda1"]
    return out


def test_the_numpy_reference_is_hf_dinov2_with_registers():
    """The contract's token order: the class token has a position row, the registers none
    (transformers' `Dinov2WithRegistersEmbeddings`); the pooled output is the normalised
    class token."""
    transformers = pytest.importorskip("transformers")
    config = transformers.Dinov2WithRegistersConfig(
        hidden_size=D,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        mlp_ratio=2,
        image_size=2 * PATCH,
        patch_size=PATCH,
        num_register_tokens=2,
        layerscale_value=0.5,
        hidden_act="gelu",
        layer_norm_eps=1e-6,
    )
    model = _randomise(transformers.Dinov2WithRegistersModel(config), seed=3)
    images = np.random.default_rng(1).uniform(-1, 1, (2, 2 * PATCH, 2 * PATCH, 3))
    with torch.no_grad():
        pixels = torch.tensor(images.transpose(0, 3, 1, 2), dtype=torch.float32)
        expected = model(pixel_values=pixels).pooler_output.numpy()
    got = family_forward(
        _hf_release_keys(model.state_dict(), 2), images, num_heads=HEADS, gelu_approximate=False
    )
    assert np.abs(got).max() > 1e-2
    np.testing.assert_allclose(got, expected, atol=1e-5)


def _dinov3_release_keys(s, num_layers, *, prefix, names, qkv_fused):
    """A DINOv3 state dict (timm Eva or transformers DINOv3ViTModel) -> release-style keys.
    `names` maps the release's parts to the library's key names."""
    s = {k: v.detach().numpy().astype(np.float64) for k, v in s.items()}
    out = {
        "embedding/kernel": s[names["patch"] + ".weight"].transpose(2, 3, 1, 0),
        "embedding/bias": s[names["patch"] + ".bias"],
        "cls": s[names["cls"]],
        "reg": s[names["reg"]],
        "Transformer/encoder_norm/scale": s["norm.weight"],
        "Transformer/encoder_norm/bias": s["norm.bias"],
    }
    for i in range(num_layers):
        t, p = f"{prefix}{i}.", f"Transformer/encoderblock_{i}/"
        attention = p + "MultiHeadDotProductAttention_1/"
        for j, name in enumerate(("query", "key", "value")):
            if qkv_fused:
                out[attention + name + "/kernel"] = s[t + "attn.qkv.weight"][j * D : (j + 1) * D].T
                bias = t + f"attn.{name[0]}_bias"
            else:
                out[attention + name + "/kernel"] = s[t + f"attention.{name[0]}_proj.weight"].T
                bias = t + f"attention.{name[0]}_proj.bias"
            if bias in s:
                out[attention + name + "/bias"] = s[bias]
        out[attention + "out/kernel"] = s[t + names["proj"] + ".weight"].T
        out[attention + "out/bias"] = s[t + names["proj"] + ".bias"]
        for norm, name in (("norm1", "LayerNorm_0"), ("norm2", "LayerNorm_2")):
            out[p + name + "/scale"] = s[t + norm + ".weight"]
            out[p + name + "/bias"] = s[t + norm + ".bias"]
        for fc, name in zip(names["mlp"], ("Dense_0", "Dense_1"), strict=True):
            out[p + "MlpBlock_3/" + name + "/kernel"] = s[t + f"mlp.{fc}.weight"].T
            out[p + "MlpBlock_3/" + name + "/bias"] = s[t + f"mlp.{fc}.bias"]
        out[p + "LayerScale_1/scale"] = s[t + names["ls"][0]]
        out[p + "LayerScale_3/scale"] = s[t + names["ls"][1]]
    if "head.weight" in s:
        out["head/kernel"], out["head/bias"] = s["head.weight"].T, s["head.bias"]
    return out


@pytest.mark.parametrize("qkv_bias", [False, True])
@pytest.mark.parametrize("size", [(8, 12), (16, 8)])
def test_the_numpy_rope_reference_is_timms_dinov3(qkv_bias, size):
    """timm's Eva with `rope_type="dinov3"` (its DINOv3 definitions, tiny), at its own size
    and, with `dynamic_img_size`, at another; `global_pool` "token" and "avg" (patches)."""
    from functools import partial

    from timm.layers import LayerNorm
    from timm.models.eva import Eva

    for pool in ("token", "avg"):
        model = Eva(
            img_size=(8, 12),
            patch_size=PATCH,
            embed_dim=D,
            depth=2,
            num_heads=HEADS,
            mlp_ratio=2.0,
            num_classes=5,
            qkv_bias=qkv_bias,
            init_values=0.5,
            rope_type="dinov3",
            rope_temperature=100,
            rope_rotate_half=True,
            use_rot_pos_emb=True,
            use_abs_pos_emb=False,
            num_reg_tokens=2,
            use_fc_norm=False,
            global_pool=pool,
            dynamic_img_size=True,
            norm_layer=partial(LayerNorm, eps=1e-5),
        )
        model = _randomise(model, seed=5)
        images = np.random.default_rng(2).uniform(-1, 1, (2, *size, 3))
        with torch.no_grad():
            expected = model(torch.tensor(images.transpose(0, 3, 1, 2), dtype=torch.float32))
        names = dict(
            patch="patch_embed.proj",
            cls="cls_token",
            reg="reg_token",
            proj="attn.proj",
            mlp=("fc1", "fc2"),
            ls=("gamma_1", "gamma_2"),
        )
        params = _dinov3_release_keys(
            model.state_dict(), 2, prefix="blocks.", names=names, qkv_fused=True
        )
        got = family_forward(
            params,
            images,
            num_heads=HEADS,
            pooling="token" if pool == "token" else "gap",
            pool_patches=True,
            gelu_approximate=False,
            layer_norm_epsilon=1e-5,
            rope=True,
        )
        assert np.abs(got).max() > 1e-2
        np.testing.assert_allclose(got, expected.numpy(), atol=1e-5)


def test_the_numpy_rope_reference_is_hf_dinov3():
    """transformers' `DINOv3ViTModel` (query and value bias, no key bias), its pooled output
    (the normalised class token) at a non-square size."""
    transformers = pytest.importorskip("transformers")
    config = transformers.DINOv3ViTConfig(
        hidden_size=D,
        intermediate_size=2 * D,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        patch_size=PATCH,
        image_size=8,
        num_register_tokens=2,
        layerscale_value=0.5,
    )
    model = _randomise(transformers.DINOv3ViTModel(config), seed=4)
    images = np.random.default_rng(5).uniform(-1, 1, (2, 8, 12, 3))
    with torch.no_grad():
        pixels = torch.tensor(images.transpose(0, 3, 1, 2), dtype=torch.float32)
        expected = model(pixel_values=pixels).pooler_output.numpy()
    names = dict(
        patch="embeddings.patch_embeddings",
        cls="embeddings.cls_token",
        reg="embeddings.register_tokens",
        proj="attention.o_proj",
        mlp=("up_proj", "down_proj"),
        ls=("layer_scale1.lambda1", "layer_scale2.lambda1"),
    )
    params = _dinov3_release_keys(
        model.state_dict(), 2, prefix="model.layer.", names=names, qkv_fused=False
    )
    got = family_forward(
        params, images, num_heads=HEADS, gelu_approximate=False, layer_norm_epsilon=1e-5, rope=True
    )
    assert np.abs(got).max() > 1e-2
    np.testing.assert_allclose(got, expected, atol=1e-5)
