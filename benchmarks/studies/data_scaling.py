"""Benchmark: the paper's data-requirement experiment in miniature (section 4.2, figures 3-4).

The paper pre-trains ViTs and ResNets (BiT) on growing data sets and finds that ViT loses on
small data and wins on large, with hybrids ahead at small compute. Here, on the embedded
MNIST, three models of similar size are pre-trained from scratch on growing stratified subsets
of the 4,000 training images (default 250, 500, 1,000, 2,000, 4,000) with the same AdamW
recipe and the same number of optimizer steps, then each is evaluated two ways on the UCI
digits (another handwriting set):

- few-shot linear probe (`keras_vit.evaluate.fewshot`): 10 digits per class, frozen features at 28
px, closed-form ridge, l2 chosen on other training digits, 3 seeds;
- fine-tuning at a higher resolution (40 px): the release's SGD recipe on the 1,297 training
  digits, test accuracy on the 500 test digits.

Models: "ViT" (the default recipe with the patch stem: patch 4, 4 blocks of width 64),
"hybrid" (the default recipe: BiT ResNet root stem + the same Transformer), "ResNet" (a BiT
ResNet: the same root and two bottleneck stages, global average pooling). Their parameter
counts and training-step times are printed beside the results, so "similar cost" can be
checked. Writes a table (stdout, and --json) and a PNG in the style of the paper's figure 3
(accuracy against pre-training set size, one line per model).

Usage:
    python benchmarks/studies/data_scaling.py --png data_scaling.png          # ~20-30 min, 2 cores
    python benchmarks/studies/data_scaling.py --quick --png /tmp/ds.png       # smoke test, ~2 min
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

MODELS = ("ViT", "ResNet", "hybrid")
SIZES = (250, 500, 1000, 2000, 4000)
RESNET_STAGES = (1, 1)
RESNET_WIDTH = 32


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sizes", type=lambda t: tuple(int(v) for v in t.split(",")), default=SIZES,
        help="pre-training set sizes, comma-separated (default 250,500,1000,2000,4000)",
    )  # fmt: skip
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--pretrain-steps", type=int, default=700, help="AdamW steps (700)")
    parser.add_argument("--finetune-steps", type=int, default=250, help="SGD steps (250)")
    parser.add_argument("--finetune-size", type=int, default=40, help="fine-tune side (40)")
    parser.add_argument("--shots", type=int, default=10, help="few-shot digits per class")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-xla", dest="xla", action="store_false", help="no XLA (fast start, slow steps)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: the smallest size, a few steps, no XLA"
    )
    parser.add_argument("--png", help="write the figure here")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument(
        "--results", help="write the documents' figures here (benchmarks/results/data_scaling.json)"
    )
    parser.add_argument(
        "--replot", metavar="JSON", help="only redraw --png (and --results) from a --json file"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes = (min(args.sizes),)
        args.pretrain_steps, args.finetune_steps, args.xla = 4, 2, False
    if min(args.sizes) < 10 or max(args.sizes) > 4000:
        parser.error("--sizes must lie in [10, 4000] (the embedded MNIST training images)")
    if min(args.pretrain_steps, args.finetune_steps, args.shots) < 1:
        parser.error("--pretrain-steps, --finetune-steps and --shots must be >= 1")
    if args.finetune_size % 4:
        parser.error("--finetune-size must be a multiple of 4 (the ViT patch, the stem stride)")
    return args


def build(name: str, num_classes: int, image_size: int):
    """An uncompiled model: the recipe's ViT or hybrid, or the BiT ResNet."""
    import keras

    from keras_vit.model.hybrid import resnet_features
    from keras_vit.train import training

    if name != "ResNet":
        config = training.TrainConfig(stem="patch" if name == "ViT" else "resnet")
        kwargs = config.model_kwargs(num_classes, 1)
        kwargs["image_size"] = image_size
        return training.build_model(kwargs)
    images = keras.Input((image_size, image_size, 1), name="images")
    features = resnet_features(images, stages=RESNET_STAGES, width=RESNET_WIDTH, groups=8)
    pooled = keras.layers.GlobalAveragePooling2D(name="pool")(features)
    head = keras.layers.Dense(num_classes, kernel_initializer="zeros", name="head")(pooled)
    return keras.Model(images, head, name="bit_resnet")


def pretrain(name, size, args):
    """(model, seconds per step) after `pretrain_steps` AdamW steps on `size` MNIST images."""
    import keras

    from keras_vit import data
    from keras_vit.train import training

    keras.utils.set_random_seed(args.seed)
    recipe = training.TrainConfig()
    split = f"train[:{size // 10}]"  # size / 10 images of each digit, a seeded draw
    train = data.load(
        "mnist", split, image_size=28, batch_size=recipe.batch_size, training=True,
        shuffle_seed=args.seed, split_seed=args.seed,
    ).repeat()  # fmt: skip
    model = build(name, 10, 28)
    optimizer = training.pretrain_optimizer(
        recipe.learning_rate, args.pretrain_steps, max(1, args.pretrain_steps // 20),
        weight_decay=recipe.weight_decay, decay="cosine",
    )  # fmt: skip
    model.compile(
        optimizer=optimizer, loss=training.loss(recipe.label_smoothing), jit_compile=args.xla
    )
    model.fit(train, epochs=1, steps_per_epoch=args.pretrain_steps, verbose=0)
    start = time.perf_counter()
    model.fit(train, epochs=1, steps_per_epoch=3, verbose=0)  # timed after compilation
    return model, (time.perf_counter() - start) / 3


def fewshot_accuracy(model, args):
    from keras_vit import data
    from keras_vit.evaluate import fewshot

    kwargs = dict(image_size=28, batch_size=256, training=False)
    results = fewshot.fewshot_evaluate(
        model, data.load("digits", "train", **kwargs), data.load("digits", "test", **kwargs),
        shots=(args.shots,), seeds=3,
    )  # fmt: skip
    return results[args.shots].mean


def transferred(name, model, image_size):
    """The model for 10 digit classes at `image_size`: keras_vit.finetune for the ViT and the
    hybrid (position table resized, zero head); the CNN rebuilt at the new size with its
    convolution weights copied (a CNN needs no resize) and a zero head."""
    import keras_vit

    if name != "ResNet":
        return keras_vit.finetune(model, 10, image_size=image_size)
    target = build(name, 10, image_size)
    for layer in target.layers:
        if layer.weights and layer.name != "head":
            layer.set_weights(model.get_layer(layer.name).get_weights())
    return target


def finetune_accuracy(name, model, args):
    import keras

    from keras_vit import data
    from keras_vit.train import training

    keras.utils.set_random_seed(args.seed)
    config = training.FinetuneConfig(steps=args.finetune_steps, image_size=args.finetune_size)
    size = args.finetune_size
    train = data.load(
        "digits", "train", image_size=size, batch_size=config.batch_size, training=True,
        shuffle_seed=args.seed,
    ).repeat()  # fmt: skip
    test = data.load("digits", "test", image_size=size, batch_size=256, training=False)
    target = transferred(name, model, size)
    target.compile(
        optimizer=training.finetune_optimizer(config.learning_rate, args.finetune_steps),
        loss=training.loss(),
        metrics=["accuracy"],
        jit_compile=args.xla,
    )
    target.fit(train, epochs=1, steps_per_epoch=args.finetune_steps, verbose=0)
    return float(target.evaluate(test, verbose=0, return_dict=True)["accuracy"])


def plot(results, path):
    """Figure-3 style: accuracy against pre-training images (log axis), one line per model."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from keras_vit import _atomic

    figure = Figure(figsize=(9, 3.6), layout="constrained")
    FigureCanvasAgg(figure)
    panels = (
        ("fewshot", "10-shot linear accuracy (digits)"),
        ("finetune", "fine-tuned (digits, 40 px)"),
    )
    styles = {"ViT": ("tab:blue", "o"), "ResNet": ("tab:gray", "s"), "hybrid": ("tab:orange", "^")}
    for ax, (key, label) in zip(figure.subplots(1, 2), panels, strict=True):
        for name in sorted({r["model"] for r in results}, key=MODELS.index):
            rows = sorted((r for r in results if r["model"] == name), key=lambda r: r["size"])
            color, marker = styles[name]
            ax.plot([r["size"] for r in rows], [100 * r[key] for r in rows], marker=marker,
                    color=color, label=name)  # fmt: skip
        ax.set_xscale("log")
        sizes = sorted({r["size"] for r in results})
        ax.set_xticks(sizes, [f"{size:,}" for size in sizes])
        ax.minorticks_off()
        ax.set_xlabel("MNIST pre-training images")
        ax.set_ylabel(f"{label} [%]")
        ax.grid(alpha=0.3)
        ax.legend()
    figure.suptitle("Pre-training data size vs transfer (paper figure 3, in miniature)")
    with _atomic.atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=110)


def median_step_ms(results, name) -> float:
    """The model's median pre-training step time over the sizes (ms)."""
    return statistics.median(r["step_ms"] for r in results if r["model"] == name)


def print_table(results, args) -> None:
    print(
        "\n| model | params | train step ms (median) | " + " | ".join(map(str, args.sizes)) + " |"
    )
    print("|---|---|---|" + "---|" * len(args.sizes))
    for key in ("fewshot", "finetune"):
        for name in args.models:
            rows = {r["size"]: r for r in results if r["model"] == name}
            cells = " | ".join(f"{100 * rows[s][key]:.1f}" for s in args.sizes)
            params = rows[args.sizes[0]]["params"]
            print(f"| {name} {key} | {params} | {median_step_ms(results, name)} | {cells} |")


def figure_values(results, wall_s) -> dict:
    """The documents' figures: every accuracy, parameter count and median step time."""
    values = {"wall_min": {"value": wall_s / 60, "format": "{:.0f}"}}
    for r in results:
        for key in ("fewshot", "finetune"):
            values[f"{r['model']}_{key}_{r['size']}"] = {"value": r[key], "format": "{:.1%}"}
    for name in sorted({r["model"] for r in results}):
        params = next(r["params"] for r in results if r["model"] == name)
        values[f"{name}_params"] = {"value": params, "format": "{:,}"}
        values[f"{name}_step_ms"] = {"value": median_step_ms(results, name), "format": "{:.0f}"}
    return values


def write_figures(path, results, wall_s, argv) -> None:
    import sys

    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [_HERE, os.path.join(_HERE, ".."), os.path.join(_HERE, "..", "harness")]
    from figures import write_results

    write_results(
        path,
        figure_values(results, wall_s),
        command="python benchmarks/studies/data_scaling.py " + " ".join(argv),
        about="The data-size experiment in miniature (paper section 4.2, figure 3): 10-shot "
        "linear and fine-tuned accuracy on the UCI digits of a ViT, a BiT ResNet and a hybrid "
        "pre-trained on growing MNIST subsets",
    )
    print(f"wrote {path}")


def replot(args) -> int:
    with open(args.replot) as handle:
        saved = json.load(handle)
    args.sizes, args.models = tuple(saved["args"]["sizes"]), saved["args"]["models"]
    print_table(saved["results"], args)
    if args.png:
        plot(saved["results"], args.png)
        print(f"figure: {args.png}")
    if args.results:
        write_figures(args.results, saved["results"], saved["wall_s"], saved.get("argv", []))
    return 0


def main(argv=None) -> int:
    import sys

    args = parse_args(argv)
    if args.replot:
        return replot(args)
    start = time.time()
    results = []
    for size in args.sizes:
        for name in args.models:
            model, step_s = pretrain(name, size, args)
            row = {
                "model": name,
                "size": size,
                "params": int(model.count_params()),
                "step_ms": round(1000 * step_s, 1),
                "fewshot": round(fewshot_accuracy(model, args), 4),
                "finetune": round(finetune_accuracy(name, model, args), 4),
            }
            results.append(row)
            print(json.dumps(row), flush=True)
            if args.png:  # redrawn after every point: a stopped run keeps its figure
                plot(results, args.png)
    wall = round(time.time() - start, 1)
    print_table(results, args)
    print(f"\n{args.pretrain_steps} pre-training steps per model and size; fine-tuning "
          f"{args.finetune_steps} steps at {args.finetune_size} px; wall {wall} s")  # fmt: skip
    if args.png:
        plot(results, args.png)
        print(f"figure: {args.png}")
    argv = sys.argv[1:] if argv is None else list(argv)
    if args.json:
        from keras_vit import _atomic

        saved = {"args": vars(args) | {"sizes": list(args.sizes)}, "results": results}
        _atomic.write_json(args.json, saved | {"wall_s": wall, "argv": argv})
    if args.results:
        write_figures(args.results, results, wall, argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
