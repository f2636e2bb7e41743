"""The GPU race: keras_vit on Keras JAX and Keras PyTorch beside timm, with no TensorFlow.

keras_vit (mixed_bfloat16; JAX with XLA, PyTorch eager) and timm's ViT (bfloat16 autocast, eager
and `torch.compile`), each point in its own process: img/s (data on the device), peak device
memory, MFU against the data-sheet bfloat16 peak and this run's best bfloat16 GEMM. One JSON.

    python benchmarks/bench.py gpu --json gpu.json   # on the GPU machine; --smoke: tiny, CPU
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = "8,32,64,4,2"  # patch, hidden, mlp, heads, layers

# Dense (no sparsity) bfloat16 tensor-core peaks from the vendors' data sheets, TFLOP/s.
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100 PCIe": 756.0, "H100": 989.0, "A100": 312.0,
                    "L40S": 362.0, "L4": 121.0, "A10G": 70.0}  # fmt: skip

# name: (variant, mode, image size, batch); the GPU suite (issue 45's table), then its smoke.
WORKLOADS = {
    "b16_train_224": ("B/16", "train", 224, 128), "b16_infer_224": ("B/16", "infer", 224, 256),
    "b16_train_384": ("B/16", "train", 384, 64), "l16_train_224": ("L/16", "train", 224, 64),
    "ti16_train_224": ("Ti/16", "train", 224, 256),
}  # fmt: skip
SMOKE_WORKLOADS = {"tiny_train_16": (TINY, "train", 16, 2), "tiny_infer_16": (TINY, "infer", 16, 2)}

# name: (modules that must import, KERAS_BACKEND or None), in run order; keras_vit on Keras
# PyTorch (eager, the slowest) runs after every other point: a short budget drops it first.
PEERS = {
    "keras_vit_jax": (("jax", "keras"), "jax"), "timm_compile": (("torch", "timm"), None),
    "timm_eager": (("torch", "timm"), None), "keras_vit_torch": (("torch", "keras"), "torch"),
}  # fmt: skip


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
        return name, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "host RSS"
    return name, peak / 2**30, "device"


def keras_step(variant, mode, size, batch):
    """keras_vit's ViT under mixed_bfloat16 (XLA on JAX, eager on PyTorch): its step on a batch
    already on the device."""
    import keras
    import numpy as np

    from keras_vit.evaluate import benchmarking

    keras.config.set_dtype_policy("mixed_bfloat16")
    model = benchmarking.build_model("keras_vit", variant, size)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    jit = keras.backend.backend() == "jax"
    model.compile(optimizer=benchmarking.step_optimizer("keras_vit"), loss=loss, jit_compile=jit)
    rng = np.random.default_rng(0)
    images = keras.ops.convert_to_tensor(rng.uniform(-1, 1, (batch, size, size, 3)), "float32")
    labels = keras.ops.convert_to_tensor(rng.integers(0, 1000, (batch,)), "int32")
    train = mode == "train"
    return lambda: model.train_on_batch(images, labels) if train else model.predict_on_batch(images)


def timm_step(variant, mode, size, batch, compiled):
    """timm's ViT of the same architecture under bfloat16 autocast, eager or compiled."""
    import timm.models.vision_transformer as vt
    import torch

    from keras_vit.evaluate import benchmarking

    arch = benchmarking.variant_arch(variant)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = vt.VisionTransformer(
        img_size=size, patch_size=arch["patch_size"], embed_dim=arch["hidden_dim"],
        depth=arch["num_layers"], num_heads=arch["num_heads"],
        mlp_ratio=arch["mlp_dim"] / arch["hidden_dim"], global_pool="token",
    ).to(device)  # fmt: skip
    images = torch.rand((batch, 3, size, size), device=device) * 2 - 1
    labels = torch.randint(0, 1000, (batch,), device=device)
    run = torch.compile(model) if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train(mode == "train")

    def step():
        with torch.autocast(device, dtype=torch.bfloat16):
            if mode == "infer":
                with torch.inference_mode():
                    return run(images).float().sum().item()
            loss = torch.nn.functional.cross_entropy(run(images).float(), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def gemm_tflops(engine: str, sizes, repeats: int) -> dict:
    """{size: TFLOP/s} of an n x n bfloat16 matrix product in `engine`, median of repeats."""
    from keras_vit.evaluate.benchmarking import time_steps

    if engine == "jax":
        import jax
        import jax.numpy as jnp

        product = jax.jit(lambda a: a @ a)
        matrices = {n: jnp.ones((n, n), jnp.bfloat16) for n in sizes}
        call = lambda a: product(a).block_until_ready()  # noqa: E731
    else:
        import torch

        cuda = torch.cuda.is_available()
        matrices = {n: torch.ones((n, n), dtype=torch.bfloat16, device="cuda" if cuda else "cpu")
                    for n in sizes}  # fmt: skip
        call = lambda a: (a @ a, cuda and torch.cuda.synchronize())  # noqa: E731
    figures = {}
    for n, a in matrices.items():
        call(a)
        steps = max(1, min(50, int(5e12 // (2 * n**3))))
        times = [time_steps(lambda a=a: call(a), steps) / steps for _ in range(repeats)]
        figures[str(n)] = 2 * n**3 / statistics.median(times) / 1e12
    return figures


def run_point(spec: dict) -> dict:
    """Runs one point (`spec`: kind "gemm" or "model") in this process; returns its figures."""
    from keras_vit.evaluate.benchmarking import time_steps

    if spec["kind"] == "gemm":
        figures = gemm_tflops(spec["engine"], spec["sizes"], spec["repeats"])
        device = device_and_peak(spec["engine"])[0]
        return {"device": device, "tflops": figures, "best_tflops": max(figures.values())}
    (variant, mode, size, batch), peer = spec["workload"], spec["peer"]
    if peer.startswith("keras_vit"):
        step = keras_step(variant, mode, size, batch)
    else:
        step = timm_step(variant, mode, size, batch, peer == "timm_compile")
    warmup_s, steps = time_steps(step, spec["warmup"]), spec["steps"]
    rates = [batch * steps / time_steps(step, steps) for _ in range(spec["repeats"])]
    device, memory, memory_kind = device_and_peak("jax" if peer == "keras_vit_jax" else "torch")
    return {"device": device, "images_per_s": statistics.median(rates), "images_per_s_all": rates,
            "warmup_s": warmup_s, "peak_memory_gib": memory, "memory_kind": memory_kind,
            "tensorflow_imported": "tensorflow" in sys.modules}  # fmt: skip


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="bench.py gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny workloads (CPU, CI)")
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated (all)")
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
    checks = (("workload", args.workloads, args.table), ("peer", args.peers, PEERS))
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
    """The GEMM probes, then every (workload, peer) point in run order (`PEERS`)."""
    smoke = args.smoke
    sizes, repeats = ([128, 256], 1) if smoke else ([4096, 8192], 3)
    gemm = {"kind": "gemm", "sizes": sizes, "repeats": repeats}
    specs = [{**gemm, "engine": engine, "needs": (engine,)} for engine in ("jax", "torch")]
    counts = dict(warmup=1, steps=1, repeats=1) if smoke else dict(warmup=3, steps=10, repeats=3)
    for late in (False, True):
        for name, peer in ((n, p) for n in args.workloads for p in args.peers):
            if (peer == "keras_vit_torch") == late:
                point = {"kind": "model", "workload_name": name, "workload": args.table[name]}
                specs.append({**point, **counts, "peer": peer, "needs": PEERS[peer][0]})
    return specs


def launch(spec: dict, timeout: float) -> dict:
    """Runs `spec` in a child process; its result, or {"skipped": reason}."""
    backend = PEERS[spec["peer"]][1] if spec["kind"] == "model" else None
    env = dict(os.environ, **({"KERAS_BACKEND": backend} if backend else {}))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (ROOT, env.get("PYTHONPATH"))))
    argv = [sys.executable, os.path.abspath(__file__), "--point", json.dumps(spec)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"skipped": f"killed after {timeout:.0f} s (point timeout or budget)"}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return {"skipped": f"failed (exit {done.returncode}): {tail[:300]}"}


def run_all(args) -> list[dict]:
    """Every point in its own process until the budget is spent, each said in one line."""
    deadline, records = time.monotonic() + args.budget_s, []
    for spec in point_specs(args):
        left = deadline - time.monotonic()
        missing = [module for module in spec["needs"] if importlib.util.find_spec(module) is None]
        reason = f"{missing[0]} is not installed here" if missing else None
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
    from common import markdown, write_json

    from keras_vit.evaluate.benchmarking import model_gflops

    start, records = time.monotonic(), run_all(args)
    ran = [r for r in records if "skipped" not in r]  # each gets model TFLOP/s and both MFUs
    devices = [r["device"] for r in ran]
    device = next((d for d in devices if d != "CPU"), devices[0] if devices else "unknown")
    gemm = max((r["best_tflops"] for r in ran if r["kind"] == "gemm"), default=None)
    sheet = peak_tflops(device, args.peak_tflops)
    for r in (r for r in ran if r["kind"] == "model"):
        variant, mode, size, _ = r["workload"]
        r["model_tflops_per_s"] = model_gflops(variant, size, mode) * r["images_per_s"] / 1e3
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
    print(markdown(header, rows))
    print(json.dumps(summary))
    payload = {**summary, "smoke": args.smoke, "budget_s": args.budget_s,
               "wall_s": time.monotonic() - start, "points": records}  # fmt: skip
    if args.json_path:
        write_json(args.json_path, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
