"""The GPU race: keras_vit on Keras JAX and Keras PyTorch beside timm, with no TensorFlow.

A point is a row of the one peer table (`peers.PEERS`) at one setting (`POINTS`), built as the
CPU races build it, in its own process: img/s (data on the device), peak device memory, MFU
against the data-sheet bfloat16 peak and this run's best bfloat16 GEMM. One JSON.

    python -m benchmarks.bench gpu --json gpu.json   # on the GPU machine; --smoke: tiny, CPU
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from importlib.util import find_spec

from benchmarks.harness import common, peers

TINY = "8,32,64,4,2"  # patch, hidden, mlp, heads, layers

# Dense (no sparsity) bfloat16 tensor-core peaks from the vendors' data sheets, TFLOP/s.
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100 PCIe": 756.0, "H100": 989.0, "A100": 312.0,
                    "L40S": 362.0, "L4": 121.0, "A10G": 70.0}  # fmt: skip

# name: (variant, mode, image size, batch); the GPU suite, then its smoke.
WORKLOADS = {
    "b16_train_224": ("B/16", "train", 224, 128), "b16_infer_224": ("B/16", "infer", 224, 256),
    "b16_train_384": ("B/16", "train", 384, 64), "l16_train_224": ("L/16", "train", 224, 64),
    "ti16_train_224": ("Ti/16", "train", 224, 256),
}  # fmt: skip
SMOKE_WORKLOADS = {"tiny_train_16": (TINY, "train", 16, 2), "tiny_infer_16": (TINY, "infer", 16, 2)}

# name: (row of peers.PEERS, dtype policy, compiler), in run order; keras_vit on Keras PyTorch
# (eager, the slowest) runs after every other point: a short budget drops it first.
POINTS = {
    "keras_vit_jax": ("keras_vit_jax", "mixed_bfloat16", "xla"),
    "timm_compile": ("timm", "mixed_bfloat16", "compile"),
    "timm_eager": ("timm", "mixed_bfloat16", "eager"),
    "keras_vit_torch": ("keras_vit_torch", "mixed_bfloat16", "noxla"),
}


def peak_tflops(device: str, override: float | None = None) -> float | None:
    """`override`, else the data-sheet entry whose key appears in `device` (longest first)."""
    keys = [key for key in PEAK_BF16_TFLOPS if key.lower() in device.lower()]
    if override is not None or not keys:
        return override
    return PEAK_BF16_TFLOPS[max(keys, key=len)]


def device_and_peak(engine: str):
    """(device name, peak memory in GiB, "device"; on a CPU this process' peak, "host RSS")."""
    if engine == "jax":
        import jax

        device = jax.local_devices()[0]
        name = device.device_kind if device.platform != "cpu" else "CPU"
        peak = (device.memory_stats() or {}).get("peak_bytes_in_use")
    else:
        import torch

        cuda = torch.cuda.is_available()
        name = torch.cuda.get_device_name(0) if cuda else "CPU"
        peak = torch.cuda.max_memory_allocated() if cuda else None
    if peak is None:
        return name, common.peak_rss_mb() / 1024, "host RSS"
    return name, peak / 2**30, "device"


def gemm_tflops(engine: str, sizes, repeats: int) -> dict:
    """{size: TFLOP/s} of an n x n bfloat16 matrix product in `engine`, median of repeats."""
    if engine == "torch":
        return {str(n): peers.gemm_gflops(n, "bfloat16", repeats) / 1e3 for n in sizes}
    import jax

    product, figures = jax.jit(lambda a: a @ a), {}
    for n in sizes:
        a = jax.random.normal(jax.random.key(0), (n, n), "bfloat16")
        product(a).block_until_ready()
        steps = max(1, min(50, int(5e12 // (2 * n**3))))
        times = [common.time_call(lambda a=a: product(a).block_until_ready(), steps) / steps
                 for _ in range(repeats)]  # fmt: skip
        figures[str(n)] = 2 * n**3 / statistics.median(times) / 1e12
    return figures


def run_point(spec: dict) -> dict:
    """Runs one point (`spec`: kind "gemm" or "model") in this process; returns its figures."""
    if spec["kind"] == "gemm":
        figures = gemm_tflops(spec["engine"], spec["sizes"], spec["repeats"])
        device = device_and_peak(spec["engine"])[0]
        return {"device": device, "tflops": figures, "best_tflops": max(figures.values())}
    (variant, mode, size, batch), (row, policy, compiler) = spec["workload"], POINTS[spec["peer"]]
    shape = argparse.Namespace(variant=variant, image_size=size, batch_size=batch)
    _, step = peers.PEERS[row].build(shape, row, mode, policy, compiler)
    warmup_s, steps = common.time_call(step, spec["warmup"]), spec["steps"]
    rates = [batch * steps / common.time_call(step, steps) for _ in range(spec["repeats"])]
    device, memory, memory_kind = device_and_peak("jax" if row == "keras_vit_jax" else "torch")
    return {"device": device, "images_per_s": statistics.median(rates), "images_per_s_all": rates,
            "warmup_s": warmup_s, "peak_memory_gib": memory, "memory_kind": memory_kind,
            "tensorflow_imported": "tensorflow" in sys.modules}  # fmt: skip


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="bench.py gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny workloads (CPU, CI)")
    parser.add_argument("--peers", default=",".join(POINTS), help="comma-separated (all)")
    parser.add_argument("--workloads", help=f"comma-separated names of {sorted(WORKLOADS)}")
    parser.add_argument("--budget-s", type=float, default=420.0, help="points' budget (420)")
    parser.add_argument("--point-timeout-s", type=float, default=150.0, help="(150)")
    parser.add_argument("--peak-tflops", type=float, help="override the data-sheet peak")
    parser.add_argument("--json", dest="json_path", help="write the results here")
    parser.add_argument("--point", help=argparse.SUPPRESS)  # the child: a point's JSON spec
    args = parser.parse_args(argv)
    args.table = SMOKE_WORKLOADS if args.smoke else WORKLOADS
    args.workloads = args.workloads.split(",") if args.workloads else list(args.table)
    args.peers = args.peers.split(",")
    checks = (("workload", args.workloads, args.table), ("peer", args.peers, POINTS))
    for kind, names, known in checks:
        unknown = [name for name in names if name not in known]
        if unknown:
            parser.error(f"unknown {kind} {unknown[0]!r}; expected one of {sorted(known)}")
    if args.budget_s <= 0 or args.point_timeout_s <= 0:
        parser.error("--budget-s and --point-timeout-s must be > 0")
    if args.peak_tflops is not None and not args.peak_tflops > 0:
        parser.error(f"--peak-tflops {args.peak_tflops}: must be > 0")
    return args


def point_specs(args) -> list[dict]:
    """The GEMM probes, then every (workload, peer) point, keras_vit on Keras PyTorch last."""
    smoke = args.smoke
    sizes, warmup, steps, repeats = ([128, 256], 1, 1, 1) if smoke else ([4096, 8192], 3, 10, 3)
    gemm = {"kind": "gemm", "sizes": sizes, "repeats": repeats}
    counts = {"warmup": warmup, "steps": steps, "repeats": repeats}
    points = [{"kind": "model", "workload_name": name, "workload": args.table[name], "peer": peer,
               **counts} for name in args.workloads for peer in args.peers]  # fmt: skip
    return [{**gemm, "engine": engine} for engine in ("jax", "torch")] + sorted(
        points, key=lambda point: point["peer"] == "keras_vit_torch")  # fmt: skip


def launch(spec: dict, timeout: float) -> dict:
    """Runs `spec` in a child process; its result, or {"skipped": reason}."""
    row = peers.PEERS[POINTS[spec["peer"]][0]] if spec["kind"] == "model" else None
    env = common.child_env(dict(os.environ, **(row.env if row else {})))
    argv = [*common.module_argv(sys.executable, "benchmarks.harness.gpu"), "--point"]
    argv.append(json.dumps(spec))
    try:
        return common.child_result(argv, env=env, timeout=timeout)
    except RuntimeError as error:
        return {"skipped": f"failed ({error})"}


def run_all(args) -> list[dict]:
    """Every point in its own process until the budget is spent, each said in one line."""
    deadline, records = time.monotonic() + args.budget_s, []
    for spec in point_specs(args):
        left = deadline - time.monotonic()
        needs = peers.PEERS[POINTS[spec["peer"]][0]].modules if "peer" in spec else [spec["engine"]]
        reason = next((f"{m} is not installed here" for m in needs if not find_spec(m)), None)
        reason = reason or (f"budget of {args.budget_s:.0f} s spent" if left < 5 else None)
        result = {"skipped": reason} if reason else launch(spec, min(left, args.point_timeout_s))
        records.append(record := {**spec, **result})
        if "skipped" in record:
            said = "skipped: " + record["skipped"]
        elif record["kind"] == "gemm":
            said = f"{record['best_tflops']:.2f} TFLOP/s bfloat16 GEMM on {record['device']}"
        else:
            said = f"{record['images_per_s']:.1f} img/s on {record['device']}"
        label = spec.get("peer", "gemm " + spec.get("engine", ""))
        print(f"{spec.get('workload_name', 'gemm')} {label}: {said}", flush=True)
    return records


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.point:
        print("RESULT " + json.dumps(run_point(json.loads(args.point))), flush=True)
        return 0
    start, records = time.monotonic(), run_all(args)
    ran = [r for r in records if "skipped" not in r]  # each gets model TFLOP/s and both MFUs
    devices = [r["device"] for r in ran]
    device = next((d for d in devices if d != "CPU"), devices[0] if devices else "unknown")
    gemm = max((r["best_tflops"] for r in ran if r["kind"] == "gemm"), default=None)
    sheet = peak_tflops(device, args.peak_tflops)
    for r in (r for r in ran if r["kind"] == "model"):
        variant, mode, size, _ = r["workload"]
        r["model_tflops_per_s"] = common.model_gflops(variant, size, mode) * r["images_per_s"] / 1e3
        r["mfu_datasheet"] = r["model_tflops_per_s"] / sheet if sheet else None
        r["mfu_gemm"] = r["model_tflops_per_s"] / gemm if gemm else None
    ratios = {}  # per workload, keras_vit's best over timm's best
    for name in args.workloads:
        points = [r for r in ran if r.get("workload_name") == name]
        best = [max((r["images_per_s"] for r in points if r["peer"].startswith(side)), default=None)
                for side in ("keras_vit", "timm")]  # fmt: skip
        ratios[name] = best[0] / best[1] if all(best) else None
    summary = {"device": device, "datasheet_peak_tflops": sheet, "measured_gemm_tflops": gemm,
               "keras_vit_best_over_timm_best": ratios}  # fmt: skip
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    rows = [[r["workload_name"], r["peer"], *(["skipped: " + r["skipped"]] if "skipped" in r else [
        f"{r['images_per_s']:.1f}", f"{r['peak_memory_gib']:.2f} ({r['memory_kind']})",
        f"{r['model_tflops_per_s']:.3f}", pct(r["mfu_datasheet"]), pct(r["mfu_gemm"])])]
        for r in records if r["kind"] == "model"]  # fmt: skip
    header = "workload|peer|img/s|peak GiB|model TFLOP/s|MFU sheet|MFU GEMM".split("|")
    print(common.markdown(header, rows))
    print(json.dumps(summary))
    payload = {**summary, "smoke": args.smoke, "budget_s": args.budget_s,
               "wall_s": time.monotonic() - start, "points": records}  # fmt: skip
    if args.json_path:
        common.write_json(args.json_path, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
