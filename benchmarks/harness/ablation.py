"""A/B of the class-token shortcut: keras_vit's classifier against the same model with a full
last block, timed alternately in one process.

`keras_vit.ViT(pooling="token")` computes only the class token in its last block
(`TransformerBlock(num_output_tokens=1)`); the "full" model is `ViT(include_top=False,
return_sequence=True)` followed by the same token pooling and head, i.e. what the peers
compute. Both have the same weights and logits; the script checks that before timing.

    python benchmarks/bench.py ablation --variant Ti/16 --batch-size 16 --mode both
"""

from __future__ import annotations

import argparse
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.join(_HERE, ".."), os.path.join(_HERE, "..", "harness")]

import common  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_model_arguments(parser)
    parser.add_argument("--no-xla", action="store_true", help="compile without XLA")
    parser.add_argument("--steps", type=int, default=3, help="steps per timed repeat (3)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats (5)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (2)")
    args = parser.parse_args(argv)
    counts = {"--steps": args.steps, "--repeats": args.repeats, "--warmup": args.warmup}
    common.check_model_arguments(parser, args, counts)
    return args


def build_pair(variant, image_size):
    """(shortcut, full): the keras_vit classifier and the full-last-block model, same weights."""
    import keras
    import numpy as np

    from keras_vit.layers import TokenPooling
    from keras_vit.model.models import ViT

    arch = common.variant_arch(variant)
    shortcut = ViT(**arch, image_size=image_size, num_classes=1000, name="class_token_only")
    head = shortcut.get_layer("head")  # zero-initialised; random, so the check below bites
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.02, head.kernel.shape))
    body = ViT(**arch, image_size=image_size, include_top=False, return_sequence=True)
    pooled = TokenPooling("token", name="pool")(body.output)
    logits = keras.layers.Dense(1000, dtype="float32", name="head")(pooled)
    full = keras.Model(body.input, logits, name="full_last_block")
    full.set_weights(shortcut.get_weights())
    return shortcut, full


def max_logit_difference(shortcut, full, image_size):
    """Largest absolute logit difference of the two models on random images."""
    import numpy as np

    images = np.random.default_rng(1).uniform(-1, 1, (2, image_size, image_size, 3))
    images = images.astype("float32")
    return float(
        np.abs(shortcut.predict(images, verbose=0) - full.predict(images, verbose=0)).max()
    )


def main(argv=None):
    args = parse_args(argv)
    modes = ("infer", "train") if args.mode == "both" else (args.mode,)
    shortcut, full = build_pair(args.variant, args.image_size)
    diff = max_logit_difference(shortcut, full, args.image_size)
    print(f"{args.variant} @{args.image_size}: max logit difference {diff:.2e}", flush=True)
    if diff > 1e-4:
        sys.exit("the two models disagree; not timing them")
    for mode in modes:
        steps = {
            model.name: common.make_step(
                model, mode, args.batch_size, args.image_size, xla=not args.no_xla
            )
            for model in (shortcut, full)
        }
        for step in steps.values():
            for _ in range(args.warmup):
                step()
        rates = {name: [] for name in steps}
        for round_index in range(args.repeats):
            order = list(steps) if round_index % 2 == 0 else list(reversed(steps))
            for name in order:
                seconds = common.time_call(steps[name], args.steps)
                rates[name].append(args.batch_size * args.steps / seconds)
        medians = {name: common.median(values) for name, values in rates.items()}
        for name, values in rates.items():
            figures = ", ".join(f"{v:.2f}" for v in values)
            print(f"{mode:5s} {name:16s} {medians[name]:8.2f} img/s  ({figures})")
        ratio = medians["class_token_only"] / medians["full_last_block"]
        print(f"{mode:5s} class_token_only / full_last_block = {ratio:.3f}x", flush=True)


if __name__ == "__main__":
    main()
