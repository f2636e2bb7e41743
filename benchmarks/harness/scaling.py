"""How the time and memory of a keras_vit training step grow with tokens and with batch size.

Each (image size, batch size) point runs in its own worker process (the workers of
`throughput.py`), so its peak RSS is its own; all points are built and warmed up first, then
timed in rotating order (repeats interleaved, median reported). A step is forward + backward
+ AdamW update (the update is a small, fixed share: one pass over the weights). With patch
16, 224 -> 384 -> 512 pixels is 197 -> 577 -> 1025 tokens: the projections and MLP grow
linearly with tokens, q k^T and the weighted sum quadratically.

    python benchmarks/bench.py scaling --variant Ti/16 --image-sizes 224,384 --batch-sizes 1,16
"""

from __future__ import annotations

import argparse
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.join(_HERE, ".."), os.path.join(_HERE, "..", "harness")]

import common  # noqa: E402
import throughput  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", default="Ti/16", help="named variant (Ti/16)")
    parser.add_argument("--image-sizes", default="224,384,512", help="sizes at the base batch")
    parser.add_argument("--batch-sizes", default="1,4,16", help="batches at the base size")
    parser.add_argument("--base-image-size", type=int, default=224, help="(224)")
    parser.add_argument("--base-batch-size", type=int, default=4, help="(4)")
    parser.add_argument("--mode", choices=("train", "infer"), default="train")
    parser.add_argument("--dtype-policy", default="float32")
    parser.add_argument("--no-xla", action="store_true")
    parser.add_argument("--steps", type=int, default=1, help="steps per timed repeat (1)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats (3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps (1)")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    try:
        args.image_sizes = [int(s) for s in args.image_sizes.split(",") if s]
        args.batch_sizes = [int(s) for s in args.batch_sizes.split(",") if s]
    except ValueError:
        parser.error("--image-sizes and --batch-sizes take integers separated by commas")
    patch = common.checked_patch(parser, args.variant)
    named = common.named_image_size(args.variant)
    if named is not None:
        parser.error(
            f"--variant {args.variant!r} names image size {named}: give the plain variant; "
            "--image-sizes and --base-image-size set the sizes"
        )
    sizes = [*args.image_sizes, args.base_image_size]
    if any(s < patch or s % patch for s in sizes):
        parser.error(f"every image size must be a positive multiple of the patch ({patch})")
    if min([*args.batch_sizes, args.base_batch_size, args.steps, args.repeats, args.warmup]) < 1:
        parser.error("batch sizes, --steps, --repeats and --warmup must be >= 1")
    return args


def points(args):
    """The (image size, batch size) points: sizes at the base batch, batches at the base size."""
    chosen = [(size, args.base_batch_size) for size in args.image_sizes]
    chosen += [(args.base_image_size, batch) for batch in args.batch_sizes]
    return list(dict.fromkeys(chosen))


def worker_args(args, size, batch):
    """An argparse namespace for `throughput.worker_argv` at one point."""
    return argparse.Namespace(
        python=args.python,
        variant=args.variant,
        image_size=size,
        batch_size=batch,
        dtype_policy=args.dtype_policy,
        steps=args.steps,
        warmup=args.warmup,
        gemm_sizes="none",
        threads=args.threads,
        no_xla=args.no_xla,
    )


def measure(args):
    """Starts one worker per point, times them interleaved; returns one record per point."""
    names = {f"{size}px/b{batch}": (size, batch) for size, batch in points(args)}
    workers, ready = {}, {}
    for name, (size, batch) in names.items():
        argv = throughput.worker_argv(
            worker_args(args, size, batch),
            f"keras_vit:{args.mode}:{args.dtype_policy}:{'noxla' if args.no_xla else 'xla'}",
        )
        workers[name] = common.Worker(argv)
    try:
        for name, worker in workers.items():
            ready[name] = worker.read("READY")
        payloads = common.run_rounds(workers, args.repeats)
        peaks = {name: worker.request("rss")["peak_rss_mb"] for name, worker in workers.items()}
    finally:
        throughput.finish_workers(workers)
    patch = common.variant_arch(args.variant)["patch_size"]
    records = []
    for name, (size, batch) in names.items():
        rate = common.median([p["images_per_s"] for p in payloads[name]])
        gflops = common.model_gflops(args.variant, size, args.mode)
        records.append(
            {
                "image_size": size,
                "batch_size": batch,
                "tokens": (size // patch) ** 2 + 1,
                "images_per_s": rate,
                "images_per_s_all": [p["images_per_s"] for p in payloads[name]],
                "step_s": batch / rate,
                "gflops_per_image": gflops,
                "model_gflops_per_s": gflops * rate,
                "peak_rss_mb": peaks[name],
                "params": ready[name]["params"],
            }
        )
    return records


def format_records(records):
    """A Markdown table of the points."""
    header = ["image", "batch", "tokens", "step s", "ms/image", "GFLOP/image", "GFLOP/s", "RSS MiB"]
    rows = [
        [
            r["image_size"],
            r["batch_size"],
            r["tokens"],
            f"{r['step_s']:.3f}",
            f"{1000 / r['images_per_s']:.1f}",
            f"{r['gflops_per_image']:.2f}",
            f"{r['model_gflops_per_s']:.1f}",
            f"{r['peak_rss_mb']:.0f}",
        ]
        for r in records
    ]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join(
        [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
        + [line(r) for r in rows]
    )


def main(argv=None):
    args = parse_args(argv)
    records = measure(args)
    print(
        f"ViT-{args.variant} {args.mode} step, {args.dtype_policy}, "
        f"XLA {'off' if args.no_xla else 'on'}, median of {args.repeats}"
    )
    print(format_records(records))
    if args.json_path:
        config = {k: v for k, v in vars(args).items()}
        common.write_json(args.json_path, {"config": config, "results": records})
        print(f"wrote {args.json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
