"""`keras-vit benchmark`: images/second of a ViT for inference and a training step.

Measures keras_vit in this process (after warm-up, median of several repeats) under the
precision and compiler of `--mixed-precision`/`--jit-compile` (default auto:
`keras_vit.distribute.choose_precision`), the matrix-multiply roof of the machine (float32 and
bfloat16, with and without XLA) and the model FLOP utilisation from the analytic FLOP
count (paper section 3.1; FLOPs = 2 x MACs, a training step ~3x the forward pass). The peers
(keras-hub's `ViTBackbone` + a dense head, vit-keras' `build_model`) are measured too when
they are installed and asked for with `--peers`. The side-by-side harness with one process
per framework, interleaved repeats and separable memory is `benchmarks/throughput.py`; it
builds and times models with the functions of this module.
"""

from __future__ import annotations

import logging
import resource
import statistics
import time

from keras_vit._atomic import write_json
from keras_vit.cli import common
from keras_vit.cli.main import UsageError

logger = logging.getLogger(__name__)

FRAMEWORKS = ("keras_vit", "keras_hub", "vit_keras")
MODES = ("infer", "train")
TRAINING_FLOPS_FACTOR = 3.0  # forward + backward (two matrix products per forward one)
ARCH_FIELDS = ("patch_size", "hidden_dim", "mlp_dim", "num_heads", "num_layers")
PEER_MODULES = {"keras_hub": "keras_hub", "vit_keras": "vit_keras.vit"}


def variant_arch(variant):
    """The architecture (`patch_size`, `hidden_dim`, `mlp_dim`, `num_heads`, `num_layers`) of
    a named variant from `keras_vit.configs.VIT_CONFIGS`, or of a custom spec
    "patch,hidden,mlp,heads,layers" (e.g. "8,32,64,4,2").

    Raises:
        ValueError: unknown variant name or a malformed spec.
    """
    from keras_vit import configs

    if "," in variant:
        try:
            values = [int(part) for part in variant.split(",")]
        except ValueError:
            values = []
        if len(values) != len(ARCH_FIELDS) or min(values) < 1 or values[1] % values[3]:
            raise ValueError(
                "A custom variant is 5 positive integers 'patch,hidden,mlp,heads,layers' with "
                f"hidden divisible by heads. Received: {variant!r}"
            )
        return dict(zip(ARCH_FIELDS, values, strict=True))
    config = configs.get_config(variant)
    return {field: getattr(config, field) for field in ARCH_FIELDS}


def analytic_macs(
    *,
    patch_size,
    hidden_dim,
    mlp_dim,
    num_layers,
    image_size=224,
    channels=3,
    num_classes=1000,
    class_token=True,
    **_ignored,
):
    """Multiply-accumulates of one forward pass of one image (matrix products only).

    Patch embedding, then per block the q/k/v/out projections (4 N D^2), q k^T and the
    weighted sum of values (2 N^2 D over all heads) and the MLP (2 N D M), then the head.
    Layer norms, softmax, GELU and biases are left out, as in the published counts
    (vit_facts.md section 1: Ti/16 1.26 G, S/16 4.61 G, B/16 17.58 G at 224).

    Args:
        patch_size, hidden_dim, mlp_dim, num_layers: the architecture (paper table 1).
        image_size: square image side in pixels, a multiple of `patch_size`.
        channels: image channels. num_classes: head outputs (0 for no head).
        class_token: whether a class token is prepended (token pooling).

    Returns:
        The MAC count (int); FLOPs are twice this.
    """
    patches = (image_size // patch_size) ** 2
    tokens = patches + int(class_token)
    d = hidden_dim
    embed = patches * patch_size * patch_size * channels * d
    per_block = 4 * tokens * d * d + 2 * tokens * tokens * d + 2 * tokens * d * mlp_dim
    return embed + num_layers * per_block + d * num_classes


def model_gflops(variant, image_size, mode, num_classes=1000):
    """Analytic GFLOPs per image of `mode` ("infer" or "train") for a named variant."""
    macs = analytic_macs(**variant_arch(variant), image_size=image_size, num_classes=num_classes)
    return 2.0 * macs * (TRAINING_FLOPS_FACTOR if mode == "train" else 1.0) / 1e9


def peak_rss_mb():
    """Peak resident memory of this process so far, MiB (Linux `ru_maxrss` is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def gemm_gflops(size, repeats=3, xla=True, dtype="float32"):
    """Median GFLOP/s of a `size x size` matrix product in TensorFlow (2 n^3 FLOPs), in
    `dtype` ("float32" or "bfloat16"), with or without XLA."""
    import tensorflow as tf

    a = tf.cast(tf.random.normal((size, size)), dtype)
    b = tf.cast(tf.random.normal((size, size)), dtype)
    matmul = tf.function(lambda x, y: tf.matmul(x, y)[:1, :1], jit_compile=xla)
    matmul(a, b).numpy()  # compile, warm up
    steps = min(20, max(1, int(2e10 // (2 * size**3))))  # ~10 GFLOP per repeat, <= 20 calls
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            matmul(a, b).numpy()
        times.append((time.perf_counter() - start) / steps)
    return 2.0 * size**3 / statistics.median(times) / 1e9


def gemm_peak(sizes=(1024, 2048, 4096), repeats=3, xla=True, dtype="float32"):
    """The best GEMM GFLOP/s over `sizes` and the figure of each size."""
    per_size = {str(n): gemm_gflops(n, repeats, xla, dtype) for n in sizes}
    return max(per_size.values()), per_size


GEMM_SETTINGS = (("float32", True), ("float32", False), ("bfloat16", True), ("bfloat16", False))


def gemm_roof(sizes=(1024, 2048, 4096), repeats=3):
    """The machine's roof: the best GEMM GFLOP/s over `sizes` in float32 and bfloat16, each
    with and without XLA. Returns (best, {"bfloat16 noxla": {size: GFLOP/s}, ...})."""
    figures = {
        f"{dtype} {'xla' if xla else 'noxla'}": gemm_peak(sizes, repeats, xla, dtype)[1]
        for dtype, xla in GEMM_SETTINGS
    }
    best = max(value for per_size in figures.values() for value in per_size.values())
    return best, figures


def peer_available(framework):
    """Whether `framework` can be imported here (keras_vit always can)."""
    if framework == "keras_vit":
        return True
    import importlib

    try:
        importlib.import_module(PEER_MODULES[framework])
    except Exception as error:  # a broken optional install is "not available" too
        logger.debug("%s not available: %s", framework, error)
        return False
    return True


def build_model(framework, variant, image_size, num_classes=1000):
    """The same ViT architecture built with `framework` (no dropout, token pooling).

    keras_vit: `keras_vit.ViT`; keras_hub: `keras_hub.models.ViTBackbone` + class token +
    dense head; vit_keras: `vit_keras.vit.build_model` (linear head). The global dtype policy
    applies; the head is float32 in every case.
    """
    import keras

    arch = variant_arch(variant)
    if framework == "keras_vit":
        from keras_vit.models import ViT

        return ViT(**arch, image_size=image_size, num_classes=num_classes, dropout_rate=0.0)
    if framework == "keras_hub":
        import keras_hub

        backbone = keras_hub.models.ViTBackbone(
            image_shape=(image_size, image_size, 3),
            patch_size=arch["patch_size"],
            num_layers=arch["num_layers"],
            num_heads=arch["num_heads"],
            hidden_dim=arch["hidden_dim"],
            mlp_dim=arch["mlp_dim"],
            dropout_rate=0.0,
            attention_dropout=0.0,
            layer_norm_epsilon=1e-6,
        )
        images = keras.Input((image_size, image_size, 3), name="images")
        tokens = backbone(images)
        logits = keras.layers.Dense(num_classes, dtype="float32", name="head")(tokens[:, 0])
        return keras.Model(images, logits, name="keras_hub_vit")
    if framework == "vit_keras":
        from vit_keras import vit

        return vit.build_model(
            image_size=image_size,
            patch_size=arch["patch_size"],
            num_layers=arch["num_layers"],
            hidden_size=arch["hidden_dim"],
            num_heads=arch["num_heads"],
            name="vit_keras_vit",
            mlp_dim=arch["mlp_dim"],
            classes=num_classes,
            dropout=0.0,
            activation="linear",
            include_top=True,
            representation_size=None,
        )
    raise ValueError(f"Unknown framework {framework!r}; expected one of {FRAMEWORKS}.")


def make_step(model, mode, batch_size, image_size, xla=True, num_classes=1000, seed=0):
    """A no-argument function running one inference or training step on a fixed batch.

    Training: AdamW (learning rate 1e-4) on sparse categorical cross-entropy from logits
    through `model.train_on_batch`; inference: `model.predict_on_batch`. Both run the step
    Keras compiles (`jit_compile=xla`) and block until the result is on the host.
    """
    import keras
    import numpy as np

    rng = np.random.default_rng(seed)
    images = rng.uniform(-1.0, 1.0, (batch_size, image_size, image_size, 3)).astype("float32")
    labels = rng.integers(0, num_classes, (batch_size,)).astype("int32")
    model.compile(
        optimizer=keras.optimizers.AdamW(learning_rate=1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=bool(xla),
    )
    if mode == "train":
        return lambda: model.train_on_batch(images, labels)
    if mode == "infer":
        return lambda: model.predict_on_batch(images)
    raise ValueError(f"Unknown mode {mode!r}; expected one of {MODES}.")


def time_steps(step, steps):
    """Seconds for `steps` consecutive calls of `step`."""
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return time.perf_counter() - start


def measure(framework, variant, image_size, batch_size, mode, *, xla, steps, repeats, warmup):
    """Builds, warms up and times one framework in this process; returns a result dict."""
    model = build_model(framework, variant, image_size)
    step = make_step(model, mode, batch_size, image_size, xla=xla)
    start = time.perf_counter()
    for _ in range(warmup):
        step()
    warmup_s = time.perf_counter() - start
    rates = [steps * batch_size / time_steps(step, steps) for _ in range(repeats)]
    record = result_record(framework, mode, rates, model.count_params(), warmup_s)
    record["xla"] = bool(xla)
    return record


def result_record(framework, mode, rates, params, warmup_s):
    """One framework's figures: median and range of images/s, params, peak RSS."""
    return {
        "framework": framework,
        "mode": mode,
        "images_per_s": statistics.median(rates),
        "images_per_s_all": rates,
        "params": int(params),
        "peak_rss_mb": peak_rss_mb(),
        "warmup_s": warmup_s,
    }


def add_derived(results, variant, image_size, gemm_peak_gflops):
    """Adds model GFLOP/s, utilisation of the GEMM peak and ours/peer ratios in place."""
    for record in results:
        flops = model_gflops(variant, image_size, record["mode"]) * record["images_per_s"]
        record["model_gflops_per_s"] = flops
        record["utilisation"] = flops / gemm_peak_gflops if gemm_peak_gflops else None
    ours = {(r["mode"], r.get("xla")): r for r in results if r["framework"] == "keras_vit"}
    for record in results:
        base = ours.get((record["mode"], record.get("xla")))
        usable = base is not None and record["images_per_s"] > 0
        record["ours_over_this"] = base["images_per_s"] / record["images_per_s"] if usable else None
        best = max(
            (r["images_per_s"] for (mode, _), r in ours.items() if mode == record["mode"]),
            default=None,
        )
        record["best_ours_over_this"] = (
            best / record["images_per_s"] if best and record["images_per_s"] > 0 else None
        )
    return results


def format_results(results, header_note=""):
    """The table printed by the benchmark commands (Markdown)."""
    header = [
        "mode",
        "framework",
        "img/s (median)",
        "range",
        "peak RSS MiB",
        "model GFLOP/s",
        "util. of GEMM roof",
        "ours/this (same XLA)",
        "best ours/this",
    ]
    rows = []
    for r in results:
        rates = r["images_per_s_all"]
        ratio = r.get("ours_over_this")
        best = r.get("best_ours_over_this")
        util = r.get("utilisation")
        xla = r.get("xla")
        rows.append(
            [
                r["mode"],
                r["framework"] + ("" if xla is None else " (XLA)" if xla else " (no XLA)"),
                f"{r['images_per_s']:.2f}",
                f"{min(rates):.2f}-{max(rates):.2f}",
                f"{r['peak_rss_mb']:.0f}",
                f"{r.get('model_gflops_per_s', 0):.1f}",
                "-" if util is None else f"{100 * util:.0f}%",
                "-" if ratio is None else f"{ratio:.2f}x",
                "-" if best is None else f"{best:.2f}x",
            ]
        )
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    table = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    table += [line(r) for r in rows]
    return (header_note + "\n" if header_note else "") + "\n".join(table)


def add_parser(subparsers):
    """Registers `keras-vit benchmark`."""
    parser = subparsers.add_parser(
        "benchmark",
        help="measure images/s for inference and training, and FLOP utilisation",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument(
        "--variant",
        default="Ti/16",
        help="named variant (default Ti/16) or 'patch,hidden,mlp,heads,layers'",
    )
    parser.add_argument("--image-size", type=int, default=224, help="square side (224)")
    parser.add_argument("--batch-size", type=int, default=16, help="batch size (16)")
    parser.add_argument(
        "--mode", choices=(*MODES, "both"), default="both", help="what to time (both)"
    )
    common.add_precision_arguments(parser)
    common.add_deprecated_precision_aliases(parser)
    parser.add_argument("--steps", type=int, default=3, help="steps per repeat (3)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats, median (5)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps (2)")
    parser.add_argument(
        "--peers", action="store_true", help="also time keras-hub and vit-keras when installed"
    )
    parser.add_argument(
        "--gemm-sizes",
        default="1024,2048,4096",
        help="square GEMM sizes for the machine's roof (float32 and bfloat16, with and "
        "without XLA), comma-separated; 'none' to skip",
    )
    parser.add_argument("--json", dest="json_path", help="also write the results here")
    parser.set_defaults(func=run)
    return parser


def check_args(args):
    """Validates arguments before any work; raises UsageError naming the value and rule."""
    try:
        patch = variant_arch(args.variant)["patch_size"]
    except ValueError as error:
        raise UsageError(f"--variant: {error}") from None
    if args.image_size <= 0 or args.image_size % patch:
        raise UsageError(
            f"--image-size {args.image_size} must be a positive multiple of the patch ({patch})"
        )
    for name in ("batch_size", "steps", "repeats"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 1:
        raise UsageError(f"--warmup must be >= 1 (the first step compiles), got {args.warmup}")
    return parse_sizes(args.gemm_sizes)


def parse_sizes(text):
    """`"1024,2048"` -> (1024, 2048); `"none"` -> (); raises UsageError otherwise."""
    if text.strip().lower() == "none":
        return ()
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(
            f"--gemm-sizes must be integers separated by commas, got {text!r}"
        ) from None
    if any(size < 1 for size in sizes):
        raise UsageError(f"--gemm-sizes must be positive, got {text!r}")
    return sizes


def run(args):
    """Runs the benchmark in this process and prints the table; returns 0."""

    sizes = check_args(args)
    import keras

    from keras_vit import distribute

    choice = distribute.choose_precision(
        variant_arch(args.variant)["hidden_dim"],
        mixed_precision=args.mixed_precision,
        jit_compile=args.jit_compile,
    )
    print(f"Precision: {choice.describe()}", flush=True)
    keras.config.set_dtype_policy(choice.policy)
    modes = MODES if args.mode == "both" else (args.mode,)
    frameworks = ["keras_vit"]
    if args.peers:
        frameworks += [f for f in FRAMEWORKS[1:] if peer_available(f)]
    results = []
    for framework in frameworks:
        for mode in modes:
            print(f"timing {framework} {mode} ...", flush=True)
            results.append(
                measure(
                    framework,
                    args.variant,
                    args.image_size,
                    args.batch_size,
                    mode,
                    xla=choice.jit_compile,
                    steps=args.steps,
                    repeats=args.repeats,
                    warmup=args.warmup,
                )
            )
    peak, per_size = gemm_roof(sizes) if sizes else (None, {})
    add_derived(results, args.variant, args.image_size, peak)
    note = (
        f"ViT-{args.variant} @{args.image_size}, batch {args.batch_size}, {choice.policy}, "
        f"XLA {'on' if choice.jit_compile else 'off'}; GEMM roof (best of float32/bfloat16, "
        "XLA on/off) "
        + (f"{peak:.1f} GFLOP/s" if peak else "not measured")
        + " (peak RSS is cumulative within this one process)"
    )
    print(format_results(results, note))
    if args.json_path:
        payload = {
            "config": vars_for_json(args),
            "precision": choice.as_dict(),
            "gemm_gflops": per_size,
            "results": results,
        }
        write_json(args.json_path, payload)
    return 0


def vars_for_json(args):
    """The parsed arguments without the `func` callback."""
    return {k: v for k, v in vars(args).items() if k != "func"}
