"""Functional ViT builders: `ViT(...)` and the named variants (paper section 3.1, table 1)."""

from __future__ import annotations

from keras_vit.model.builder import named_builder, vision_transformer
from keras_vit.spec import configs


def ViT(
    *,
    patch_size=16,
    hidden_dim=768,
    num_heads=12,
    mlp_dim=3072,
    num_layers=12,
    num_classes=1000,
    image_size=224,
    channels=3,
    include_top=True,
    pooling="token",
    representation_size=None,
    dropout_rate=0.0,
    attention_dropout_rate=0.0,
    drop_path_rate=0.0,
    classifier_activation=None,
    gelu_approximate=True,
    layer_norm_epsilon=1e-6,
    return_sequence=False,
    position_embedding="learned",
    input_preprocessing="[-1,1]",
    dynamic_image_size=False,
    final_norm="tokens",
    layer_scale_init=None,
    num_register_tokens=0,
    distilled=False,
    distillation_head=True,
    no_embed_class=False,
    norm_pre=False,
    mlp_activation="gelu",
    qkv_bias="qkv",
    remat=False,
    weights=None,
    name="vit",
):
    """Builds a Vision Transformer as a functional `keras.Model` (Dosovitskiy et al. 2021).

    Paper: https://arxiv.org/abs/2010.11929, section 3.1. Layer and weight names follow the
    official checkpoints, so `keras_vit.checkpoints.load_weights` maps them one to one.

    Args:
        patch_size: int or (height, width) of a patch in pixels.
        hidden_dim: token width D; divisible by `num_heads`.
        num_heads: attention heads per block.
        mlp_dim: inner MLP width.
        num_layers: Transformer blocks.
        num_classes: outputs of the head (default 1000).
        image_size: int or (height, width) in pixels; each a multiple of the patch size.
        channels: image channels (default 3).
        include_top: if False, the model returns the pooled feature `(batch, D)` (after
            `pre_logits` when `representation_size` is set) instead of logits.
        pooling: "token" (class token, default), "gap" (mean over tokens, no class token),
            "patch_gap" (a class token in the sequence, pooled: the mean of the patch tokens,
            class, distillation and register tokens left out; timm's `global_pool="avg"` on
            a class-token model, DINOv3's timm default) or "map" (big_vision's multihead
            attention pooling, no class token).
        representation_size: width of the optional `pre_logits` dense + tanh layer (the
            ImageNet-21k checkpoints have it); None (default) for none, except that a
            `weights` file with pre_logits under a head of `num_classes` outputs (an original
            ImageNet-21k file with num_classes=21843) gets its pre_logits width, so the file
            is kept whole for prediction.
        dropout_rate, attention_dropout_rate: dropout rates in [0, 1).
        drop_path_rate: stochastic depth at the last block, rising linearly from 0.
        classifier_activation: activation of the head; None (default) returns logits.
        gelu_approximate: True (release, tanh; timm `act_layer="gelu_tanh"`, transformers
            "gelu_pytorch_tanh": SigLIP 2) or False (exact erf; timm's and transformers'
            "gelu"). The MLPs of the blocks and of the MAP head take it.
        layer_norm_epsilon: default 1e-6 as in the release.
        return_sequence: with include_top=False, return the `(batch, num_tokens, D)` output of
            the final LayerNorm instead of the pooled feature.
        position_embedding: "learned" (default; the release's 1-D table, resized on load
            for another grid), "sincos2d" (fixed 2-D sine-cosine table, big_vision's
            `posemb_sincos_2d`; no weights; hidden_dim a multiple of 4), "none" (the
            paper's appendix D.4 ablation) or "rope" (DINOv3's rotary position embedding,
            Simeoni et al. 2025: each block's attention rotates the patch tokens' queries
            and keys by their normalised grid coordinates, base 100; the class, distillation
            and register tokens are not rotated; no weights, any image size with nothing to
            resize; head width a multiple of 4; `keras_vit.layers.rotary`). Kept in the
            model's config (`.keras` files).
        input_preprocessing: the pixel scaling the weights expect, recorded in the model
            (its `embedding` layer) and applied by `predict`, `evaluate` and the SavedModel
            export: "[-1,1]" (default, the release's) or "imagenet" (ImageNet mean/std).
            The model itself never rescales its input.
        dynamic_image_size: if True, the model takes images of any size (each side a multiple
            of the patch) and resizes its position table, stored for `image_size`, to the
            input's grid in the forward pass (corner-aligned bilinear, the release's resize:
            equal to a model built at that size and loaded with the resized table), as
            timm's `dynamic_img_size` and Hugging Face's `interpolate_pos_encoding` offer.
            The input is then `(batch, None, None, channels)`. Needs
            position_embedding "learned", "none" or "rope" (which rotates by each input's
            grid). Default False. A side that is not a
            multiple of the patch is an error naming the patch size and the shape (a
            ValueError when the size is known at trace time, else TensorFlow's
            InvalidArgumentError when the graph runs); the image is never cropped.
        final_norm: where the final LayerNorm goes: "tokens" (default, the release's
            `encoder_norm` on every token before pooling) or "pooled" (timm's `fc_norm`,
            e.g. its GAP models: a LayerNorm `fc_norm` on the pooled `(batch, D)` feature,
            no `encoder_norm`). "pooled" needs pooling "token", "gap" or "patch_gap" and
            return_sequence=False. Kept in the model (its `fc_norm` layer) and read back
            from files (timm `fc_norm.*`, keras_vit's `.npz` key `fc_norm/scale`).
        layer_scale_init: LayerScale (Touvron et al. 2021, CaiT section 2 / DeiT III; timm
            `init_values`, HF Dinov2 `layerscale_value`): a learned per-channel gamma,
            initialised to this value, on both residual branches of every block,
            x = x + ls1 * MSA(LN(x)); x = x + ls2 * MLP(LN(x)). None (default): none.
        num_register_tokens: register tokens (Darcet et al. 2024, "Vision Transformers Need
            Registers"; DINOv2 "-reg"): R learned tokens after the class (and distillation)
            token, with no position; excluded from pooling and attention-map grids.
            Default 0.
        distilled: DeiT's distillation token (Touvron et al. 2021, "Training data-efficient
            image transformers", section 5; timm deit.py `VisionTransformerDistilled`, HF
            `DeiTForImageClassificationWithTeacher`): a second learned token and its own
            zero-initialised head `head_dist`; the logits are (head(token 0) +
            head_dist(token 1)) / 2, in training too, so both heads are trained. Needs
            pooling="token" and final_norm="tokens"; a representation_size only with
            include_top=False (HF `DeiTModel`'s pooler: dense + tanh on the class token, its
            `pooler_output`). Default False.
        distillation_head: with distilled=True, whether the distillation token has its
            head `head_dist` (True, default). False: the token is kept (position row and
            attention) but has no head; the logits are `head` on the class token alone (HF
            `DeiTForImageClassification`, whose `classifier` reads token 0). Needs
            distilled=True; timm and the release's .npz cannot hold such a model.
        no_embed_class: the position table has rows for the patch tokens only; the class
            and distillation tokens get no position (timm `no_embed_class=True`; DeiT III,
            timm's register models). Default False.
        norm_pre: a LayerNorm (`norm_pre`) after the position embedding, before the blocks
            (timm `pre_norm=True`, CLIP image towers). Default False.
        mlp_activation: "gelu" (default; its form as `gelu_approximate` says),
            "quick_gelu" (x * sigmoid(1.702 x); OpenAI CLIP, timm `act_layer="quick_gelu"`)
            or "swiglu": the gated MLP `Dense_1(silu(x W_gate) * (x W_0))` of DINOv3 H+/16
            and 7B/16 (timm `swiglu_mlp=True`, HF `use_gated_mlp=True` with
            `hidden_act="silu"`), `mlp_dim` its gated width; not with pooling "map".
        qkv_bias: which attention projections have a bias: "qkv" (default, the release's),
            "qv" (no key bias: EVA / DINOv3 with timm `qkv_bias=True`, HF `DINOv3ViTConfig`
            `key_bias=False`) or "none" (timm's DINOv3 `qkv_bias=False`). A key bias adds
            the same logit to every key of a query, so it never changes the output.
        remat: False (default) or True: each Transformer block recomputes its activations
            in the backward pass instead of storing them (`keras.remat`; `TransformerBlock`'s
            `remat`): less memory per training step at fine-tuning resolutions, about one
            more forward pass of compute. Kept in the `.keras` file. On Keras' JAX backend
            it adds XLA:CPU's memory-scheduling flag to `XLA_FLAGS` first (without it XLA on
            CPU schedules the recomputation away; `keras_vit.kernels.dispatch.
            prefer_memory_schedule`), which takes effect when this is the process's first
            JAX computation.
        weights: None, a checkpoint path of any format keras_vit reads (`.npz`, `.keras`, a
            Hugging Face folder, a timm `.safetensors`), or a published checkpoint name
            (see `keras_vit.checkpoints`).
        name: model name.

    With `pooling="token"` and `return_sequence=False` only the class token of the last
    block's output is read, so that block computes only it (`num_output_tokens=1`: one
    query, keys and values from all tokens). The pooled feature and logits are unchanged;
    a 12-block model costs ~7% fewer FLOPs. The last block's output is then
    `(batch, 1, D)`; `return_sequence=True` or `keras_vit.feature_extractor` give every token.

    Inputs:
        `images`: `(batch, height, width, channels)` scaled to [-1, 1]
        (see `keras_vit.preprocess_inputs`); float64/float32/uint8 are accepted.

    Returns:
        A `keras.Model`. Logits `(batch, num_classes)` are float32 under every dtype policy.

    Raises:
        ValueError: image size not divisible by the patch, hidden_dim not divisible by
            num_heads, unknown pooling or position_embedding, non-positive sizes, rates
            outside [0, 1), an unknown final_norm or "pooled" with pooling "map" or
            return_sequence=True.
    """
    return vision_transformer(stem=None, **locals())  # every argument, by name


def _named_builder(variant: str):
    """The thin shortcut `ViT_B16` etc. for one row of `configs.VIT_CONFIGS`."""
    config = configs.get_config(variant)
    summary = (
        f"ViT-{variant}: patch {config.patch_size}, hidden_dim {config.hidden_dim}, "
        f"mlp_dim {config.mlp_dim}, {config.num_heads} heads, {config.num_layers} layers "
        "(paper table 1)."
    )
    return named_builder(ViT, config, configs.builder_name(variant), summary)


NAMED_BUILDERS = {configs.builder_name(v): _named_builder(v) for v in configs.VIT_CONFIGS}
"""`ViT_Ti16`, `ViT_S16`, ... `ViT_H14`: one shortcut per row of `configs.VIT_CONFIGS`, named
by `configs.builder_name` (a new row is a new shortcut)."""
globals().update(NAMED_BUILDERS)


def image_shape_of(model) -> tuple[int, int, int]:
    """`(height, width, channels)` of the images a model takes: its fixed input size, or for a
    ViT built with `dynamic_image_size=True` (input `(batch, None, None, channels)`) the size
    of its position table (`PatchEmbed`'s `image_size`), the size it was built for.

    Raises:
        ValueError: the model's input is not one `(batch, height, width, channels)` image, or
            has no known size.
    """
    from keras_vit.layers import PatchEmbed

    shape = tuple(model.inputs[0].shape[1:]) if len(model.inputs) == 1 else ()
    if len(shape) != 3 or shape[-1] is None:
        raise ValueError(
            f"The model needs one (height, width, channels) image input; it has {shape}."
        )
    if None in shape[:2]:
        native = [
            layer.native_image_size
            for layer in model._flatten_layers()
            if isinstance(layer, PatchEmbed) and layer.native_image_size
        ]
        if not native:
            raise ValueError(f"The model's input has no fixed size to feed it at: {shape}.")
        shape = (*native[0], shape[-1])
    return tuple(int(s) for s in shape)
