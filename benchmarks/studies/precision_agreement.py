"""Does the automatic precision change the answers? float32 against the chosen setting.

Trains the same ViT twice with `keras_vit.train.runs.train` on an embedded dataset (same seed and
recipe, `keras-vit train`'s default recipe widened with `--hidden-dim`): once in float32
with XLA, once with `--mixed-precision auto` (what `keras_vit.runtime.distribute.choose_precision`
picks for the width on this machine). It prints both learning curves side by side, then
runs the float32-trained model on the held-out images in float32 and under the chosen
policy (`keras_vit.runtime.distribute.with_dtype_policy`, same weights) and reports the top-1
agreement and the largest logit difference.

    python benchmarks/studies/precision_agreement.py --hidden-dim 256 --json agreement.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.join(_HERE, ".."), os.path.join(_HERE, "..", "harness")]

import common  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="mnist", help="embedded dataset (mnist)")
    parser.add_argument("--hidden-dim", type=int, default=256, help="token width (256)")
    parser.add_argument("--mlp-dim", type=int, default=512, help="MLP width (512)")
    parser.add_argument("--num-heads", type=int, default=4, help="heads (4)")
    parser.add_argument("--num-layers", type=int, default=4, help="blocks (4)")
    parser.add_argument("--image-size", type=int, default=28, help="input side (28)")
    parser.add_argument("--patch-size", type=int, default=4, help="patch side (4)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs of each run (4)")
    parser.add_argument(
        "--shots-per-class", type=int, default=100, help="training images per class (100)"
    )
    parser.add_argument("--batch-size", type=int, default=32, help="batch size (32)")
    parser.add_argument("--json", dest="json_path", help="write the results here")
    args = parser.parse_args(argv)
    counts = ("hidden_dim", "mlp_dim", "num_heads", "num_layers", "image_size", "patch_size")
    counts += ("epochs", "shots_per_class", "batch_size")
    for name in counts:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.hidden_dim % args.num_heads:
        parser.error("--hidden-dim must be divisible by --num-heads")
    if args.image_size % args.patch_size:
        parser.error("--image-size must be a multiple of --patch-size")
    return args


def run_config(args, mixed_precision, jit_compile):
    from keras_vit.train import runs, training

    recipe = training.TrainConfig(
        dataset=args.dataset,
        image_size=args.image_size,
        patch_size=args.patch_size,
        hidden_dim=args.hidden_dim,
        mlp_dim=args.mlp_dim,
        num_heads=args.num_heads,
        num_layers=args.num_layers,
        epochs=args.epochs,
        batch_size=args.batch_size,
        jit_compile=jit_compile,
    )
    return runs.RunConfig(
        recipe=recipe, mixed_precision=mixed_precision, shots_per_class=args.shots_per_class
    )


def train(args, folder, name, mixed_precision, jit_compile):
    """Trains one run; returns (RunResult, its resolved precision)."""
    from keras_vit.train import runs

    run_dir = os.path.join(folder, name)
    result = runs.train(run_config(args, mixed_precision, jit_compile), run_dir, verbose=0)
    resolved = runs.read_config(run_dir)["resolved"]
    return result, resolved


def held_out_logits(model, args, policy):
    """(logits under `policy`, labels) of the held-out images, same weights as `model`."""
    import numpy as np

    from keras_vit import data
    from keras_vit.runtime import distribute

    split = data.load(
        args.dataset,
        "test",
        image_size=args.image_size,
        batch_size=256,
        training=False,
        channels=int(model.input_shape[-1]),
        shots_per_class=args.shots_per_class,
    )
    images, labels = zip(*[(x.numpy(), y.numpy()) for x, y in split], strict=True)
    images, labels = np.concatenate(images), np.concatenate(labels)
    run_model = distribute.with_dtype_policy(model, policy)
    return run_model.predict(images, batch_size=256, verbose=0).astype("float64"), labels


def agreement(model, args, policy):
    """Top-1 agreement, largest logit difference and both accuracies, float32 vs `policy`."""
    reference, labels = held_out_logits(model, args, "float32")
    chosen, _ = held_out_logits(model, args, policy)
    top_reference, top_chosen = reference.argmax(-1), chosen.argmax(-1)
    return {
        "images": int(len(labels)),
        "top1_agreement": float((top_reference == top_chosen).mean()),
        "max_abs_logit_difference": float(abs(reference - chosen).max()),
        "max_abs_logit": float(abs(reference).max()),
        "accuracy_float32": float((top_reference == labels).mean()),
        "accuracy_chosen": float((top_chosen == labels).mean()),
    }


def curves_table(reference, chosen, label):
    rows = ["| epoch | float32 loss | float32 val acc | " + label + " loss | val acc |"]
    rows.append("|---|---|---|---|---|")
    for a, b in zip(reference.history, chosen.history, strict=False):
        rows.append(
            f"| {int(a['epoch']) + 1} | {a['loss']:.4f} | {a['val_accuracy']:.4f} | "
            f"{b['loss']:.4f} | {b['val_accuracy']:.4f} |"
        )
    return "\n".join(rows)


def main(argv=None):
    args = parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="keras_vit_agreement_") as folder:
        start = time.perf_counter()
        reference, reference_resolved = train(args, folder, "float32", "float32", True)
        reference_s = time.perf_counter() - start
        start = time.perf_counter()
        chosen, chosen_resolved = train(args, folder, "auto", "auto", "auto")
        chosen_s = time.perf_counter() - start
        policy = chosen_resolved["mixed_precision"]
        label = f"{policy}{'+xla' if chosen_resolved['jit_compile'] else ''}"
        figures = agreement(reference.model, args, policy)
    load_after = os.getloadavg()
    print(
        f"auto for hidden_dim {args.hidden_dim}: {label} ({chosen_resolved['precision_reason']}); "
        f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
    )
    print(curves_table(reference, chosen, label))
    print(
        f"training wall time: float32+xla {reference_s:.0f} s, {label} {chosen_s:.0f} s "
        f"(fit only: {reference.metrics['fit_wall_time_s']:.0f} s, "
        f"{chosen.metrics['fit_wall_time_s']:.0f} s)"
    )
    print(
        f"held-out {args.dataset} ({figures['images']} images), float32-trained model: top-1 "
        f"agreement float32 vs {policy} {100 * figures['top1_agreement']:.2f}%, max |logit "
        f"difference| {figures['max_abs_logit_difference']:.4f} (max |logit| "
        f"{figures['max_abs_logit']:.2f}); accuracy {100 * figures['accuracy_float32']:.2f}% "
        f"float32, {100 * figures['accuracy_chosen']:.2f}% {policy}"
    )
    if args.json_path:
        common.write_json(
            args.json_path,
            {
                "config": vars(args),
                "chosen": {k: chosen_resolved[k] for k in ("mixed_precision", "jit_compile")},
                "reason": chosen_resolved["precision_reason"],
                "history_float32": reference.history,
                "history_chosen": chosen.history,
                "wall_s": {"float32": reference_s, "chosen": chosen_s},
                "agreement": figures,
                "load_average": {"before": load_before, "after": load_after},
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
