"""Where does a ViT look? Attention rollout over a real photo, saved as PNG (paper figure 6).

What it shows: `keras_vit.attention_maps` (the softmax attention of every block, computed
from the model's own weights, nothing added to the model), `keras_vit.attention_rollout`
(Abnar & Zuidema 2020: heads fused, identity added for the residual path, blocks multiplied;
the class token's share on each patch), and `keras_vit.visualize.overlay_figure` /
`save_png`: the map stretched over the full-resolution photo, at the photo's aspect ratio.
With `--grid` it also saves one panel per block (`block_attention_map`). The photo is one of
scikit-image's sample images (`skimage.data`, installed with the `dev` extra) or your own file;
it is prepared as in evaluation (`keras_vit.data.eval_preprocess`: bilinear resize
to the model's input, then scaling to [-1, 1]). Non-square inputs work: the token grid is
read from the model.

Quick try (a tiny, untrained ViT with a non-square 32x48 input on scikit-image's cat photo,
so the map shows the mechanics, not learned attention; ~15 s on 2 CPU cores):

    python examples/visualize_attention.py --quick

Full size (a fine-tuned model of yours, a `.keras` file or a `keras-vit train` run
directory, or a published ImageNet checkpoint, downloaded into the Keras cache):

    python examples/visualize_attention.py --model runs/pets/best.keras --photo chelsea --grid
    python examples/visualize_attention.py --variant B16 --image-size 384 --num-classes 1000 \
        --weights imagenet21k+imagenet2012 --image my_photo.jpg --out maps

Writes `<out>/attention_rollout.png` (and `attention_layers.png` with `--grid`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# --quick: 32x48 input (the cat photo is 300x451), 8x8 patches -> a 4x6 token grid.
TINY = dict(patch_size=8, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2)
QUICK_IMAGE_SIZE = (32, 48)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Attention rollout overlay for one image.")
    parser.add_argument("--quick", action="store_true", help="tiny untrained ViT, cat photo")
    parser.add_argument("--model", default=None, help="a .keras file or a run directory")
    parser.add_argument("--variant", default="B16", help="named ViT for --weights: B16, L16, ...")
    parser.add_argument("--weights", default=None, help="checkpoint path or published name")
    parser.add_argument("--image-size", type=int, default=384, help="input size for --weights")
    parser.add_argument("--num-classes", type=int, default=1000, help="head size for --weights")
    parser.add_argument(
        "--photo", default="chelsea", help="a skimage.data photo: chelsea, astronaut, coffee, ..."
    )
    parser.add_argument("--image", default=None, help="your own image file (instead of --photo)")
    parser.add_argument("--head-fusion", choices=("mean", "max", "min"), default="mean")
    parser.add_argument("--discard-ratio", type=float, default=0.0)
    parser.add_argument("--grid", action="store_true", help="also one panel per block")
    parser.add_argument("--out", default=None, help="output folder (default: a temp folder)")
    return parser


def read_photo(name: str | None, path: str | None):
    """uint8 `(height, width, 3)` pixels of an image file or a `skimage.data` photo."""
    import numpy as np

    if path:
        from PIL import Image

        return np.asarray(Image.open(path).convert("RGB"))
    import skimage.data

    photo = getattr(skimage.data, name, None)
    if photo is None:
        raise SystemExit(f"skimage.data has no photo {name!r}; try chelsea, astronaut, coffee")
    return np.asarray(photo())


def get_model(args):
    """The model to inspect: tiny (quick), a saved model / run directory, or a checkpoint."""
    import keras

    import keras_vit

    if args.quick:
        keras.utils.set_random_seed(0)
        return keras_vit.ViT(**TINY, num_classes=10, image_size=QUICK_IMAGE_SIZE, name="vit_tiny")
    if args.model:
        path = os.path.join(args.model, "best.keras") if os.path.isdir(args.model) else args.model
        return keras.saving.load_model(path, compile=False)  # keras_vit's layers are registered
    if args.weights:
        builder = getattr(keras_vit, f"ViT_{args.variant}")
        return builder(
            num_classes=args.num_classes, image_size=args.image_size, weights=args.weights
        )
    raise SystemExit("give --model or --weights (or use --quick)")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="visualize_attention_")
    photo = read_photo(args.photo, args.image)

    import numpy as np

    import keras_vit
    from keras_vit import visualize
    from keras_vit.data import eval_preprocess

    model = get_model(args)
    _, height, width, channels = model.inputs[0].shape
    images = eval_preprocess(photo, (height, width), channels)[None]

    maps = keras_vit.attention_maps(model, images)  # one (1, heads, T, T) array per block
    rollout = keras_vit.attention_rollout(
        maps, model, head_fusion=args.head_fusion, discard_ratio=args.discard_ratio
    )[0]
    logits = np.asarray(model.predict(images, verbose=0), dtype="float64")[0]
    probabilities = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    top = np.argsort(-probabilities)[:3]
    print("top classes: " + ", ".join(f"class {i} {probabilities[i]:.3f}" for i in top))
    print(
        f"model {model.name}: input {height}x{width}, {len(maps)} blocks, {maps[0].shape[1]} heads"
    )
    print(
        f"rollout grid {rollout.shape[0]}x{rollout.shape[1]}; "
        f"class-token share on the patches {rollout.sum():.3f}"
    )

    title = f"attention rollout ({args.head_fusion}), {model.name}"
    path = visualize.save_png(
        visualize.overlay_figure(photo, rollout, title), os.path.join(out, "attention_rollout.png")
    )
    print(f"photo {photo.shape[1]}x{photo.shape[0]} -> {path}")
    if args.grid:
        panels = [visualize.block_attention_map(layer_map, model)[0] for layer_map in maps]
        titles = [f"block {i}" for i in range(len(maps))]
        grid_path = visualize.save_png(
            visualize.layer_grid_figure(photo, panels, titles),
            os.path.join(out, "attention_layers.png"),
        )
        print(f"per-block maps -> {grid_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
