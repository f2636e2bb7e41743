"""SavedModel speed: a TensorFlow-only process runs the export as fast as the Keras model.

For one variant, keras_vit's ViT (initialised weights, a random head so logits are not 0) is
exported twice with `keras_vit.export_saved_model`: in float32, and in mixed_bfloat16 through
`keras_vit.runtime.distribute.with_dtype_policy` (what `keras-vit export --mixed-precision
mixed_bfloat16` writes). Each export is loaded by its own subprocess that imports TensorFlow
only (PYTHONPATH cleared; no keras_vit, no Keras model code) and answers timing requests on
`serving_default` for a fixed batch of pixel images; this process times the Keras model's
`predict_on_batch` under both policies (no XLA, as the export). The four points are timed in
turn, the order rotating every round, so load drift hits them alike; medians are reported.

Also reported: the largest logit difference of the bfloat16 export against the float32
export, relative to the largest float32 logit, and their top-1 agreement on the batch; and
the float32 export against the float32 Keras model (should be ~1e-6).

    python benchmarks/studies/export_speed.py --variant S/16 --batch-size 16
    python benchmarks/studies/export_speed.py --variant 8,32,64,4,2 --image-size 32 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.join(_HERE, ".."), os.path.join(_HERE, "..", "harness")]

import common  # noqa: E402

SERVER = r"""
import sys, time
import numpy as np
import tensorflow as tf

assert "keras_vit" not in sys.modules
model = tf.saved_model.load(sys.argv[1])
serve = model.signatures["serving_default"]
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


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_model_arguments(parser, modes=("infer",), default_mode="infer")
    parser.set_defaults(variant="S/16")
    parser.add_argument("--steps", type=int, default=3, help="calls per timed repeat (3)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (5)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls per point (2)")
    parser.add_argument("--json", help="write the raw results here")
    parser.add_argument("--results", help="write the documents' figures here")
    args = parser.parse_args(argv)
    common.check_model_arguments(parser, args, {"--steps": args.steps, "--repeats": args.repeats})
    if args.warmup < 0:
        parser.error("--warmup must be >= 0")
    return args


def build(args):
    """keras_vit's ViT of the variant with a random head (seeded)."""
    import keras
    import numpy as np

    from keras_vit.evaluate import benchmarking
    from keras_vit.model.models import ViT

    keras.utils.set_random_seed(0)
    model = ViT(
        **benchmarking.variant_arch(args.variant),
        image_size=args.image_size,
        num_classes=1000,
        dropout_rate=0.0,
    )
    head = model.get_layer("head")
    rng = np.random.default_rng(0)
    kernel, bias = head.get_weights()
    head.set_weights([rng.normal(0, 0.05, kernel.shape), rng.normal(0, 0.05, bias.shape)])
    return model


def start_server(export_path, pixels_file, logits_file):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, export_path, pixels_file, logits_file],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),  # never import the checkout's keras_vit
    )
    line = server.stdout.readline().strip()
    if line != "ready":
        raise RuntimeError(f"the TensorFlow-only server did not start (said {line!r})")
    return server


def timed_by(server):
    def call(steps):
        server.stdin.write(f"{steps}\n")
        server.stdin.flush()
        return float(server.stdout.readline())

    return call


def timed_keras(model, images):
    model.predict_on_batch(images)  # builds the predict function (no XLA)
    return lambda steps: common.time_call(lambda: model.predict_on_batch(images), steps)


def summary(rates, logits, args):
    import numpy as np

    med = {point: common.median(values) for point, values in rates.items()}
    f32, bf16, keras_f32 = (
        logits["export float32"],
        logits["export mixed_bfloat16"],
        logits["keras float32"],
    )
    scale = float(np.max(np.abs(f32)))
    return {
        "variant": args.variant,
        "image_size": args.image_size,
        "batch_size": args.batch_size,
        "img_s": med,
        "img_s_repeats": rates,
        "export_over_keras_float32": med["export float32"] / med["keras float32"],
        "export_over_keras_bfloat16": med["export mixed_bfloat16"] / med["keras mixed_bfloat16"],
        "bf16_export_over_f32_export": med["export mixed_bfloat16"] / med["export float32"],
        "max_abs_logit": scale,
        "bf16_vs_f32_export_max_diff_relative": float(np.max(np.abs(bf16 - f32))) / scale,
        "bf16_vs_f32_export_top1_agreement": float(
            np.mean(np.argmax(bf16, 1) == np.argmax(f32, 1))
        ),
        "f32_export_vs_keras_max_diff": float(np.max(np.abs(f32 - keras_f32))),
        "load_average": list(os.getloadavg()),
    }


def figure_values(result) -> dict:
    """The documents' figures: img/s of the four points, their ratios, the agreement."""
    img_s = result["img_s"]
    values = {
        f"{side}_{short}_img_s": {"value": img_s[f"{side} {policy}"], "format": "{:.2f}"}
        for side in ("keras", "export")
        for short, policy in (("f32", "float32"), ("bf16", "mixed_bfloat16"))
    }
    ratios = {
        "export_over_keras_f32": "export_over_keras_float32",
        "export_over_keras_bf16": "export_over_keras_bfloat16",
        "bf16_over_f32_export": "bf16_export_over_f32_export",
    }
    for key, name in ratios.items():
        values[key] = {"value": result[name], "format": "{:.2f}x"}
    values["bf16_max_diff_relative"] = {
        "value": result["bf16_vs_f32_export_max_diff_relative"],
        "format": "{:.1%}",
    }
    values["bf16_top1_agreement"] = {
        "value": result["bf16_vs_f32_export_top1_agreement"],
        "format": "{:.0%}",
    }
    values["load"] = " / ".join(f"{v:.2f}" for v in result["load_average"])
    values["setup"] = f"{result['variant']} @{result['image_size']}, batch {result['batch_size']}"
    return values


def main(argv=None) -> int:
    args = parse_args(argv)
    import numpy as np

    import keras_vit
    from keras_vit.runtime import distribute

    model = build(args)
    bf16_model = distribute.with_dtype_policy(model, "mixed_bfloat16")
    rng = np.random.default_rng(1)
    pixels = rng.uniform(0, 255, (args.batch_size, args.image_size, args.image_size, 3))
    pixels = pixels.astype("float32")
    images = pixels / 127.5 - 1.0  # the export scales [0, 255] to [-1, 1] itself
    timers, logits, servers = {}, {}, []
    with tempfile.TemporaryDirectory() as tmp:
        pixels_file = os.path.join(tmp, "pixels.npy")
        np.save(pixels_file, pixels)
        for point, keras_model in (("float32", model), ("mixed_bfloat16", bf16_model)):
            path = keras_vit.export_saved_model(keras_model, os.path.join(tmp, point))
            logits_file = os.path.join(tmp, f"{point}.npy")
            servers.append(start_server(path, pixels_file, logits_file))
            timers[f"export {point}"] = timed_by(servers[-1])
            logits[f"export {point}"] = np.load(logits_file)
            timers[f"keras {point}"] = timed_keras(keras_model, images)
        logits["keras float32"] = np.asarray(model.predict_on_batch(images))
        try:
            for timer in timers.values():
                if args.warmup:
                    timer(args.warmup)
            rates = {point: [] for point in POINTS}
            for round_index in range(args.repeats):
                order = POINTS[round_index % 4 :] + POINTS[: round_index % 4]
                for point in order:
                    seconds = timers[point](args.steps)
                    rates[point].append(args.steps * args.batch_size / seconds)
                print(f"  round {round_index + 1}/{args.repeats} done", flush=True)
        finally:
            for server in servers:
                server.stdin.close()
                server.wait(timeout=60)
    result = summary(rates, logits, args)
    print(json.dumps({k: v for k, v in result.items() if k != "img_s_repeats"}, indent=2))
    if args.json:
        common.write_json(args.json, result)
    if args.results:
        from figures import write_results

        write_results(
            args.results,
            figure_values(result),
            command="python benchmarks/studies/export_speed.py " + " ".join(sys.argv[1:]),
            about="SavedModel export served by a TensorFlow-only process against the Keras "
            "model, float32 and mixed_bfloat16, no XLA (img/s, medians of rotated repeats)",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
