"""Hybrid models: a CNN feature map as the Transformer's input (paper section 3.1).

What it shows:

1. `keras_vit.R50_B16`: the release's R50+ViT-B/16 (BiT ResNet-50 stages (3, 4, 9) with
   weight-standardised convolutions and GroupNorm, then a ViT-B on its 14x14 feature map at
   224). Its parameter count is checked against the release's 98,659,112, and with `--weights`
   it loads an official `R50+ViT-B_16.npz` by the checkpoint's own key names.
2. `keras_vit.HybridViT(backbone=...)`: a ViT on any `keras.applications` CNN, here ResNet50 (or
   MobileNetV2) cut at a named layer, with the CNN's own preprocessing kept inside the
   backbone model, since keras_vit models take images in [-1, 1]. The whole model trains with
   `fit` and saves as `.keras` (`weights=None`: the CNN starts from scratch; use
   `--cnn-weights imagenet` to start from ImageNet weights, downloaded into the Keras cache).

Each model is run on one real photo (scikit-image's cat) and prints its output shape.

Quick try (R50+B/16 is built and counted, but not run; the two hybrids that run are small:
a one-stage BiT ResNet under a 1-block ViT, and a 1-block ViT on MobileNetV2 at 64x64;
~30 s on 2 CPU cores):

    python examples/hybrid_and_custom_backbone.py --quick

Full size (R50+B/16 at 224 run on the photo, and a ViT-B on ResNet50 cut after stage 4,
14x14 tokens):

    python examples/hybrid_and_custom_backbone.py --cnn resnet50 --image-size 224 \
        --out hybrids [--weights path/to/R50+ViT-B_16.npz]

Saves the keras.applications hybrid as `<out>/cnn_hybrid.keras`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RELEASE_R50_B16_PARAMS = 98_659_112  # R50+ViT-B/16 at 224, 1000 classes (the release)
# keras.applications CNN -> (builder name, feature layer, preprocessing module).
CNNS = {
    "resnet50": ("ResNet50", "conv4_block6_out", "resnet50"),  # stride 16
    "mobilenetv2": ("MobileNetV2", "block_13_expand_relu", "mobilenet_v2"),  # stride 16
}
TINY_VIT = dict(hidden_dim=32, num_heads=2, mlp_dim=64, num_layers=1)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Hybrid CNN + ViT models.")
    parser.add_argument("--quick", action="store_true", help="count R50+B/16, run small hybrids")
    parser.add_argument("--weights", default=None, help="R50+ViT-B_16 checkpoint (.npz or name)")
    parser.add_argument("--cnn", choices=sorted(CNNS), default="resnet50")
    parser.add_argument(
        "--cnn-weights", default=None, help='keras.applications weights: None or "imagenet"'
    )
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-classes", type=int, default=10, help="classes of the CNN hybrid")
    parser.add_argument("--out", default=None, help="output folder (default: a temp folder)")
    return parser


def cnn_backbone(name: str, image_size: int, weights):
    """A keras.applications CNN cut at a stride-16 layer, its preprocessing inside.

    The hybrid's input is in [-1, 1]; keras.applications models expect 0-255 pixels through
    their own `preprocess_input`. A Rescaling layer brings the pixels back to 0-255 and the
    application's preprocessing is applied in the graph, so the backbone sees what it was
    trained on.
    """
    import keras

    app_name, layer_name, module_name = CNNS[name]
    app = getattr(keras.applications, app_name)(
        include_top=False, weights=weights, input_shape=(image_size, image_size, 3)
    )
    images = keras.Input((image_size, image_size, 3), name="images")
    pixels = keras.layers.Rescaling(127.5, offset=127.5, name="to_pixels")(images)
    if module_name == "mobilenet_v2":  # preprocess_input: x / 127.5 - 1 (back to [-1, 1])
        prepared = keras.layers.Rescaling(1 / 127.5, offset=-1.0, name="app_preprocess")(pixels)
    else:  # resnet50: RGB -> BGR, minus the ImageNet channel means
        bgr = keras.ops.flip(pixels, axis=-1)
        prepared = keras.layers.Normalization(
            mean=[103.939, 116.779, 123.68], variance=[1.0, 1.0, 1.0], name="imagenet_mean"
        )(bgr)
    cut = keras.Model(app.inputs, app.get_layer(layer_name).output, name=f"{name}_stem")
    return keras.Model(images, cut(prepared), name=f"{name}_backbone")


def photo_batch(image_size: int):
    """scikit-image's cat photo, resized to `image_size` and scaled to [-1, 1], batch of 1."""
    import skimage.data

    from keras_vit.data import eval_preprocess

    return eval_preprocess(skimage.data.chelsea(), (image_size, image_size), 3)[None]


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="hybrid_")
    os.makedirs(out, exist_ok=True)
    if args.quick:
        args.cnn, args.image_size, args.cnn_weights = "mobilenetv2", 64, None

    import keras
    import numpy as np

    import keras_vit

    keras.utils.set_random_seed(0)

    # 1. The release's R50+ViT-B/16 (98.7 M parameters at 224 with 1000 classes).
    r50 = keras_vit.R50_B16(num_classes=1000, image_size=224, weights=args.weights)
    count = r50.count_params()
    print(f"R50+ViT-B/16: {count:,} parameters (release: {RELEASE_R50_B16_PARAMS:,})")
    if not args.quick:
        logits = r50.predict(photo_batch(224), verbose=0)
        print(f"R50+ViT-B/16 on the photo: logits {logits.shape}")
    del r50

    # 1b. A small BiT hybrid with the same structure (quick), run on the photo.
    small = keras_vit.HybridViT(
        resnet_stages=(1,),
        resnet_width=16,
        resnet_groups=8,
        **TINY_VIT,
        num_classes=args.num_classes,
        image_size=32,
        name="bit_hybrid_small",
    )
    logits = small.predict(photo_batch(32), verbose=0)
    tokens = small.get_layer("posembed_input").weights[0].shape[1] - 1
    print(
        f"small BiT hybrid: {small.count_params():,} parameters, {tokens} tokens, "
        f"logits {logits.shape}"
    )

    # 2. A ViT on a keras.applications CNN (feature map stride 16).
    backbone = cnn_backbone(args.cnn, args.image_size, args.cnn_weights)
    vit = (
        TINY_VIT if args.quick else dict(hidden_dim=768, num_heads=12, mlp_dim=3072, num_layers=12)
    )
    model = keras_vit.HybridViT(
        backbone=backbone,
        patch_size=1,
        **vit,
        num_classes=args.num_classes,
        image_size=args.image_size,
        name=f"{args.cnn}_vit",
    )
    feature_map = backbone.outputs[0].shape
    # A few `fit` steps on the photo (label 0): the zero-initialised head becomes non-zero,
    # so the save/reload check below compares logits that depend on the weights.
    photos = np.repeat(photo_batch(args.image_size), 2, axis=0)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(photos, np.zeros(len(photos), "int32"), epochs=3, verbose=0)
    logits = model.predict(photo_batch(args.image_size), verbose=0)
    print(
        f"{args.cnn} hybrid: feature map {feature_map[1]}x{feature_map[2]}x{feature_map[3]} -> "
        f"{feature_map[1] * feature_map[2]} tokens, {model.count_params():,} parameters, "
        f"logits {logits.shape}, max |logit| {abs(logits).max():.4f} after 3 fit steps"
    )
    path = os.path.join(out, "cnn_hybrid.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    same = bool(
        abs(reloaded.predict(photo_batch(args.image_size), verbose=0) - logits).max() < 1e-5
    )
    print(f"saved {path}; reloaded model gives the same logits: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
