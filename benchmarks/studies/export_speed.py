"""Study: does a TensorFlow-only process serve the SavedModel export as fast as Keras runs it?

The variant's float32 and mixed_bfloat16 exports (a random head), each served by a TensorFlow-only
process, against the Keras model's `predict_on_batch` under both (no XLA): img/s (medians of
rotated repeats), the bfloat16 export's top-1 agreement and largest relative logit difference.

    python -m benchmarks.studies.export_speed --model S/16 --batch-size 16
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from functools import partial

from benchmarks.harness.common import (
    add_model_arguments,
    build_model,
    check_model_arguments,
    median,
    time_call,
)
from benchmarks.studies import report

SERVER = r"""
import sys, time
import numpy as np
import tensorflow as tf

assert "keras_vit" not in sys.modules
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
images = tf.constant(np.load(sys.argv[2]))
np.save(sys.argv[3], serve(images=images)["logits"].numpy())
print("ready", flush=True)
for line in sys.stdin:
    start = time.perf_counter()
    for _ in range(int(line)):
        serve(images=images)["logits"].numpy()
    print(time.perf_counter() - start, flush=True)
"""

POINTS = ("keras float32", "keras mixed_bfloat16", "export float32", "export mixed_bfloat16")
# The documents' figures of the summary: {figure key: (summary key, format)}.
RATIOS = {
    "export_over_keras_f32": ("export_over_keras_float32", "{:.2f}x"),
    "export_over_keras_bf16": ("export_over_keras_bfloat16", "{:.2f}x"),
    "bf16_over_f32_export": ("bf16_export_over_f32_export", "{:.2f}x"),
    "bf16_max_diff_relative": ("bf16_vs_f32_export_max_diff_relative", "{:.1%}"),
    "bf16_top1_agreement": ("bf16_vs_f32_export_top1_agreement", "{:.0%}"),
}


def parse_args(argv=None):
    parser = report.parser(__doc__, "export_speed.json")
    add_model_arguments(parser, modes=("infer",), default_mode="infer")
    parser.set_defaults(variant="S/16")
    parser.add_argument("--steps", type=int, default=3, help="calls per timed repeat (3)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (5)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls per point (2)")
    args = parser.parse_args(argv)
    check_model_arguments(parser, args, "steps", "repeats")
    report.at_least(parser, args, "warmup", minimum=0)
    return args


def ask(server, steps) -> float:
    """Seconds a serving process took for `steps` calls of its export."""
    print(steps, file=server.stdin, flush=True)
    return float(server.stdout.readline())


def figure_values(result) -> dict:
    """The documents' figures: img/s of the four points, their ratios, the agreement."""
    values = {f"{side}_{short}_img_s": report.fig(result["img_s"][f"{side} {policy}"], "{:.2f}")
              for side in ("keras", "export")
              for short, policy in (("f32", "float32"), ("bf16", "mixed_bfloat16"))}  # fmt: skip
    values |= {key: report.fig(result[name], form) for key, (name, form) in RATIOS.items()}
    values["load"] = " / ".join(f"{v:.2f}" for v in result["load_average"])
    values["setup"] = f"{result['variant']} @{result['image_size']}, batch {result['batch_size']}"
    return values


def start_points(models, images, pixels, folder):
    """(timers, logits, servers) of the four points (`timer(steps)`: seconds); each export
    served by its own process that imports TensorFlow only (no PYTHONPATH, another folder)."""
    import numpy as np

    import keras_vit

    timers, logits, servers, pixels_file = {}, {}, [], os.path.join(folder, "pixels.npy")
    np.save(pixels_file, pixels)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    pipes = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    for policy, model in models.items():
        path = keras_vit.export_saved_model(model, os.path.join(folder, policy))
        out = os.path.join(folder, f"{policy}.npy")
        argv = [sys.executable, "-c", SERVER, path, pixels_file, out]
        server = subprocess.Popen(argv, cwd=tempfile.gettempdir(), **pipes)
        servers.append(server)
        if (line := server.stdout.readline().strip()) != "ready":
            raise RuntimeError(f"the TensorFlow-only server did not start (said {line!r})")
        timers[f"export {policy}"], logits[f"export {policy}"] = partial(ask, server), np.load(out)
        model.predict_on_batch(images)  # builds the predict function (no XLA)
        timers[f"keras {policy}"] = partial(time_call, partial(model.predict_on_batch, images))
    logits["keras float32"] = np.asarray(models["float32"].predict_on_batch(images))
    return timers, logits, servers


def main(argv=None) -> int:
    args = parse_args(argv)
    import keras
    import numpy as np

    from keras_vit.runtime import precision

    keras.utils.set_random_seed(0)
    model = build_model(args.variant, args.image_size)  # no dropout
    head, rng = model.get_layer("head"), np.random.default_rng(0)  # a random head: logits != 0
    head.set_weights([rng.normal(0, 0.05, w.shape) for w in head.get_weights()])
    models = {"float32": model}
    models["mixed_bfloat16"] = precision.with_dtype_policy(model, "mixed_bfloat16")
    shape = (args.batch_size, args.image_size, args.image_size, 3)
    pixels = np.random.default_rng(1).uniform(0, 255, shape).astype("float32")
    images = pixels / 127.5 - 1.0  # the export scales [0, 255] to [-1, 1] itself
    images_per_call = args.steps * args.batch_size
    with tempfile.TemporaryDirectory() as tmp:
        timers, logits, servers = start_points(models, images, pixels, tmp)
        try:
            for timer in timers.values():
                timer(args.warmup)
            rates = {point: lambda t=timers[point]: images_per_call / t(args.steps)
                     for point in POINTS}  # fmt: skip
            rates = report.run_rounds(rates, args.repeats)
        finally:
            for server in servers:
                server.stdin.close()
                server.wait(timeout=60)
    med = {point: median(values) for point, values in rates.items()}
    f32, bf16 = logits["export float32"], logits["export mixed_bfloat16"]
    scale = float(np.max(np.abs(f32)))
    result = {
        "variant": args.variant, "image_size": args.image_size, "batch_size": args.batch_size,
        "img_s": med, "img_s_repeats": rates,
        "export_over_keras_float32": med["export float32"] / med["keras float32"],
        "export_over_keras_bfloat16": med["export mixed_bfloat16"] / med["keras mixed_bfloat16"],
        "bf16_export_over_f32_export": med["export mixed_bfloat16"] / med["export float32"],
        "max_abs_logit": scale,
        "bf16_vs_f32_export_max_diff_relative": float(np.max(np.abs(bf16 - f32))) / scale,
        "bf16_vs_f32_export_top1_agreement": float(np.mean(bf16.argmax(1) == f32.argmax(1))),
        "f32_export_vs_keras_max_diff": float(np.max(np.abs(f32 - logits["keras float32"]))),
        "load_average": list(os.getloadavg()),
    }  # fmt: skip
    print(json.dumps({k: v for k, v in result.items() if k != "img_s_repeats"}, indent=2))
    report.save_json(args.json, result)
    about = "SavedModel export served by a TensorFlow-only process against the Keras model, "
    about += "float32 and mixed_bfloat16, no XLA (img/s, medians of rotated repeats)"
    report.write_figures(args.results, figure_values(result), __file__, about)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
