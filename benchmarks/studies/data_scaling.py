"""Study: the paper's data-requirement experiment in miniature (section 4.2, figures 3-4).

A ViT, a hybrid (BiT root + the same Transformer) and a BiT ResNet, pre-trained alike on growing
MNIST subsets (250-4,000 images); on the UCI digits: 10-shot linear accuracy (3 seeds) and accuracy
fine-tuned at 40 px, with parameters and step time (ms). A table (stdout, --json) and a PNG.

    python -m benchmarks.studies.data_scaling --png data_scaling.png   # --quick: smoke run
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from benchmarks.harness.common import markdown, time_call
from benchmarks.studies import report

STYLES = {"ViT": ("tab:blue", "o"), "ResNet": ("tab:gray", "s"), "hybrid": ("tab:orange", "^")}
MODELS, SIZES, SEED, SHOTS = tuple(STYLES), (250, 500, 1000, 2000, 4000), 0, 10
PANELS = {"fewshot": "10-shot linear accuracy (digits)", "finetune": "fine-tuned (digits, 40 px)"}
ABOUT = (
    "The data-size experiment in miniature (paper section 4.2, figure 3): 10-shot linear and "
    "fine-tuned accuracy on the UCI digits of a ViT, a BiT ResNet and a hybrid pre-trained on "
    "growing MNIST subsets"
)


def parse_args(argv=None):
    parser = report.parser(__doc__, "data_scaling.json", "write the results here")
    sizes = lambda text: tuple(int(v) for v in text.split(","))  # noqa: E731
    parser.add_argument("--sizes", type=sizes, default=SIZES, help="(250,500,1000,2000,4000)")
    parser.add_argument("--pretrain-steps", type=int, default=700, help="AdamW steps (700)")
    parser.add_argument("--finetune-steps", type=int, default=250, help="SGD steps (250)")
    parser.add_argument("--finetune-size", type=int, default=40, help="fine-tune side (40)")
    parser.add_argument("--quick", action="store_true", help="the smallest size, 4 steps, no XLA")
    parser.add_argument("--png", help="write the figure here")
    parser.add_argument("--replot", metavar="JSON", help="only redraw --png, --results from --json")
    args = parser.parse_args(argv)
    args.models, args.xla = list(MODELS), not args.quick
    if args.quick:
        args.sizes, args.pretrain_steps, args.finetune_steps = (min(args.sizes),), 4, 2
    bad = [size for size in args.sizes if not 10 <= size <= 4000]
    if bad:
        parser.error(f"--sizes {bad[0]}: must lie in [10, 4000] (the embedded MNIST images)")
    report.at_least(parser, args, "pretrain_steps", "finetune_steps", "finetune_size")
    if args.finetune_size % 4:
        parser.error(f"--finetune-size {args.finetune_size}: must be a multiple of 4 (the patch)")
    return args


def build(name: str, num_classes: int, image_size: int):
    """An uncompiled model: the recipe's ViT or hybrid, or the BiT ResNet."""
    import keras

    from keras_vit.model.hybrid import resnet_features
    from keras_vit.train import training

    if name != "ResNet":
        config = training.TrainConfig(stem="patch" if name == "ViT" else "resnet")
        kwargs = config.model_kwargs(num_classes, 1)
        return training.build_model({**kwargs, "image_size": image_size})
    images = keras.Input((image_size, image_size, 1), name="images")
    features = resnet_features(images, stages=(1, 1), width=32, groups=8)
    pooled = keras.layers.GlobalAveragePooling2D(name="pool")(features)
    head = keras.layers.Dense(num_classes, kernel_initializer="zeros", name="head")(pooled)
    return keras.Model(images, head, name="bit_resnet")


def pretrain(name, size, args):
    """(model, seconds per step) after `pretrain_steps` AdamW steps on `size` MNIST images."""
    import keras

    from keras_vit import data
    from keras_vit.train import losses, schedules, training

    keras.utils.set_random_seed(SEED)
    recipe, steps = training.TrainConfig(), args.pretrain_steps
    split = f"train[:{size // 10}]"  # size / 10 images of each digit, a seeded draw
    train = data.load("mnist", split, image_size=28, batch_size=recipe.batch_size, training=True,
                      shuffle_seed=SEED, split_seed=SEED)  # fmt: skip
    model = build(name, 10, 28)
    schedule = (recipe.learning_rate, steps, max(1, steps // 20))
    decay = dict(weight_decay=recipe.weight_decay, decay="cosine")
    loss = losses.loss(recipe.label_smoothing)
    model.compile(schedules.pretrain_optimizer(*schedule, **decay), loss, jit_compile=args.xla)
    model.fit(train.repeat(), epochs=1, steps_per_epoch=steps, verbose=0)
    timed = lambda: model.fit(train.repeat(), epochs=1, steps_per_epoch=3, verbose=0)  # noqa: E731
    return model, time_call(timed, 1) / 3  # 3 steps timed once compiled


def transfer_accuracies(name, model, args) -> tuple[float, float]:
    """(10-shot linear accuracy, fine-tuned accuracy) of the pre-trained `model` on the UCI
    digits. Fine-tuned: keras_vit.finetune for the ViT and the hybrid (position table resized,
    zero head); the CNN rebuilt at the new size, its convolution weights copied, a zero head."""
    import keras

    import keras_vit
    from keras_vit import data
    from keras_vit.evaluate import fewshot
    from keras_vit.train import losses, schedules, training

    train, test = (data.load("digits", split, image_size=28, batch_size=256, training=False)
                   for split in ("train", "test"))  # fmt: skip
    few = fewshot.fewshot_evaluate(model, train, test, shots=(SHOTS,), seeds=3)[SHOTS].mean
    keras.utils.set_random_seed(SEED)
    size, steps = args.finetune_size, args.finetune_steps
    config = training.FinetuneConfig(steps=steps, image_size=size)
    train = data.load("digits", "train", image_size=size, batch_size=config.batch_size,
                      training=True, shuffle_seed=SEED)  # fmt: skip
    test = data.load("digits", "test", image_size=size, batch_size=256, training=False)
    if name != "ResNet":
        target = keras_vit.finetune(model, 10, image_size=size)
    else:
        target = build(name, 10, size)
        for layer in (layer for layer in target.layers if layer.weights and layer.name != "head"):
            layer.set_weights(model.get_layer(layer.name).get_weights())
    optimizer = schedules.finetune_optimizer(config.learning_rate, steps)
    target.compile(optimizer, losses.loss(), metrics=["accuracy"], jit_compile=args.xla)
    target.fit(train.repeat(), epochs=1, steps_per_epoch=steps, verbose=0)
    return few, float(target.evaluate(test, verbose=0, return_dict=True)["accuracy"])


def plot(results, path):
    """Figure-3 style: accuracy against pre-training images (log axis), one line per model."""
    from matplotlib.figure import Figure

    from keras_vit import _atomic

    figure = Figure(figsize=(9, 3.6), layout="constrained")  # savefig picks Agg for a PNG
    sizes = sorted({r["size"] for r in results})
    for ax, (key, label) in zip(figure.subplots(1, 2), PANELS.items(), strict=True):
        for name in sorted({r["model"] for r in results}, key=MODELS.index):
            rows = sorted((r for r in results if r["model"] == name), key=lambda r: r["size"])
            ax.plot([r["size"] for r in rows], [100 * r[key] for r in rows], label=name,
                    **dict(zip(("color", "marker"), STYLES[name], strict=True)))  # fmt: skip
        ax.set(xscale="log", xlabel="MNIST pre-training images", ylabel=f"{label} [%]")
        ax.set_xticks(sizes, [f"{size:,}" for size in sizes])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
        ax.legend()
    figure.suptitle("Pre-training data size vs transfer (paper figure 3, in miniature)")
    with _atomic.atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=110)
    print(f"figure: {path}")


def median_step_ms(results, name) -> float:
    """The model's median pre-training step time over the sizes (ms)."""
    return statistics.median(r["step_ms"] for r in results if r["model"] == name)


def figure_values(results, wall_s) -> dict:
    """The documents' figures: every accuracy, parameter count and median step time."""
    values = {"wall_min": report.fig(wall_s / 60, "{:.0f}")}
    for r in results:
        for key in PANELS:
            values[f"{r['model']}_{key}_{r['size']}"] = report.fig(r[key], "{:.1%}")
    for name in sorted({r["model"] for r in results}):
        params = next(r["params"] for r in results if r["model"] == name)
        values[f"{name}_params"] = report.fig(params, "{:,}")
        values[f"{name}_step_ms"] = report.fig(median_step_ms(results, name), "{:.0f}")
    return values


def main(argv=None) -> int:
    args = parse_args(argv)
    argv = sys.argv[1:] if argv is None else list(argv)
    if args.replot:
        with open(args.replot) as handle:
            saved = json.load(handle)
        results, wall, argv = saved["results"], saved["wall_s"], saved.get("argv", [])
    else:
        start, results = time.time(), []  # a row per (size, model)
        for size, name in ((size, name) for size in args.sizes for name in args.models):
            model, step_s = pretrain(name, size, args)
            few, tuned = transfer_accuracies(name, model, args)
            results.append({"model": name, "size": size, "params": model.count_params(),
                            "step_ms": round(1000 * step_s, 1), "fewshot": round(few, 4),
                            "finetune": round(tuned, 4)})  # fmt: skip
            print(json.dumps(results[-1]), flush=True)
            if args.png:  # redrawn after every point: a stopped run keeps its figure
                plot(results, args.png)
        wall = round(time.time() - start, 1)
        print(f"\n{args.pretrain_steps} pre-training steps per model and size; fine-tuning "
              f"{args.finetune_steps} steps at {args.finetune_size} px; wall {wall} s")  # fmt: skip
        saved = {"args": vars(args) | {"sizes": list(args.sizes)}, "results": results}
        report.save_json(args.json, saved | {"wall_s": wall, "argv": argv})
    sizes, rows = sorted({r["size"] for r in results}), []  # the table: accuracy (%)
    for key, name in ((k, n) for k in PANELS for n in MODELS):
        by_size = {r["size"]: r for r in results if r["model"] == name}
        if by_size:  # a model the run had
            row = [f"{name} {key}", by_size[sizes[0]]["params"], median_step_ms(results, name)]
            rows.append(row + [f"{100 * by_size[size][key]:.1f}" for size in sizes])
    print("\n" + markdown(["model", "params", "train step ms (median)", *sizes], rows))
    if args.png:
        plot(results, args.png)
    report.write_figures(args.results, figure_values(results, wall), __file__, ABOUT, argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
