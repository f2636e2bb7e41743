"""Study: peak memory of one ViT training step on Keras' JAX backend (CPU; a process a point).

Per point a jit-compiled step (forward, cross-entropy, gradients, SGD update): attention "fused"
(`keras.ops.dot_product_attention`) or "explicit", x the model's `remat` (with XLA:CPU's memory
scheduler; `--default-scheduler`: its default). XLA's memory analysis (MiB); `--run`: peak RSS.

    python -m benchmarks.studies.memory --image-size 224 384 512 [--default-scheduler]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from benchmarks.studies import report

METHOD = "one jit-compiled training step (forward, cross-entropy, gradients, SGD update), Keras "
METHOD += "on JAX, float32, a process a point; XLA's memory analysis; --run: peak RSS of one step"
# (attention kernel, remat); the first, explicit attention without remat, is the baseline.
COMBINATIONS = [(kernel, remat) for remat in (False, True) for kernel in ("explicit", "fused")]


def measure_point(variant, image_size, batch_size, kernel, remat, run) -> dict:
    """One point, in this process (KERAS_BACKEND=jax must be set before Keras is imported)."""
    import jax
    import keras
    import numpy as np

    from keras_vit.evaluate.benchmarking import peak_rss_mb, token_grid, variant_arch
    from keras_vit.layers import MultiHeadSelfAttention
    from keras_vit.model.from_kwargs import build
    from keras_vit.spec import configs

    config = None if "," in variant else configs.resolve_model(variant).config
    kwargs = config.as_kwargs() if config else variant_arch(variant)  # "8,32,64,4,2"
    model = build({**kwargs, "image_size": image_size, "num_classes": 1000, "remat": remat})
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, MultiHeadSelfAttention):
            layer.attention_kernel = kernel
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (batch_size, image_size, image_size, 3)).astype("float32")
    arguments = ([v.value for v in model.trainable_variables],
                 [v.value for v in model.non_trainable_variables],
                 images, rng.integers(0, 1000, batch_size))  # fmt: skip

    def loss_fn(trainable, frozen, images, labels):
        logits, _ = model.stateless_call(trainable, frozen, images, training=True)
        losses = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        return keras.ops.mean(losses)

    def step(trainable, frozen, images, labels):
        loss, grads = jax.value_and_grad(loss_fn)(trainable, frozen, images, labels)
        return loss, [w - 1e-3 * g for w, g in zip(trainable, grads, strict=True)]

    start = time.perf_counter()
    compiled = jax.jit(step).lower(*arguments).compile()
    analysis, mib = compiled.memory_analysis(), 2**20
    out = {
        "model": variant, "image_size": image_size, "batch_size": batch_size,
        "tokens": int(np.prod(token_grid(variant_arch(variant), image_size))) + 1,  # hybrids too
        "attention_kernel": kernel, "remat": remat, "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "compile_s": round(time.perf_counter() - start, 1),
        "xla_temp_mib": round(analysis.temp_size_in_bytes / mib, 1),
        "xla_arguments_outputs_mib": round(
            (analysis.argument_size_in_bytes + analysis.output_size_in_bytes) / mib, 1),
    }  # fmt: skip
    if run:
        before, start = peak_rss_mb(), time.perf_counter()
        out["loss"] = float(compiled(*arguments)[0])
        out["step_s"] = round(time.perf_counter() - start, 1)
        out["peak_rss_mib"] = round(peak_rss_mb(), 1)
        out["peak_rss_increase_mib"] = round(peak_rss_mb() - before, 1)
    return out


def parse_args(argv=None):
    parser = report.parser(__doc__, json_help=None)
    parser.add_argument("--model", dest="variant", default="B/16", help="a named variant (B/16)")
    parser.add_argument("--image-size", type=int, nargs="+", default=[384], help="(384)")
    parser.add_argument("--batch-size", type=int, default=8, help="(8)")
    parser.add_argument("--run", action="store_true", help="execute the step: peak RSS too")
    parser.add_argument("--default-scheduler", action="store_true",
                        help="XLA:CPU's default scheduler for every point")  # fmt: skip
    parser.add_argument("--output", help="JSON path (default under benchmarks/results/runs/)")
    parser.add_argument("--point", help=argparse.SUPPRESS)  # the child: its point as JSON
    args = parser.parse_args(argv)
    report.at_least(parser, args, "batch_size")
    for size in args.image_size:
        report.checked_image_size(parser, argparse.Namespace(variant=args.variant, image_size=size))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.point:
        print("POINT " + json.dumps(measure_point(*json.loads(args.point))), flush=True)
        return 0
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    if args.default_scheduler:  # named by the user: keras_vit leaves it (the default's value)
        env["XLA_FLAGS"] = "--xla_cpu_enable_concurrency_optimized_scheduler=true"
    env = report.common.child_env(env)
    child = [*report.common.module_argv(sys.executable, "benchmarks.studies.memory"), "--point"]
    points = []
    for size in args.image_size:
        for kernel, remat in COMBINATIONS:
            point = [args.variant, size, args.batch_size, kernel, remat, args.run]
            points.append(report.child_json([*child, json.dumps(point)], "POINT ", env=env))
            print(json.dumps(points[-1]), flush=True)
    for point in points:
        base = next(p for p in points if p["image_size"] == point["image_size"])
        for key in ("xla_temp_mib", "peak_rss_increase_mib"):
            if key in point:
                point[f"{key}_vs_explicit_no_remat"] = round(point[key] / base[key], 3)
    slug = args.variant.replace("/", "").lower() + "_" + "_".join(map(str, args.image_size))
    slug += "_default_scheduler" * args.default_scheduler
    output = args.output or os.path.join(report.ROOT, f"benchmarks/results/runs/memory_{slug}.json")
    from keras_vit.runtime.precision_probe import cpu_model

    record = {"method": METHOD, "host": cpu_model(), "cpu_count": os.cpu_count(),
              "run": bool(args.run), "default_scheduler": args.default_scheduler,
              "points": points}  # fmt: skip
    report.save_json(output, record)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
