"""Model FLOP utilisation of a keras_vit training step on a GPU, against its bfloat16 peak.

Times `train_on_batch` (forward, backward, AdamW) of a variant under mixed_bfloat16 with
XLA (the setting `keras_vit.distribute.choose_precision` picks on GPUs with bfloat16 tensor
cores), then reports images/s, the analytic model FLOP rate (paper table 1 counts: 2 x MACs
per image, training 3x the forward) and its share of the GPU's dense bfloat16 peak: the
vendor's figure for the detected device (`PEAK_BF16_TFLOPS`), or `--peak-tflops`.

    python benchmarks/gpu_mfu.py --variant B/16 --batch-size 128 --json gpu_mfu.json

On a machine without a GPU it runs on the CPU (a smoke test; pass a tiny `--variant` such as
8,32,64,4,2) and reports the utilisation only when `--peak-tflops` is given.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

# Dense (no sparsity) bfloat16 tensor-core peaks from the vendors' data sheets, TFLOP/s.
PEAK_BF16_TFLOPS = {
    "H200": 989.0,
    "H100 SXM": 989.0,
    "H100 PCIe": 756.0,
    "H100": 989.0,
    "A100": 312.0,
    "L40S": 362.0,
    "L4": 121.0,
    "A10G": 70.0,
    "A10": 125.0,
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_model_arguments(parser, modes=("train", "infer"), default_mode="train")
    parser.set_defaults(variant="B/16", batch_size=128)
    parser.add_argument(
        "--mixed-precision",
        default="mixed_bfloat16",
        choices=("float32", "mixed_float16", "mixed_bfloat16"),
        help="dtype policy (mixed_bfloat16)",
    )
    parser.add_argument(
        "--no-jit-compile", dest="jit_compile", action="store_false", help="run without XLA"
    )
    parser.add_argument("--steps", type=int, default=20, help="timed steps per repeat (20)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats, median (3)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps (3)")
    parser.add_argument("--peak-tflops", type=float, help="override the device's peak")
    parser.add_argument("--json", dest="json_path", help="write the results here")
    args = parser.parse_args(argv)
    counts = {"--steps": args.steps, "--repeats": args.repeats, "--warmup": args.warmup}
    common.check_model_arguments(parser, args, counts)
    if args.peak_tflops is not None and not args.peak_tflops > 0:
        parser.error("--peak-tflops must be > 0")
    return args


def device_name() -> str:
    """The first GPU's name (TensorFlow's device details), or "CPU"."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "CPU"
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")


def peak_tflops(name: str, override: float | None) -> float | None:
    """`override`, else the table entry whose key appears in the device name (longest first)."""
    if override is not None:
        return override
    for key in sorted(PEAK_BF16_TFLOPS, key=len, reverse=True):
        if key.lower() in name.lower():
            return PEAK_BF16_TFLOPS[key]
    return None


def main(argv=None):
    args = parse_args(argv)
    import keras

    keras.config.set_dtype_policy(args.mixed_precision)
    name = device_name()
    model = common.build_model("keras_vit", args.variant, args.image_size)
    step = common.make_step(
        model, args.mode, args.batch_size, args.image_size, xla=args.jit_compile
    )
    start = time.perf_counter()
    for _ in range(args.warmup):
        step()
    warmup_s = time.perf_counter() - start
    rates = [
        args.steps * args.batch_size / common.time_call(step, args.steps)
        for _ in range(args.repeats)
    ]
    images_per_s = common.median(rates)
    tflops = common.model_gflops(args.variant, args.image_size, args.mode) * images_per_s / 1e3
    peak = peak_tflops(name, args.peak_tflops)
    mfu = tflops / peak if peak else None
    print(
        f"{name}: ViT-{args.variant} @{args.image_size}, batch {args.batch_size}, {args.mode}, "
        f"{args.mixed_precision}, XLA {'on' if args.jit_compile else 'off'}: "
        f"{images_per_s:.1f} img/s (repeats {', '.join(f'{r:.1f}' for r in rates)}), "
        f"{tflops:.2f} model TFLOP/s, "
        + (f"MFU {100 * mfu:.1f}% of {peak:.0f} TFLOP/s" if mfu else "MFU: peak unknown")
    )
    if args.json_path:
        config = vars(args)
        common.write_json(
            args.json_path,
            {
                "config": config,
                "device": name,
                "images_per_s": images_per_s,
                "images_per_s_all": rates,
                "warmup_s": warmup_s,
                "model_tflops_per_s": tflops,
                "peak_tflops": peak,
                "mfu": mfu,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
