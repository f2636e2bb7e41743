"""Fine-tune a pre-trained ViT at a higher resolution: the paper's transfer pipeline (section 4).

What it shows, step by step (paper sections 3.2 and 4.1, appendix B.1.1):

1. load an official checkpoint (`.npz` path or published name) into a ViT with the builders'
   `weights=` argument (`keras_vit.load_weights` underneath: official key names,
   a `pre_logits` layer dropped as the release does for fine-tuning);
2. `keras_vit.finetune(model, num_classes, image_size=...)`: a new model with the
   pre-trained body, the position-embedding table resized (2D interpolation) to the larger
   token grid, and a zero-initialised head for the new classes;
3. train with the release's fine-tuning recipe (`keras_vit.train.finetune_optimizer`:
   SGD momentum 0.9, global-norm clipping 1.0, warmup then cosine decay) and print the
   held-out accuracy.

Quick try (~40 s on 2 CPU cores). There is no published checkpoint offline, so it first writes
one itself: a tiny ViT trained briefly on the embedded MNIST images at 16x16 and saved with
`keras_vit.checkpoints.save_npz` in the official layout; then it fine-tunes that checkpoint on
the embedded UCI digits at 24x24 (grid 4x4 -> 6x6):

    python examples/finetune_pretrained.py --quick

Full size (ViT-B/16 pre-trained on ImageNet-21k at 224, fine-tuned on Oxford-IIIT Pets at 384
as in the paper; the checkpoint is downloaded into the Keras cache, the TFDS dataset must be
prepared in ~/tensorflow_datasets):

    python examples/finetune_pretrained.py --model B16 --weights imagenet21k \
        --dataset oxford_iiit_pet --image-size 384 --steps 500 --batch-size 512 --lr 0.003

`--weights` also takes a local file, e.g. the `model.npz` written by
`examples/train_from_scratch.py` (then pass `--pretrain-image-size` and `--model` of that run).

Prints `fine-tuned test accuracy: <value>` as its last line.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# --quick: a tiny ViT; 4x4 patches, so 16x16 images give a 4x4 grid and 24x24 a 6x6 grid.
TINY = dict(patch_size=4, hidden_dim=32, num_heads=2, mlp_dim=64, num_layers=2)
QUICK_PRETRAIN_SIZE = 16
QUICK_IMAGE_SIZE = 24


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Fine-tune an official ViT checkpoint at a higher resolution."
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="write a tiny checkpoint first (MNIST 16px), fine-tune it on digits at 24px",
    )
    parser.add_argument(
        "--weights",
        default="imagenet21k",
        help='checkpoint: an .npz path or a published name ("imagenet21k", "ViT-B_16", ...)',
    )
    parser.add_argument(
        "--model", default="B16", help='"tiny" or a named variant: Ti16, S16, B16, B32, L16, ...'
    )
    parser.add_argument(
        "--pretrain-image-size",
        type=int,
        default=224,
        help="resolution the checkpoint was trained at (default 224)",
    )
    parser.add_argument(
        "--dataset",
        default="oxford_iiit_pet",
        help='"digits"/"mnist" (embedded), a TFDS name, or an image folder',
    )
    parser.add_argument("--data-dir", default=None, help="TFDS data_dir (never downloads)")
    parser.add_argument("--image-size", type=int, default=384, help="fine-tuning resolution")
    parser.add_argument("--steps", type=int, default=500, help="fine-tuning steps")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--lr", type=float, default=0.003, help="peak learning rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="output folder (default: a temp folder)")
    return parser


def builder(name: str):
    """The builder function for `name`: the tiny architecture or `keras_vit.ViT_<name>`."""
    import keras_vit

    if name == "tiny":
        return lambda **kwargs: keras_vit.ViT(**TINY, **kwargs)
    build = getattr(keras_vit, f"ViT_{name}", None)
    if build is None:
        raise SystemExit(f"unknown --model {name!r}: use tiny, Ti16, S16, B16, ...")
    return build


def write_quick_checkpoint(path: str, seed: int) -> str:
    """Trains a tiny ViT on embedded MNIST at 16x16 briefly and saves it as an official .npz."""
    import keras_vit
    from keras_vit import data, train

    train_ds = data.load(
        "mnist",
        "train",
        image_size=QUICK_PRETRAIN_SIZE,
        batch_size=64,
        training=True,
        augment="none",
        shuffle_seed=seed,
    )
    model = builder("tiny")(num_classes=10, image_size=QUICK_PRETRAIN_SIZE, channels=1)
    model.compile(
        optimizer=train.pretrain_optimizer(3e-3, total_steps=124, warmup_steps=12),
        loss=train.loss(),
        metrics=["accuracy"],
    )
    history = model.fit(train_ds, epochs=2, shuffle=False, verbose=0)
    keys = keras_vit.save_npz(model, path)
    print(
        f"pre-trained a tiny ViT on MNIST at {QUICK_PRETRAIN_SIZE}px "
        f"(train accuracy {history.history['accuracy'][-1]:.3f}); "
        f"wrote {len(keys)} official keys to {path}"
    )
    return path


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="finetune_pretrained_")
    os.makedirs(out, exist_ok=True)

    import keras

    import keras_vit
    from keras_vit import data, train

    keras.utils.set_random_seed(args.seed)
    channels = 3  # the published checkpoints are RGB
    if args.quick:
        args.model, args.dataset = "tiny", "digits"
        args.pretrain_image_size, args.image_size = QUICK_PRETRAIN_SIZE, QUICK_IMAGE_SIZE
        args.steps, args.batch_size, args.lr = 100, 64, 0.03
        args.weights = write_quick_checkpoint(os.path.join(out, "pretrained.npz"), args.seed)
        channels = 1

    # 1. The pre-trained model at its own resolution. The head size does not matter: a head
    #    of another shape is not loaded (weights= uses load_weights(..., head="auto")).
    pretrained = builder(args.model)(
        num_classes=10,
        image_size=args.pretrain_image_size,
        channels=channels,
        weights=args.weights,
    )
    print(f"loaded {args.weights} into {pretrained.name} at {args.pretrain_image_size}px")

    # 2. New head (zero-initialised) and a larger token grid (position table resized).
    info = data.describe(args.dataset, data_dir=args.data_dir)
    model = keras_vit.finetune(pretrained, info.num_classes, image_size=args.image_size)
    table = model.get_layer("posembed_input").weights[0].shape
    print(
        f"fine-tuning at {args.image_size}px: position table "
        f"{tuple(pretrained.get_layer('posembed_input').weights[0].shape)} -> {tuple(table)}; "
        f"head {info.num_classes} classes, zero-initialised"
    )

    # 3. The release's fine-tuning recipe, step-based as in the paper.
    load = dict(
        image_size=args.image_size,
        batch_size=args.batch_size,
        channels=channels,
        data_dir=args.data_dir,
    )
    train_ds = data.load(
        args.dataset,
        "train",
        training=True,
        shuffle_seed=args.seed,
        augment="none" if args.quick else None,
        **load,
    ).repeat()
    test_ds = data.load(args.dataset, "test", training=False, **load)
    model.compile(
        optimizer=train.finetune_optimizer(args.lr, args.steps),
        loss=train.loss(),
        metrics=["accuracy"],
    )
    model.fit(train_ds, epochs=1, steps_per_epoch=args.steps, shuffle=False, verbose=2)
    results = model.evaluate(test_ds, verbose=0, return_dict=True)

    path = os.path.join(out, "finetuned.npz")
    keras_vit.save_npz(model, path)
    print(f"saved {path}")
    print(f"fine-tuned test accuracy: {results['accuracy']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
