"""Study: LoRA ranks against full fine-tuning on the MNIST -> UCI digits transfer step.

The default MNIST model (trained here for `--pretrain-epochs`, or `--weights` .npz) is
fine-tuned to the digits at 40 px (10 per class, `FinetuneConfig`'s SGD recipe, `--steps`
steps) through `keras_vit.finetune`: every weight trainable, and `lora_rank=R` for each rank.
Each variant runs in its own child process, one after another, so that its peak memory is its
own. Per variant: trainable parameters (what the optimizer updates), peak resident set size
of the child process (`ru_maxrss`: TensorFlow, the model, the data and the training),
its growth during `fit`, held-out accuracy on the other 1,697 digits and the wall time. Step
time is measured apart, fairly on a shared host: one more child builds every variant, compiles
its training step (`train_on_batch`, one fixed batch), warms it up and times `--timing-steps`
steps of each in `--timing-rounds` rounds, the variants' order rotating every round; the
figure is the median over rounds of the mean step time (ms). The steps timed during `fit`
(Keras' batch callbacks, the first step of each epoch left out) are kept in the raw rows.
A ViT-B/16's trainable share at rank 8 (1000 classes, the same recipe) is counted too.

    python -m benchmarks.bench lora --results benchmarks/results/lora_ranks.json
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time

from benchmarks.studies import report

SHOTS, SEED = 10, 0  # labelled digits per class, seed of their draw (as transfer_digits)
RANKS = (4, 8, 16)
FULL = "full"
EXTRA = ("variants", "pretrain", "b16_rank_8", "timing")  # raw entries of the results file


def parse_args(argv=None):
    parser = report.parser(__doc__, "lora_ranks.json")
    parser.add_argument("--weights", help="the MNIST-trained model as an official .npz")
    parser.add_argument("--pretrain-epochs", type=int, default=5, help="without --weights (5)")
    parser.add_argument("--steps", type=int, default=300, help="fine-tuning steps (300)")
    parser.add_argument("--ranks", type=int, nargs="+", default=list(RANKS), help="(4 8 16)")
    parser.add_argument("--worker", help=argparse_hidden())
    parser.add_argument("--timing-rounds", type=int, default=7, help="(7)")
    parser.add_argument("--timing-steps", type=int, default=5, help="steps a round (5)")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per variant (900)")
    args = parser.parse_args(argv)
    report.at_least(parser, args, "pretrain_epochs", "steps", "timing_rounds", "timing_steps")
    if any(rank < 1 for rank in args.ranks):
        parser.error(f"--ranks must be positive ints. Received: {args.ranks}")
    return args


def argparse_hidden():
    import argparse

    return argparse.SUPPRESS


def peak_rss_mib() -> float:
    """This process' peak resident set size so far (MiB; Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def step_timer():
    """A Keras callback recording each training batch's wall time (s) per epoch."""
    import keras

    class StepTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.epochs, self._start = [], 0.0

        def on_epoch_begin(self, epoch, logs=None):
            self.epochs.append([])

        def on_train_batch_begin(self, batch, logs=None):
            self._start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.epochs[-1].append(time.perf_counter() - self._start)

    return StepTimer()


def run_variant(variant: str, weights: str, steps: int) -> dict:
    """Fine-tunes the MNIST model in this process (`variant`: "full" or a rank); its figures."""
    import keras
    import numpy as np

    import keras_vit
    from keras_vit import checkpoints, data
    from keras_vit.model.lora import trainable_count
    from keras_vit.train import training

    train_config = training.TrainConfig()
    config = training.FinetuneConfig(steps=steps)
    model = train_config.build(num_classes=10, channels=1)
    checkpoints.load_weights(model, weights)
    shots = dict(image_size=config.image_size, shots_per_class=SHOTS, shot_seed=SEED)
    train = data.load("digits", "train", batch_size=config.batch_size, training=True,
                      shuffle_seed=SEED, **shots)  # fmt: skip
    test = data.load("digits", "test", batch_size=500, training=False, **shots)
    num_train = data.describe("digits", shots_per_class=SHOTS, shot_seed=SEED).num_examples["train"]
    keras.utils.set_random_seed(config.seed)
    rank = None if variant == FULL else int(variant)
    tuned = keras_vit.finetune(model, 10, image_size=config.image_size, lora_rank=rank)
    tuned.compile(**config.compile_kwargs(num_train))
    timer, before = step_timer(), peak_rss_mib()
    start = time.perf_counter()
    per_epoch = config.steps_per_epoch(num_train)
    epochs = config.num_epochs(num_train)
    tuned.fit(
        train.repeat(), epochs=epochs, steps_per_epoch=per_epoch, callbacks=[timer], verbose=0
    )
    fit_s = time.perf_counter() - start
    accuracy = float(tuned.evaluate(test, verbose=0)[1])
    steady = [t for epoch in timer.epochs for t in epoch[1:]]
    steady = np.array(steady or [t for epoch in timer.epochs for t in epoch]) * 1000.0
    return {
        "variant": variant, "lora_rank": rank, "trainable_params": trainable_count(tuned),
        "total_params": int(tuned.count_params()), "test_accuracy": round(accuracy, 4),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "rss_growth_during_fit_mib": round(peak_rss_mib() - before, 1),
        "fit_step_ms_median": round(float(np.median(steady)), 2),
        "fit_step_ms_p90": round(float(np.percentile(steady, 90)), 2),
        "steps": config.total_steps(num_train), "timed_steps": int(steady.size),
        "fit_s": round(fit_s, 1),
    }  # fmt: skip


def tuned_model(variant: str, weights: str, config):
    """The MNIST model at `weights` made ready to fine-tune as `variant` ("full" or a rank)."""
    import keras_vit
    from keras_vit import checkpoints
    from keras_vit.train import training

    model = training.TrainConfig().build(num_classes=10, channels=1)
    checkpoints.load_weights(model, weights)
    rank = None if variant == FULL else int(variant)
    return keras_vit.finetune(model, 10, image_size=config.image_size, lora_rank=rank)


def time_steps(variants: list[str], weights: str, rounds: int, steps: int) -> dict:
    """{variant: median over rotated rounds of the mean `train_on_batch` time (ms)}."""
    import keras
    import numpy as np

    from keras_vit.train import training

    config = training.FinetuneConfig()
    keras.utils.set_random_seed(config.seed)
    rng = np.random.default_rng(SEED)
    images = rng.uniform(0, 255, (config.batch_size, config.image_size, config.image_size, 1))
    labels = rng.integers(0, 10, config.batch_size)
    models = {}
    for variant in variants:
        models[variant] = tuned_model(variant, weights, config)
        models[variant].compile(**config.compile_kwargs(100))
        for _ in range(3):  # compilation and warm-up
            models[variant].train_on_batch(images.astype("float32"), labels)
    times = {variant: [] for variant in variants}
    for index in range(rounds):
        shift = index % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            start = time.perf_counter()
            for _ in range(steps):
                models[variant].train_on_batch(images.astype("float32"), labels)
            times[variant].append(1000.0 * (time.perf_counter() - start) / steps)
    return {variant: round(float(np.median(values)), 2) for variant, values in times.items()}


def b16_rank8_share() -> dict:
    """Trainable parameters of a ViT-B/16 (224 px, 1000 classes) under the LoRA recipe at
    rank 8 against all of them (full fine-tuning)."""
    from benchmarks.harness import common
    from keras_vit.model.lora import apply_lora, trainable_count

    model = common.build_model("B/16", 224, 1000)
    full = int(model.count_params())
    apply_lora(model, 8)
    adapted = trainable_count(model)
    return {"full": full, "rank_8": adapted, "share": adapted / full}


def pretrain(epochs: int, path: str) -> dict:
    """Trains the default MNIST model for `epochs` (studies/train_mnist.py) and saves it."""
    from benchmarks.studies.train_mnist import train_default
    from keras_vit import checkpoints
    from keras_vit.train import training

    model, results = train_default(training.TrainConfig(epochs=epochs), verbose=0)
    checkpoints.save_npz(model, path)
    return {
        "epochs": epochs,
        "test_accuracy": results["test_accuracy"],
        "wall_s": results["wall_s"],
    }


def child(variant: str, weights: str, args) -> dict:
    """`run_variant` (or with "timing", `time_steps`) in a fresh process."""
    argv = [sys.executable, "-m", "benchmarks.studies.lora_ranks", "--worker", variant,
            "--weights", weights, "--steps", str(args.steps), "--ranks", *map(str, args.ranks),
            "--timing-rounds", str(args.timing_rounds),
            "--timing-steps", str(args.timing_steps)]  # fmt: skip
    return report.child_json(argv, cwd=report.ROOT, env=report_env(), timeout=args.timeout_s)


def report_env() -> dict:
    path = os.pathsep.join(filter(None, (report.ROOT, os.environ.get("PYTHONPATH"))))
    return dict(os.environ, PYTHONPATH=path)


def figure_values(rows: list[dict]) -> dict:
    """The documents' figures: per variant (`full`, `r4`, ...) each measure with its format."""
    formats = {"trainable_params": "{:,}", "trainable_share": "{:.1%}", "peak_rss_mib": "{:.0f}",
               "rss_growth_during_fit_mib": "{:.0f}", "step_ms_median": "{:.1f}",
               "test_accuracy": "{:.1%}"}  # fmt: skip
    full = next(row for row in rows if row["variant"] == FULL)
    values = {}
    for row in rows:
        slug = FULL if row["variant"] == FULL else f"r{row['lora_rank']}"
        row = {**row, "trainable_share": row["trainable_params"] / full["trainable_params"]}
        values |= {f"{slug}_{key}": report.fig(row[key], form) for key, form in formats.items()}
    return values


def table(rows: list[dict]) -> str:
    from benchmarks.harness.common import markdown

    full = next(row for row in rows if row["variant"] == FULL)["trainable_params"]
    lines = [[r["variant"], f"{r['trainable_params']:,}", f"{r['trainable_params'] / full:.1%}",
              f"{r['peak_rss_mib']:.0f}", f"{r['step_ms_median']:.1f}",
              f"{r['test_accuracy']:.1%}"] for r in rows]  # fmt: skip
    head = ["fine-tuning", "trainable", "of full", "peak RSS MiB", "step ms", "accuracy"]
    return markdown(head, lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    variants = [FULL, *map(str, args.ranks)]
    if args.worker == "timing":
        timed = time_steps(variants, args.weights, args.timing_rounds, args.timing_steps)
        print("RESULT " + json.dumps({"step_ms": timed, "b16": b16_rank8_share()}))
        return 0
    if args.worker:
        print("RESULT " + json.dumps(run_variant(args.worker, args.weights, args.steps)))
        return 0
    start, pretrained = time.time(), None
    with tempfile.TemporaryDirectory() as folder:
        weights = args.weights
        if not weights:
            weights = os.path.join(folder, "mnist_vit.npz")
            pretrained = pretrain(args.pretrain_epochs, weights)
            print(f"pre-trained on MNIST: {pretrained}", flush=True)
        rows = []
        for variant in variants:
            rows.append(child(variant, weights, args))
            print(json.dumps(rows[-1]), flush=True)
        timing = child("timing", weights, args)
    for row in rows:
        row["step_ms_median"] = timing["step_ms"][row["variant"]]
    print(table(rows))
    payload = {"pretrain": pretrained, "weights": args.weights, "shots_per_class": SHOTS,
               "variants": rows, "b16_rank_8": timing["b16"],
               "timing": {"rounds": args.timing_rounds, "steps": args.timing_steps},
               "wall_s": round(time.time() - start, 1)}  # fmt: skip
    report.save_json(args.json, payload)
    if args.results:
        notes = (
            f"pre-training: {pretrained or args.weights}; variants trained one after another, "
            "each in its own process; peak memory is the child's ru_maxrss; step times from one "
            "process, variants rotated; the host is shared with other processes (other "
            "users' tests and training), so step times compare within this run; "
            f"wall {payload['wall_s']} s"
        )
        values = figure_values(rows)
        values["pretrain_accuracy"] = pretrained and report.fig(
            pretrained["test_accuracy"], "{:.1%}"
        )
        values["b16_r8_trainable_share"] = report.fig(timing["b16"]["share"], "{:.2%}")
        values["b16_r8_trainable_params"] = report.fig(timing["b16"]["rank_8"], "{:,}")
        about = __doc__.split("\n\n")[0].split(": ", 1)[1]
        words = sys.argv[1:] if argv is None else argv
        command = "python -m benchmarks.bench lora " + " ".join(words)
        report.write_results(args.results, values, command=command.strip(), about=about,
                             notes=notes, extra={k: payload[k] for k in EXTRA})  # fmt: skip
        print(f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
