"""The GPU race: keras_vit on Keras JAX and Keras PyTorch beside timm, with no TensorFlow.

Runs where the GPUs are (PyTorch, JAX and timm, Keras brought as a wheel, no TensorFlow):
nothing in this module's import chain imports TensorFlow. Every point (peer, workload) and
every GEMM probe runs in its own process. Per point: img/s (median of repeats, data on the
device), peak device memory, and model FLOP utilisation (analytic FLOPs, 2 x MACs, training
3x the forward: `keras_vit.evaluate.benchmarking.model_gflops`, the same count for every peer)
against the data-sheet dense bfloat16 peak (`PEAK_BF16_TFLOPS`) and against the best bfloat16 GEMM
measured in the same run (jax.numpy and torch). One JSON file (`--json`).

Peers: keras_vit under `mixed_bfloat16` on Keras JAX (XLA) and on Keras PyTorch (eager);
timm's `VisionTransformer` of the same architecture under bfloat16 autocast, eager and
`torch.compile`. A peer whose modules do not import is skipped with a one-line reason.

The run is capped by `--budget-s` (default 420 s of points, under 8 minutes in all): no point
starts after the budget is spent, and each is killed after `--point-timeout-s` or the time
left, whichever comes first; what did not run is recorded as skipped, with the reason.

    python benchmarks/bench.py gpu --json gpu.json         # on the GPU machine
    python benchmarks/bench.py gpu --smoke --json s.json   # tiny, on CPU (CI)
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
PEAK_BF16_TFLOPS = {
    "H200": 989.0,
    "H100 PCIe": 756.0,
    "H100": 989.0,
    "A100": 312.0,
    "L40S": 362.0,
    "L4": 121.0,
    "A10G": 70.0,
}

# name: (variant, mode, image size, batch); the GPU suite (issue 45's table), then its smoke.
WORKLOADS = {
    "b16_train_224": ("B/16", "train", 224, 128),
    "b16_infer_224": ("B/16", "infer", 224, 256),
    "b16_train_384": ("B/16", "train", 384, 64),
    "l16_train_224": ("L/16", "train", 224, 64),
    "ti16_train_224": ("Ti/16", "train", 224, 256),
}
SMOKE_WORKLOADS = {"tiny_train_16": (TINY, "train", 16, 2), "tiny_infer_16": (TINY, "infer", 16, 2)}

# name: (modules that must import, KERAS_BACKEND or None, step builder); order = run order.
PEERS = {
    "keras_vit_jax": (("jax", "keras"), "jax", "keras"),
    "timm_compile": (("torch", "timm"), None, "timm"),
    "timm_eager": (("torch", "timm"), None, "timm"),
    "keras_vit_torch": (("torch", "keras"), "torch", "keras"),
}
LAST = ("keras_vit_torch",)  # run after every other point (see `point_specs`)
GEMM_ENGINES = {"jax": ("jax",), "torch": ("torch",)}


def missing_module(modules) -> str | None:
    """The first of `modules` not installed here, as a one-line reason, or None."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed here"
    return None


def peak_tflops(device: str, override: float | None = None) -> float | None:
    """`override`, else the data-sheet entry whose key appears in `device` (longest first)."""
    if override is not None:
        return override
    for key in sorted(PEAK_BF16_TFLOPS, key=len, reverse=True):
        if key.lower() in device.lower():
            return PEAK_BF16_TFLOPS[key]
    return None


# ---- the child side: one point in this process ----------------------------------------


def device_and_memory(engine: str):
    """(device name, a function returning this process' peak memory in GiB and its kind)."""
    if engine == "jax":
        import jax

        device = jax.local_devices()[0]

        def peak():
            stats = device.memory_stats() or {}
            if "peak_bytes_in_use" in stats:
                return stats["peak_bytes_in_use"] / 2**30, "device"
            return host_peak()

        name = device.device_kind if device.platform != "cpu" else "CPU"
        return name, peak
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0), lambda: (
            torch.cuda.max_memory_allocated() / 2**30,
            "device",
        )
    return "CPU", host_peak


def host_peak():
    """Peak resident memory of this process (GiB), for a point run on the CPU."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "host RSS"


def keras_step(variant, mode, size, batch):
    """keras_vit's ViT under mixed_bfloat16, compiled as the backend compiles (XLA on JAX,
    eager on PyTorch), one step on a batch already on the device."""
    import keras
    import numpy as np

    from keras_vit.evaluate import benchmarking

    keras.config.set_dtype_policy("mixed_bfloat16")
    model = benchmarking.build_model("keras_vit", variant, size)
    model.compile(
        optimizer=benchmarking.step_optimizer("keras_vit"),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=keras.backend.backend() == "jax",
    )
    rng = np.random.default_rng(0)
    images = keras.ops.convert_to_tensor(rng.uniform(-1, 1, (batch, size, size, 3)), "float32")
    labels = keras.ops.convert_to_tensor(rng.integers(0, 1000, (batch,)), "int32")
    if mode == "train":
        return lambda: model.train_on_batch(images, labels)
    return lambda: model.predict_on_batch(images)


def timm_step(variant, mode, size, batch, compiled):
    """timm's ViT of the same architecture under bfloat16 autocast, eager or compiled."""
    import timm.models.vision_transformer as vt
    import torch

    from keras_vit.evaluate import benchmarking

    arch = benchmarking.variant_arch(variant)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = vt.VisionTransformer(
        img_size=size,
        patch_size=arch["patch_size"],
        embed_dim=arch["hidden_dim"],
        depth=arch["num_layers"],
        num_heads=arch["num_heads"],
        mlp_ratio=arch["mlp_dim"] / arch["hidden_dim"],
        global_pool="token",
    ).to(device)
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
    if engine == "jax":
        import jax
        import jax.numpy as jnp

        product = jax.jit(lambda a, b: a @ b)

        def make(n):
            a = jnp.ones((n, n), jnp.bfloat16)
            return lambda: product(a, a).block_until_ready()
    else:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

        def make(n):
            a = torch.ones((n, n), dtype=torch.bfloat16, device=device)
            return lambda: (a @ a, sync())

    figures = {}
    for n in sizes:
        call = make(n)
        call()
        steps = max(1, min(50, int(5e12 // (2 * n**3))))
        times = [time_call(call, steps) / steps for _ in range(repeats)]
        figures[str(n)] = 2 * n**3 / statistics.median(times) / 1e12
    return figures


def time_call(call, steps: int) -> float:
    """Seconds for `steps` consecutive calls of `call` (each blocks until done)."""
    start = time.perf_counter()
    for _ in range(steps):
        call()
    return time.perf_counter() - start


def run_point(spec: dict) -> dict:
    """Runs one point (`spec`: kind "gemm" or "model") in this process; returns its figures."""
    if spec["kind"] == "gemm":
        device, _ = device_and_memory(spec["engine"])
        figures = gemm_tflops(spec["engine"], spec["sizes"], spec["repeats"])
        return {"device": device, "tflops": figures, "best_tflops": max(figures.values())}
    variant, mode, size, batch = spec["workload"]
    engine = "jax" if spec["peer"] == "keras_vit_jax" else "torch"
    device, peak = device_and_memory(engine)
    if spec["peer"].startswith("keras_vit"):
        step = keras_step(variant, mode, size, batch)
    else:
        step = timm_step(variant, mode, size, batch, spec["peer"] == "timm_compile")
    warmup_s = time_call(step, spec["warmup"])
    rates = [batch * spec["steps"] / time_call(step, spec["steps"]) for _ in range(spec["repeats"])]
    memory, memory_kind = peak()
    return {
        "device": device,
        "images_per_s": statistics.median(rates),
        "images_per_s_all": rates,
        "warmup_s": warmup_s,
        "peak_memory_gib": memory,
        "memory_kind": memory_kind,
        "tensorflow_imported": "tensorflow" in sys.modules,
    }


# ---- the parent side: every point in its own process, under one budget -----------------


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
    table = SMOKE_WORKLOADS if args.smoke else WORKLOADS
    args.workloads = args.workloads.split(",") if args.workloads else list(table)
    args.peers = args.peers.split(",")
    for kind, names, known in (("workload", args.workloads, table), ("peer", args.peers, PEERS)):
        unknown = [name for name in names if name not in known]
        if unknown:
            parser.error(f"unknown {kind} {unknown[0]!r}; expected one of {sorted(known)}")
    if args.budget_s <= 0 or args.point_timeout_s <= 0:
        parser.error("--budget-s and --point-timeout-s must be > 0")
    if args.peak_tflops is not None and not args.peak_tflops > 0:
        parser.error(f"--peak-tflops {args.peak_tflops}: must be > 0")
    args.table = table
    return args


def point_specs(args) -> list[dict]:
    """The GEMM probes, then every (workload, peer) point, in run order: keras_vit on JAX
    and timm for every workload first, keras_vit on Keras PyTorch (eager, the slowest path)
    after them, so that a budget too short for all drops those points first."""
    smoke = args.smoke
    sizes = [128, 256] if smoke else [4096, 8192]
    specs = [
        {"kind": "gemm", "engine": e, "sizes": sizes, "repeats": 1 if smoke else 3, "needs": m}
        for e, m in GEMM_ENGINES.items()
    ]
    counts = (
        {"warmup": 1, "steps": 1, "repeats": 1}
        if smoke
        else {"warmup": 3, "steps": 10, "repeats": 3}
    )
    late = [peer for peer in args.peers if peer in LAST]
    for group in ([peer for peer in args.peers if peer not in LAST], late):
        for name in args.workloads:
            for peer in group:
                spec = {"kind": "model", "workload_name": name, "workload": args.table[name]}
                specs.append({**spec, **counts, "peer": peer, "needs": PEERS[peer][0]})
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
    """Every point in its own process until the budget is spent."""
    deadline = time.monotonic() + args.budget_s
    records = []
    for spec in point_specs(args):
        left = deadline - time.monotonic()
        reason = missing_module(spec["needs"])
        if reason is None and left < 5:
            reason = f"budget of {args.budget_s:.0f} s spent"
        result = {"skipped": reason} if reason else launch(spec, min(left, args.point_timeout_s))
        records.append({**spec, **result})
        label = spec.get("peer", "gemm " + spec.get("engine", ""))
        print(f"{spec.get('workload_name', 'gemm')} {label}: " + one_line(records[-1]), flush=True)
    return records


def one_line(record: dict) -> str:
    if "skipped" in record:
        return "skipped: " + record["skipped"]
    if record["kind"] == "gemm":
        return f"{record['best_tflops']:.2f} TFLOP/s bfloat16 GEMM on {record['device']}"
    return f"{record['images_per_s']:.1f} img/s on {record['device']}"


def summarise(args, records: list[dict]) -> dict:
    """Adds model TFLOP/s and both utilisations to each point; the device, both peaks, and
    per workload keras_vit's best over timm's best."""
    from keras_vit.evaluate.benchmarking import model_gflops

    ran = [r for r in records if "skipped" not in r]
    devices = [r["device"] for r in ran]
    device = next((d for d in devices if d != "CPU"), devices[0] if devices else "unknown")
    gemm = max((r["best_tflops"] for r in ran if r["kind"] == "gemm"), default=None)
    sheet = peak_tflops(device, args.peak_tflops)
    for r in (r for r in ran if r["kind"] == "model"):
        variant, mode, size, _ = r["workload"]
        r["model_tflops_per_s"] = model_gflops(variant, size, mode) * r["images_per_s"] / 1e3
        r["mfu_datasheet"] = r["model_tflops_per_s"] / sheet if sheet else None
        r["mfu_gemm"] = r["model_tflops_per_s"] / gemm if gemm else None
    ratios = {}
    for name in args.workloads:
        best = {
            side: max((r["images_per_s"] for r in ran if r.get("workload_name") == name
                       and r["peer"].startswith(side)), default=None)
            for side in ("keras_vit", "timm")
        }  # fmt: skip
        ratios[name] = best["keras_vit"] / best["timm"] if all(best.values()) else None
    return {"device": device, "datasheet_peak_tflops": sheet, "measured_gemm_tflops": gemm,
            "keras_vit_best_over_timm_best": ratios}  # fmt: skip


def markdown(records: list[dict]) -> str:
    rows = ["| workload | peer | img/s | peak GiB | model TFLOP/s | MFU sheet | MFU GEMM |",
            "|---|---|---|---|---|---|---|"]  # fmt: skip
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    for r in (r for r in records if r["kind"] == "model"):
        if "skipped" in r:
            rows.append(f"| {r['workload_name']} | {r['peer']} | skipped: {r['skipped']} ||||")
            continue
        rows.append(
            f"| {r['workload_name']} | {r['peer']} | {r['images_per_s']:.1f} | "
            f"{r['peak_memory_gib']:.2f} ({r['memory_kind']}) | {r['model_tflops_per_s']:.3f} | "
            f"{pct(r['mfu_datasheet'])} | {pct(r['mfu_gemm'])} |"
        )
    return "\n".join(rows)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.point:
        print("RESULT " + json.dumps(run_point(json.loads(args.point))), flush=True)
        return 0
    start = time.monotonic()
    records = run_all(args)
    summary = summarise(args, records)
    print(markdown(records))
    print(json.dumps(summary))
    payload = {**summary, "smoke": args.smoke, "budget_s": args.budget_s,
               "wall_s": time.monotonic() - start, "points": records}  # fmt: skip
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
