"""Train a Vision Transformer from scratch with the paper's pre-training recipe.

What it shows: `keras_vit.data.load` (embedded MNIST by default, or any TFDS name or image
folder), a `keras_vit.ViT` built from a named variant or from explicit sizes, the pre-training
recipe of the paper (section 4.1 / appendix B.1: AdamW, beta1 0.9, beta2 0.999, decoupled
weight decay, global-norm clipping 1.0, linear warmup then linear decay; from
`keras_vit.train`), `model.fit`, the held-out accuracy, and the trained model saved as
`.keras` and as an official-layout `.npz` checkpoint (`keras_vit.checkpoints.save_npz`; the
file `finetune_pretrained.py --weights` takes).

Quick try (tiny model, three short epochs on the embedded MNIST images, ~20 s on 2 CPU cores):

    python examples/train_from_scratch.py --quick

Full size (ViT-S/16 at 224 on a TFDS dataset prepared in ~/tensorflow_datasets):

    python examples/train_from_scratch.py --dataset cifar100 --model S16 --image-size 224 \
        --batch-size 512 --epochs 90 --lr 1e-3 --weight-decay 0.1 --warmup-steps 10000 \
        --out runs/s16_cifar100

or an image folder (one sub-folder per class, or <root>/train/<class>, <root>/test/<class>):

    python examples/train_from_scratch.py --dataset path/to/images --model Ti16 --image-size 224

Prints `test accuracy: <value>` as its last line.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# The tiny architecture of --quick (and of --model tiny): 28x28 digits, 7x7 patches -> 16 tokens.
TINY = dict(patch_size=7, hidden_dim=32, num_heads=2, mlp_dim=64, num_layers=2)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Train a ViT from scratch with the paper's pre-training recipe."
    )
    parser.add_argument("--quick", action="store_true", help="tiny model, three short epochs")
    parser.add_argument(
        "--dataset",
        default="mnist",
        help='"mnist" or "digits" (embedded), a TFDS name, or an image folder (default mnist)',
    )
    parser.add_argument("--data-dir", default=None, help="TFDS data_dir (never downloads)")
    parser.add_argument(
        "--model",
        default="tiny",
        help='"tiny" or a named variant: Ti16, S16, S32, B8, B16, B32, L16, L32, H14',
    )
    parser.add_argument("--image-size", type=int, default=28, help="input side in pixels")
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument(
        "--warmup-steps", type=int, default=None, help="default: a tenth of all steps"
    )
    parser.add_argument("--dropout", type=float, default=0.0, help="dropout rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="output folder (default: a temp folder)")
    return parser


def build_model(name: str, num_classes: int, image_size: int, channels: int, dropout: float):
    """A `keras_vit.ViT`: the tiny architecture or a named variant (`ViT_<name>`)."""
    import keras_vit

    common = dict(
        num_classes=num_classes, image_size=image_size, channels=channels, dropout_rate=dropout
    )
    if name == "tiny":
        return keras_vit.ViT(**TINY, **common, name="vit_tiny")
    builder = getattr(keras_vit, f"ViT_{name}", None)
    if builder is None:
        raise SystemExit(f"unknown --model {name!r}: use tiny, Ti16, S16, B16, ...")
    return builder(**common)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.dataset, args.model, args.image_size = "mnist", "tiny", 28
        args.epochs, args.batch_size = 3, 64
    out = args.out or tempfile.mkdtemp(prefix="train_from_scratch_")
    os.makedirs(out, exist_ok=True)

    import keras

    import keras_vit
    from keras_vit import data, train

    keras.utils.set_random_seed(args.seed)
    info = data.describe(args.dataset, data_dir=args.data_dir)
    print(f"dataset {info.name}: {info.num_classes} classes, {info.num_examples}")
    load = dict(image_size=args.image_size, batch_size=args.batch_size, data_dir=args.data_dir)
    train_ds = data.load(
        args.dataset,
        "train",
        training=True,
        shuffle_seed=args.seed,
        augment="none" if args.quick else None,
        **load,
    )
    test_ds = data.load(args.dataset, "test", training=False, **load)

    model = build_model(args.model, info.num_classes, args.image_size, info.channels, args.dropout)
    steps_per_epoch = info.num_examples["train"] // args.batch_size
    total_steps = steps_per_epoch * args.epochs
    warmup = args.warmup_steps if args.warmup_steps is not None else total_steps // 10
    model.compile(
        optimizer=train.pretrain_optimizer(
            args.lr, total_steps, warmup, weight_decay=args.weight_decay
        ),
        loss=train.loss(),
        metrics=["accuracy"],
    )
    print(f"model {model.name}: {model.count_params():,} parameters; {total_steps} steps")
    # shuffle=False: the tf.data pipeline already shuffles (seeded) every epoch.
    model.fit(train_ds, epochs=args.epochs, shuffle=False, verbose=2)

    results = model.evaluate(test_ds, verbose=0, return_dict=True)
    model.save(os.path.join(out, "model.keras"))
    keras_vit.save_npz(model, os.path.join(out, "model.npz"))
    print(f"saved {os.path.join(out, 'model.keras')} and model.npz (official layout)")
    print(f"test accuracy: {results['accuracy']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
