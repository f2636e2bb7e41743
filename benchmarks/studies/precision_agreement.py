"""Study: does the automatic precision change the answers? float32 against the chosen setting.

One ViT (`keras-vit train`'s recipe, widened by `--hidden-dim`) trained by `runs.train` in float32
with XLA and with `--mixed-precision auto`: learning curves, wall times (s); the float32-trained
model run in float32 and under the chosen policy: top-1 agreement, largest logit difference.

    python -m benchmarks.studies.precision_agreement --hidden-dim 256 --json agreement.json
"""

from __future__ import annotations

import os
import tempfile
import time

from benchmarks.harness.common import markdown
from benchmarks.studies import report

ARCHITECTURE = {"hidden_dim": 256, "mlp_dim": 512, "num_heads": 4, "num_layers": 4}
RECIPE = {"image_size": 28, "patch_size": 4, "epochs": 4, "batch_size": 32}


def parse_args(argv=None):
    parser = report.parser(__doc__)
    parser.add_argument("--dataset", default="mnist", help="embedded dataset (mnist)")
    for name, default in {**ARCHITECTURE, **RECIPE, "shots_per_class": 100}.items():
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, type=int, default=default, help=f"({default})")
    args = parser.parse_args(argv)
    report.at_least(parser, args, *ARCHITECTURE, *RECIPE, "shots_per_class")
    for top, bottom in (("hidden_dim", "num_heads"), ("image_size", "patch_size")):
        if getattr(args, top) % getattr(args, bottom):
            flags = [f"--{name.replace('_', '-')} {getattr(args, name)}" for name in (top, bottom)]
            parser.error(f"{flags[0]} must divide by {flags[1]}")
    return args


def train(args, folder, mixed_precision, jit_compile):
    """Trains one run in `folder/mixed_precision`; returns (RunResult, its resolved config)."""
    from keras_vit.train import run_directory, runs, training

    fields = {name: getattr(args, name) for name in (*ARCHITECTURE, *RECIPE)}
    recipe = training.TrainConfig(dataset=args.dataset, jit_compile=jit_compile, **fields)
    config = runs.RunConfig(recipe=recipe, mixed_precision=mixed_precision,
                            shots_per_class=args.shots_per_class)  # fmt: skip
    run_dir = os.path.join(folder, mixed_precision)
    return runs.train(config, run_dir, verbose=0), run_directory.read_config(run_dir)["resolved"]


def agreement(model, args, policy):
    """Top-1 agreement, logit difference, accuracies of `model` in float32 and under `policy`."""
    import numpy as np

    from keras_vit import data
    from keras_vit.runtime import precision

    channels, shots = int(model.input_shape[-1]), args.shots_per_class
    split = data.load(args.dataset, "test", image_size=args.image_size, batch_size=256,
                      training=False, channels=channels, shots_per_class=shots)  # fmt: skip
    images, labels = (np.concatenate(part) for part in zip(*split.as_numpy_iterator(), strict=True))
    reference, chosen = (
        precision.with_dtype_policy(model, name).predict(images, batch_size=256, verbose=0)
        .astype("float64") for name in ("float32", policy)
    )  # fmt: skip
    top_reference, top_chosen = reference.argmax(-1), chosen.argmax(-1)
    return {"images": len(labels), "top1_agreement": float((top_reference == top_chosen).mean()),
            "max_abs_logit_difference": float(abs(reference - chosen).max()),
            "max_abs_logit": float(abs(reference).max()),
            "accuracy_float32": float((top_reference == labels).mean()),
            "accuracy_chosen": float((top_chosen == labels).mean())}  # fmt: skip


def main(argv=None):
    args = parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="keras_vit_agreement_") as folder:
        start = time.perf_counter()
        reference, _ = train(args, folder, "float32", True)
        reference_s = time.perf_counter() - start
        chosen, resolved = train(args, folder, "auto", "auto")
        chosen_s = time.perf_counter() - start - reference_s
        policy = resolved["mixed_precision"]
        label = f"{policy}{'+xla' if resolved['jit_compile'] else ''}"
        figures = agreement(reference.model, args, policy)
    load_after = os.getloadavg()
    fit_s = [run.metrics["fit_wall_time_s"] for run in (reference, chosen)]
    print(f"auto for hidden_dim {args.hidden_dim}: {label} ({resolved['precision_reason']}); "
          f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after")  # fmt: skip
    keys = ("loss", "val_accuracy")
    rows = [[int(a["epoch"]) + 1, *(f"{r[k]:.4f}" for r in (a, b) for k in keys)]
            for a, b in zip(reference.history, chosen.history, strict=False)]  # fmt: skip
    print(markdown(["epoch", "float32 loss", "float32 val acc", f"{label} loss", "val acc"], rows))
    print(f"training wall time: float32+xla {reference_s:.0f} s, {label} {chosen_s:.0f} s "
          f"(fit only: {fit_s[0]:.0f} s, {fit_s[1]:.0f} s)")  # fmt: skip
    print(f"held-out {args.dataset} ({figures['images']} images), float32-trained model: top-1 "
          f"agreement float32 vs {policy} {figures['top1_agreement']:.2%}, max |logit difference| "
          f"{figures['max_abs_logit_difference']:.4f} (max |logit| {figures['max_abs_logit']:.2f});"
          f" accuracy {figures['accuracy_float32']:.2%} float32, "
          f"{figures['accuracy_chosen']:.2%} {policy}")  # fmt: skip
    report.save_json(args.json, {
        "config": vars(args),
        "chosen": {key: resolved[key] for key in ("mixed_precision", "jit_compile")},
        "reason": resolved["precision_reason"],
        "history_float32": reference.history, "history_chosen": chosen.history,
        "wall_s": {"float32": reference_s, "chosen": chosen_s}, "agreement": figures,
        "load_average": {"before": load_before, "after": load_after},
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
