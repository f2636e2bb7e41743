"""Serving under load: a TensorFlow-only process answers concurrent `serving_bytes` requests.

1. Exports a ViT (tiny by default, random non-zero weights) with
   `keras_vit.export_saved_model`, in this process.
2. Starts a second process with `PYTHONPATH` cleared that imports TensorFlow only (no
   keras_vit, no Keras model code), loads the SavedModel and serves `--requests` requests
   from `--threads` threads. Each request is a batch of 1-16 encoded images (JPEG or PNG,
   sides 16-64 px) drawn from a pool of prepared payloads; `--bad-fraction` of the payloads
   hold one bad image (truncated JPEG, text, an empty string) and must be rejected, and
   exactly `round(requests * bad_fraction)` of the requests use them (100 of 2,000).
3. Checks: every good request's logits equal the answer computed serially for the same
   payload before the load (max abs difference); every bad request fails with
   `InvalidArgumentError` whose message names the problem; resident memory (RSS) after the
   load is within `--memory-bound-mb` of the RSS after a warm-up of one request per
   payload. Prints a JSON summary: latency percentiles (ms), requests/s, RSS figures, checks.

Usage:
    python benchmarks/studies/serving_load.py                     # 2,000 requests, 8 threads
    python benchmarks/studies/serving_load.py --requests 40 --threads 2 --pool 8   # smoke test
    python benchmarks/studies/serving_load.py --results benchmarks/results/serving_load.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

SERVER = r"""
import io, json, os, random, sys, threading, time
import numpy as np
import tensorflow as tf

args = json.loads(sys.argv[1])
assert "keras_vit" not in sys.modules
model = tf.saved_model.load(args["export"])
serve = model.signatures["serving_bytes"]
with np.load(args["payloads"], allow_pickle=False) as stored:
    pool = [
        [stored[f"p{i}_{j}"].tobytes() for j in range(int(stored[f"n{i}"]))]
        for i in range(int(stored["count"]))
    ]
    bad = [bool(b) for b in stored["bad"]]


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def call(index):
    try:
        return serve(image_bytes=tf.constant(pool[index]))["logits"].numpy(), None
    except tf.errors.InvalidArgumentError as error:
        return None, " ".join(str(error.message).split())


reference = [call(i) for i in range(len(pool))]  # serial answers, and the warm-up
rss_warm = rss_mb()
rng = random.Random(0)
bad_ids = [i for i in range(len(pool)) if bad[i]]
good_ids = [i for i in range(len(pool)) if not bad[i]]
num_bad = round(args["requests"] * args["bad_fraction"]) if bad_ids else 0
order = [rng.choice(bad_ids) for _ in range(num_bad)]
order += [rng.choice(good_ids) for _ in range(args["requests"] - num_bad)]
rng.shuffle(order)  # exactly round(requests * bad_fraction) bad requests, spread at random
latencies, mismatches, bad_messages, wrong = [], [], [], []
lock = threading.Lock()
cursor = iter(range(len(order)))


def worker():
    while True:
        with lock:
            position = next(cursor, None)
        if position is None:
            return
        index = order[position]
        start = time.perf_counter()
        logits, error = call(index)
        elapsed = time.perf_counter() - start
        with lock:
            latencies.append(elapsed)
            if bad[index]:
                if error is None:
                    wrong.append(f"bad payload {index} answered")
                else:
                    bad_messages.append(error)
            elif error is not None:
                wrong.append(f"good payload {index} failed: {error[:200]}")
            else:
                mismatches.append(float(np.max(np.abs(logits - reference[index][0]))))


threads = [threading.Thread(target=worker) for _ in range(args["threads"])]
start = time.perf_counter()
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
wall = time.perf_counter() - start
rss_end = rss_mb()
ms = np.array(latencies) * 1000
print("RESULT " + json.dumps({
    "requests": len(latencies),
    "threads": args["threads"],
    "bad_requests": sum(bad[i] for i in order),
    "requests_per_s": round(len(latencies) / wall, 1),
    "latency_ms": {p: round(float(np.percentile(ms, q)), 2)
                   for p, q in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100))},
    "max_abs_logit_diff": max(mismatches, default=0.0),
    "wrong": wrong[:10],
    "bad_messages": sorted(set(
        m.split("unavailable> ")[-1].split(" [[")[0][:160] for m in bad_messages
    )),
    "rss_warm_mb": round(rss_warm, 1),
    "rss_end_mb": round(rss_end, 1),
    "rss_growth_mb": round(rss_end - rss_warm, 1),
}))
"""

# What the rejection of each kind of bad payload must say (TensorFlow's decoder messages).
BAD_MESSAGE_WORDS = ("Invalid JPEG data", "Unknown image file format", "Input is empty", "Empty")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--pool", type=int, default=100, help="distinct request payloads")
    parser.add_argument("--bad-fraction", type=float, default=0.05)
    parser.add_argument("--memory-bound-mb", type=float, default=64.0)
    parser.add_argument("--image-size", type=int, default=32, help="model input side")
    parser.add_argument("--json", help="also write the summary to this file")
    parser.add_argument(
        "--results", help="write the documents' figures to this results file (figures.py)"
    )
    args = parser.parse_args(argv)
    if args.requests <= 0 or args.threads <= 0 or args.pool <= 0:
        parser.error("--requests, --threads and --pool must be positive")
    if not 0 <= args.bad_fraction < 1:
        parser.error("--bad-fraction must be in [0, 1)")
    return args


def export_model(folder, image_size):
    import numpy as np

    import keras_vit

    model = keras_vit.ViT(
        image_size=image_size,
        patch_size=8,
        hidden_dim=32,
        num_heads=4,
        mlp_dim=64,
        num_layers=2,
        num_classes=10,
    )
    rng = np.random.default_rng(0)
    model.set_weights([w + 0.05 * rng.standard_normal(w.shape) for w in model.get_weights()])
    return keras_vit.export_saved_model(model, os.path.join(folder, "export"), version=1)


def _encode(image_module, io, pixels, kind="JPEG"):
    buffer = io.BytesIO()
    image_module.fromarray(pixels).save(buffer, format=kind, quality=90)
    return buffer.getvalue()


def make_payloads(path, count, bad_fraction):
    """`count` batches of encoded images; `round(count * bad_fraction)` of them, spread
    evenly, hold one bad image each: a truncated JPEG, text, or an empty string in turn."""
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(1)
    arrays, bad = {}, []
    num_bad = round(count * bad_fraction)
    bad_indices = [int(i) for i in np.linspace(0, count - 1, num_bad)] if num_bad else []
    for i in range(count):
        images = []
        for _ in range(int(rng.integers(1, 17))):
            height, width = (int(v) for v in rng.integers(16, 65, 2))
            pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            buffer = io.BytesIO()
            kind = "JPEG" if rng.random() < 0.5 else "PNG"
            options = {"quality": 90} if kind == "JPEG" else {}
            Image.fromarray(pixels).save(buffer, format=kind, **options)
            images.append(buffer.getvalue())
        is_bad = i in bad_indices
        if is_bad:
            kind = bad_indices.index(i) % 3
            jpeg = next((b for b in images if b[:2] == b"\xff\xd8"), None)
            if kind == 0 and jpeg is None:
                jpeg = _encode(Image, io, rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))
            broken = (jpeg[: len(jpeg) // 2], b"not an image", b"")[kind]
            images[int(rng.integers(len(images)))] = broken
        bad.append(bool(is_bad))
        arrays[f"n{i}"] = np.array(len(images))
        for j, data in enumerate(images):
            arrays[f"p{i}_{j}"] = np.frombuffer(data, np.uint8)
    np.savez(path, count=np.array(count), bad=np.array(bad), **arrays)


def main(argv=None) -> int:
    args = parse_args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="serving_load_") as folder:
        export = export_model(folder, args.image_size)
        payloads = os.path.join(folder, "payloads.npz")
        make_payloads(payloads, args.pool, args.bad_fraction)
        config = {"export": export, "payloads": payloads, **vars(args)}
        env = {**os.environ, "PYTHONPATH": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
        done = subprocess.run(
            [sys.executable, "-c", SERVER, json.dumps(config)],
            capture_output=True,
            text=True,
            env=env,
            cwd=folder,
            timeout=3600,
        )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        print(done.stdout[-3000:] + done.stderr[-3000:], file=sys.stderr)
        return 1
    result = json.loads(lines[-1][len("RESULT ") :])
    result["checks"] = {
        "good_answers_equal_serial": result["max_abs_logit_diff"] <= 1e-5 and not result["wrong"],
        "bad_rejected_naming_problem": all(
            any(word in message for word in BAD_MESSAGE_WORDS) for message in result["bad_messages"]
        ),
        "memory_within_bound": result["rss_growth_mb"] <= args.memory_bound_mb,
    }
    result["memory_bound_mb"] = args.memory_bound_mb
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    if args.results:
        write_figures(args, result, load_before)
    return 0 if all(result["checks"].values()) else 1


def write_figures(args, result, load_before) -> None:
    """The summary's figures as a results file for docs/reliability.md (figures.py)."""
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [_HERE, os.path.join(_HERE, ".."), os.path.join(_HERE, "..", "harness")]
    from figures import write_results

    values = {
        f"latency_{name}_ms": {"value": value, "format": "{:.1f}"}
        for name, value in result["latency_ms"].items()
    }
    values.update(
        requests={"value": result["requests"], "format": "{:,}"},
        bad_requests={"value": result["bad_requests"], "format": "{}"},
        threads={"value": result["threads"], "format": "{}"},
        requests_per_s={"value": result["requests_per_s"], "format": "{:.1f}"},
        rss_warm_mb={"value": result["rss_warm_mb"], "format": "{:.0f}"},
        rss_growth_mb={"value": result["rss_growth_mb"], "format": "{:.1f}"},
        memory_bound_mb={"value": result["memory_bound_mb"], "format": "{:.0f}"},
    )
    command = "python benchmarks/studies/serving_load.py " + " ".join(sys.argv[1:])
    write_results(
        args.results,
        values,
        command=command.strip(),
        about="benchmarks/studies/serving_load.py: a TensorFlow-only process serving the export",
        notes=f"1-minute load average {load_before:.2f} at the start (a shared 2-core machine)",
    )


if __name__ == "__main__":
    sys.exit(main())
