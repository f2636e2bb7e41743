"""The matrix products of one ViT step, each timed alone in every engine at hand.

Every product of a training step (forward, input and weight gradients) or forward pass (paper
section 3.1), each distinct shape timed alone, one process per engine (`ENGINES`; no GPU), on
`--per-call` distinct operand pairs a call, less what a call costs (a 1x1x1 product): ms and
GFLOP/s per shape and engine, a step's products per engine and their floor (best per shape).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time

from benchmarks.harness import common

ENGINES = ("xla", "tensorflow", "numpy", "torch")


def product(name, m, k, n, count, *, batch=1, transpose_a=False, transpose_b=False):
    """`(batch, m, k) x (batch, k, n)`, `count` times a step; transposed operands are stored
    `(k, m)` (left) and `(n, k)` (right)."""
    return {"name": name, "batch": batch, "m": m, "k": k, "n": n, "transpose_a": transpose_a,
            "transpose_b": transpose_b, "count": count}  # fmt: skip


def with_gradients(f, train):
    """`f`, and in training its gradients: for y = a b, da = dy b^T (`(m, n) x (n, k)`, b
    stored `(k, n)`) and db = a^T dy (`(k, m) x (m, n)`, a stored `(m, k)`)."""
    same = {"batch": f["batch"], "count": f["count"]}
    return [f] + train * [
        product(f["name"] + " dX", f["m"], f["n"], f["k"], transpose_b=True, **same),
        product(f["name"] + " dW", f["k"], f["m"], f["n"], transpose_a=True, **same),
    ]


def step_products(arch, batch_size, image_size=(224, 224), mode="train", channels=3, classes=1000):
    """Every matrix product of one step ("train"/"infer") of a ViT of `arch` at `image_size`
    (h, w): forward MACs `batch_size` x `analytic_macs` (no class-token-only last block)."""
    train = mode == "train"
    p, d, f = arch["patch_size"], arch["hidden_dim"], arch["mlp_dim"]
    heads, layers = arch["num_heads"], arch["num_layers"]
    patches = (image_size[0] // p) * (image_size[1] // p)
    tokens = patches + 1
    rows, head_dim, pairs = batch_size * tokens, d // heads, batch_size * heads
    embed = product("patch embedding", batch_size * patches, p * p * channels, d, 1)
    items = [embed] + with_gradients(embed, train)[2:]  # the image needs no gradient
    linear = (("q/k/v/out projection", d, d, 4 * layers), ("MLP fc1", d, f, layers),
              ("MLP fc2", f, d, layers))  # fmt: skip
    for name, width_in, width_out, count in linear:
        items += with_gradients(product(name, rows, width_in, width_out, count), train)
    core = {"batch": pairs, "count": layers}
    items.append(product("q k^T", tokens, head_dim, tokens, transpose_b=True, **core))
    items.append(product("probs v", tokens, tokens, head_dim, **core))
    items += train * [
        product("q k^T dQ", tokens, tokens, head_dim, **core),
        product("q k^T dK", tokens, tokens, head_dim, transpose_a=True, **core),
        product("probs v dP", tokens, head_dim, tokens, transpose_b=True, **core),
        product("probs v dV", tokens, tokens, head_dim, transpose_a=True, **core),
    ]
    return items + with_gradients(product("head", batch_size, d, classes, 1), train)


def macs(item) -> int:
    """Multiply-accumulates of all `count` runs of a product record."""
    return item["batch"] * item["m"] * item["k"] * item["n"] * item["count"]


def shape_key(item) -> str:
    """The product's shape and transposes ("16x197x64x197 tb"), timed once."""
    flags = ("ta " if item["transpose_a"] else "") + ("tb" if item["transpose_b"] else "")
    return f"{item['batch']}x{item['m']}x{item['k']}x{item['n']} {flags}".strip()


def operands(item, rng, copies):
    """`copies` pairs of random float32 operands of a product, stored as its transposes say."""
    batch, m, k, n = item["batch"], item["m"], item["k"], item["n"]
    shapes = [(k, m) if item["transpose_a"] else (m, k), (n, k) if item["transpose_b"] else (k, n)]
    lead = (batch,) if batch > 1 else ()
    return [tuple(rng.standard_normal(lead + shape, dtype="float32") for shape in shapes)
            for _ in range(copies)]  # fmt: skip


def engine_call(engine, item, pairs):
    """A callable running the product on each pair of `pairs` (TensorFlow: one function)."""
    ta, tb = item["transpose_a"], item["transpose_b"]
    if engine in ("xla", "tensorflow"):
        import tensorflow as tf

        flat = [tf.constant(array) for pair in pairs for array in pair]
        matmul = functools.partial(tf.matmul, transpose_a=ta, transpose_b=tb)
        fn = tf.function(lambda *xs: [matmul(*xs[i : i + 2]) for i in range(0, len(xs), 2)],
                         jit_compile=engine == "xla")  # fmt: skip
        return lambda: fn(*flat)
    if engine == "torch":
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        pairs = [(torch.from_numpy(a), torch.from_numpy(b)) for a, b in pairs]
        matmul, swap = torch.matmul, lambda x: x.transpose(-1, -2)
    else:
        import numpy as np

        matmul, swap = np.matmul, lambda x: np.swapaxes(x, -1, -2)
    views = [(swap(a) if ta else a, swap(b) if tb else b) for a, b in pairs]
    return lambda: [matmul(x, y) for x, y in views]


OVERHEAD = product("call overhead", 1, 1, 1, 1)  # a 1x1x1 product: what a call costs


def time_shapes(engine, shapes, repeats, per_call) -> dict:
    """`{"overhead_ms": ..., "ms": {shape key: ...}}`: median ms per product in `engine` over
    `repeats` calls of `per_call` products (after two), and the same for a 1x1x1 product."""
    import numpy as np

    rng = np.random.default_rng(0)
    figures = {}
    for item in [OVERHEAD, *shapes]:
        call = engine_call(engine, item, operands(item, rng, per_call))
        call(), call()
        calls = []
        for _ in range(repeats):
            start = time.perf_counter()
            call()
            calls.append((time.perf_counter() - start) / per_call)
        figures[shape_key(item)] = 1000 * float(np.median(calls))
    return {"overhead_ms": figures.pop(shape_key(OVERHEAD)), "ms": figures}


def net_ms(timed) -> dict:
    """{shape key: ms per product less the engine's call overhead, at least 0}."""
    return {key: max(ms - timed["overhead_ms"], 0.0) for key, ms in timed["ms"].items()}


def timed_in_process(engine, shapes, args) -> dict | str:
    """`time_shapes` of `engine` in a fresh process (GPUs hidden), or why it gave none."""
    python = args.torch_python if engine == "torch" else sys.executable
    counts = ["--repeats", str(args.repeats), "--per-call", str(args.per_call)]
    command = common.module_argv(python, "benchmarks.harness.products")
    command += ["--worker", engine, "--shapes", json.dumps(shapes)]
    env = common.child_env(dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""))
    try:
        return common.child_result(command + counts, env=env)
    except RuntimeError as error:
        return str(error)


def step_figures(items, per_engine) -> dict:
    """Per engine, ms of a step's products (count x net ms); `floor`: best engine per shape."""
    nets = {engine: net_ms(timed) for engine, timed in per_engine.items()}
    if nets:
        nets["floor"] = {key: min(ms[key] for ms in nets.values()) for key in [*nets.values()][0]}
    return {e: sum(i["count"] * ms[shape_key(i)] for i in items) for e, ms in nets.items()}


def cell(gflop, raw, net) -> str:
    """Net ms and GFLOP/s, or "call overhead" where the call costs 90% of the time."""
    if net <= 0.1 * raw:
        return f"{raw:.2f} ms (call overhead)"
    return f"{net:.2f} ms {gflop / net * 1e3:.0f} GF/s"


def report(items, per_engine, failed) -> str:
    """Each product's count, net ms and GFLOP/s per engine; the call overheads, step sums."""
    engines = list(per_engine)
    nets = {engine: net_ms(timed) for engine, timed in per_engine.items()}
    lines = ["product | shape | count | " + " | ".join(engines), "---"]
    for item in items:
        gflop, key = 2 * macs(item) / item["count"] / 1e9, shape_key(item)
        cells = [cell(gflop, per_engine[e]["ms"][key], nets[e][key]) for e in engines]
        lines.append(f"{item['name']} | {key} | {item['count']} | " + " | ".join(cells))
    overheads = ", ".join(f"{e} {per_engine[e]['overhead_ms']:.4f} ms" for e in engines)
    lines.append(f"call overhead per product (taken off the figures above): {overheads}")
    total_gflop = 2 * sum(macs(item) for item in items) / 1e9
    lines.append(f"products of one step: {total_gflop:.1f} GFLOP")
    for engine, ms in step_figures(items, per_engine).items():
        rate = f"{total_gflop / ms * 1e3:.0f} GFLOP/s" if ms > 0 else "call overhead only"
        lines.append(f"  {engine}: {ms:.1f} ms ({rate})")
    lines += [f"  {engine}: failed ({why})" for engine, why in failed.items()]
    return "\n".join(lines)


def parse_args(argv=None):
    """The run's arguments, or a worker's (`--worker ENGINE`: it imports no other engine)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="bench.py products", description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=11, help="timed calls per shape (11)")
    parser.add_argument("--per-call", type=int, default=8, help="products per call (8)")
    if "--worker" in argv:
        parser.add_argument("--worker", choices=ENGINES, required=True)
        parser.add_argument("--shapes", required=True)
        return parser.parse_args(argv)
    from keras_vit.cli.benchmark import check_json_path
    from keras_vit.cli.flags import UsageError

    common.add_model_arguments(parser, modes=("train", "infer"), default_mode="train")
    parser.add_argument("--engines", default="xla,tensorflow,numpy", help=f"of {ENGINES}")
    parser.add_argument("--torch-python", help="interpreter with torch (default: this one)")
    parser.add_argument("--json", dest="json_path", help="also write the figures here")
    args = parser.parse_args(argv)
    args.worker = None
    common.check_model_arguments(parser, args, "repeats", "per_call")
    args.engine_list = [part.strip() for part in args.engines.split(",")]
    for index, name in enumerate(args.engine_list):
        if name not in ENGINES:
            problem = "an empty item" if not name else f"unknown engine {name!r}"
            parser.error(f"--engines {args.engines!r}: {problem}; choose from {', '.join(ENGINES)}")
        if name in args.engine_list[:index]:
            parser.error(f"--engines {args.engines!r}: {name!r} is given twice")
    check_torch(parser, args)
    try:
        args.json_path is None or check_json_path(args.json_path)
    except UsageError as error:
        parser.error(str(error))
    return args


def check_torch(parser, args) -> None:
    """parser.error unless `--torch-python` (default: this interpreter) imports torch when
    the torch engine is asked for; and for `--torch-python` without it."""
    if "torch" not in args.engine_list:
        if args.torch_python:
            parser.error("--torch-python is only used by the torch engine: add torch to --engines")
        return
    args.torch_python = args.torch_python or sys.executable
    try:  # an empty result once torch imported
        common.child_result([args.torch_python, "-c", "import torch; print('RESULT {}')"])
    except RuntimeError as error:
        parser.error(f"--torch-python {args.torch_python!r} does not import torch ({error})")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        timed = time_shapes(args.worker, json.loads(args.shapes), args.repeats, args.per_call)
        print("RESULT " + json.dumps(timed), flush=True)
        return 0
    items = step_products(common.variant_arch(args.variant), args.batch_size,
                          (args.image_size, args.image_size), args.mode)  # fmt: skip
    shapes = list({shape_key(item): item for item in items}.values())  # each shape once
    per_engine, failed = {}, {}
    for engine in args.engine_list:
        timed = timed_in_process(engine, shapes, args)
        if isinstance(timed, str):
            failed[engine] = timed
            print(f"{engine}: no figures ({timed})", file=sys.stderr)
        else:
            per_engine[engine] = timed
    if not per_engine:
        print("no engine gave figures; nothing written", file=sys.stderr)
        return 1
    host = common.host_record()
    print(f"host: {host['cpu']}, {host['cores']} cores")
    print(f"{args.variant} {args.mode}, batch {args.batch_size} at {args.image_size}")
    print(report(items, per_engine, failed))
    if args.json_path:
        common.write_json(args.json_path, {
            "host": host, "variant": args.variant, "mode": args.mode,
            "batch_size": args.batch_size, "image_size": args.image_size,
            "per_call": args.per_call, "products": items, "timed": per_engine,
            "step_ms": step_figures(items, per_engine), "failed": failed,
        })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
