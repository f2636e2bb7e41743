"""Study: serving under load, a TensorFlow-only process answering concurrent requests.

A tiny ViT export is served by a TensorFlow-only process to `--requests` `serving_bytes` calls from
`--threads` threads (1-16 JPEG/PNG images each, `--bad-fraction` with a bad one): latency (ms),
requests/s, RSS growth (MiB); good answers equal the serial ones, bad ones fail naming the problem.

    python -m benchmarks.studies.serving_load --requests 40 --threads 2 --pool 8   # smoke run
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from benchmarks.studies import report

SERVER = r"""
import json, random, sys, time
from concurrent.futures import ThreadPoolExecutor
import numpy as np
import tensorflow as tf

args = json.loads(sys.argv[1])
assert "keras_vit" not in sys.modules
serve = tf.saved_model.load(args["export"]).signatures["serving_bytes"]
with np.load(args["payloads"], allow_pickle=False) as stored:
    pool = [[stored[f"p{i}_{j}"].tobytes() for j in range(int(stored[f"n{i}"]))]
            for i in range(int(stored["count"]))]
    bad = [bool(b) for b in stored["bad"]]


def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def call(index):
    try:
        return serve(image_bytes=tf.constant(pool[index]))["logits"].numpy(), None
    except tf.errors.InvalidArgumentError as error:
        return None, " ".join(str(error.message).split())


def timed(index):  # (index, seconds, |logits - serial logits| or None, error or None)
    start = time.perf_counter()
    logits, error = call(index)
    seconds = time.perf_counter() - start
    diff = None if error is not None else float(np.max(np.abs(logits - reference[index][0])))
    return index, seconds, diff, error


reference = [call(i) for i in range(len(pool))]  # serial answers, and the warm-up
rss_warm, rng = rss_mb(), random.Random(0)
ids = {flag: [i for i in range(len(pool)) if bad[i] == flag] for flag in (True, False)}
num_bad = round(args["requests"] * args["bad_fraction"]) if ids[True] else 0
order = [rng.choice(ids[True]) for _ in range(num_bad)]
order += [rng.choice(ids[False]) for _ in range(args["requests"] - num_bad)]
rng.shuffle(order)  # exactly round(requests * bad_fraction) bad requests, spread at random
start = time.perf_counter()
with ThreadPoolExecutor(args["threads"]) as threads:
    answers = list(threads.map(timed, order))
wall, rss_end = time.perf_counter() - start, rss_mb()
wrong = [f"bad payload {i} answered" if e is None else f"good payload {i} failed: {e[:200]}"
         for i, _, _, e in answers if bad[i] == (e is None)]
ms = np.array([seconds for _, seconds, _, _ in answers]) * 1000
print("RESULT " + json.dumps({
    "requests": len(answers), "threads": args["threads"],
    "bad_requests": sum(bad[i] for i in order),
    "requests_per_s": round(len(answers) / wall, 1),
    "latency_ms": {p: round(float(np.percentile(ms, q)), 2)
                   for p, q in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100))},
    "max_abs_logit_diff": max((d for _, _, d, _ in answers if d is not None), default=0.0),
    "wrong": wrong[:10],
    "bad_messages": sorted({e.split("unavailable> ")[-1].split(" [[")[0][:160]
                            for i, _, _, e in answers if e is not None and bad[i]}),
    "rss_warm_mb": round(rss_warm, 1), "rss_end_mb": round(rss_end, 1),
    "rss_growth_mb": round(rss_end - rss_warm, 1),
}))
"""

# What the rejection of each kind of bad payload must say (TensorFlow's decoder messages).
BAD_MESSAGE_WORDS = ("Invalid JPEG data", "Unknown image file format", "Input is empty", "Empty")
FIGURES = {"requests": "{:,}", "bad_requests": "{}", "threads": "{}", "rss_warm_mb": "{:.0f}"}
FIGURES |= {"requests_per_s": "{:.1f}", "rss_growth_mb": "{:.1f}", "memory_bound_mb": "{:.0f}"}
MEMORY_BOUND_MB, IMAGE_SIZE = 64.0, 32  # RSS growth allowed; the model's input side


def parse_args(argv=None):
    parser = report.parser(__doc__, "serving_load.json", "also write the summary here")
    parser.add_argument("--requests", type=int, default=2000, help="(2000)")
    parser.add_argument("--threads", type=int, default=8, help="(8)")
    parser.add_argument("--pool", type=int, default=100, help="distinct request payloads (100)")
    parser.add_argument("--bad-fraction", type=float, default=0.05, help="(0.05)")
    args = parser.parse_args(argv)
    report.at_least(parser, args, "requests", "threads", "pool")
    if not 0 <= args.bad_fraction < 1:
        parser.error(f"--bad-fraction {args.bad_fraction}: must be in [0, 1)")
    return args


def encoded(pixels, kind) -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=kind, **({"quality": 90} if kind == "JPEG" else {}))
    return buffer.getvalue()


def make_payloads(path, count, bad_fraction):
    """`count` batches of encoded images; `round(count * bad_fraction)` of them, spread
    evenly, hold one bad image each: a truncated JPEG, text, or an empty string in turn."""
    import numpy as np

    rng = np.random.default_rng(1)
    arrays, bad = {}, []
    bad_indices = [int(i) for i in np.linspace(0, count - 1, round(count * bad_fraction))]
    for i in range(count):
        images = []
        for _ in range(int(rng.integers(1, 17))):
            pixels = rng.integers(0, 256, (*rng.integers(16, 65, 2), 3), dtype=np.uint8)
            images.append(encoded(pixels, "JPEG" if rng.random() < 0.5 else "PNG"))
        if i in bad_indices:
            kind = bad_indices.index(i) % 3
            jpeg = next((b for b in images if b[:2] == b"\xff\xd8"), None)
            if kind == 0 and jpeg is None:
                jpeg = encoded(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8), "JPEG")
            broken = (jpeg[: len(jpeg) // 2], b"not an image", b"")[kind]
            images[int(rng.integers(len(images)))] = broken
        bad.append(i in bad_indices)
        arrays[f"n{i}"] = np.array(len(images))
        arrays.update({f"p{i}_{j}": np.frombuffer(data, np.uint8) for j, data in enumerate(images)})
    np.savez(path, count=np.array(count), bad=np.array(bad), **arrays)


def main(argv=None) -> int:
    args = parse_args(argv)
    import numpy as np

    import keras_vit

    model = keras_vit.ViT(image_size=IMAGE_SIZE, patch_size=8, hidden_dim=32, num_heads=4,
                          mlp_dim=64, num_layers=2, num_classes=10)  # fmt: skip
    rng = np.random.default_rng(0)  # random weights: distinct logits
    model.set_weights([w + 0.05 * rng.standard_normal(w.shape) for w in model.get_weights()])
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="serving_load_") as folder:
        payloads = os.path.join(folder, "payloads.npz")
        make_payloads(payloads, args.pool, args.bad_fraction)
        export = keras_vit.export_saved_model(model, os.path.join(folder, "export"), version=1)
        config = {"export": export, "payloads": payloads}
        env = {**os.environ, "PYTHONPATH": ""}
        argv = [sys.executable, "-c", SERVER, json.dumps({**config, **vars(args)})]
        result = report.child_json(argv, env=env, cwd=folder, timeout=3600)
    named = [any(word in text for word in BAD_MESSAGE_WORDS) for text in result["bad_messages"]]
    result["checks"] = {
        "good_answers_equal_serial": result["max_abs_logit_diff"] <= 1e-5 and not result["wrong"],
        "bad_rejected_naming_problem": all(named),
        "memory_within_bound": result["rss_growth_mb"] <= MEMORY_BOUND_MB,
    }
    result["memory_bound_mb"] = MEMORY_BOUND_MB
    print(json.dumps(result, indent=2))
    report.save_json(args.json, result)
    values = {f"latency_{name}_ms": report.fig(value, "{:.1f}")
              for name, value in result["latency_ms"].items()}  # fmt: skip
    values.update({key: report.fig(result[key], form) for key, form in FIGURES.items()})
    notes = f"1-minute load average {load_before:.2f} at the start (a shared 2-core machine)"
    about = "benchmarks/studies/serving_load.py: a TensorFlow-only process serving the export"
    report.write_figures(args.results, values, __file__, about, notes=notes)
    return 0 if all(result["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
