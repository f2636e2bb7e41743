"""Where one step's time goes on CPU, by kind of operation (`KINDS`) and the `--top` ones.

keras_vit under TensorFlow's profiler (`--setting POLICY+xla`: the XLA program's events;
`POLICY`: TensorFlow's kernels, the attention core's by node name; summed over threads, read
with TensorFlow's internal `xplane_pb2`: a developer tool) or, with `--peer timm`, timm under
`torch.profiler` (operators' self time); calls per step.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import sys
import tempfile

# XLA reads its flags once, at its first use: set ours before anything imports TensorFlow.
_FLAGS = os.environ.get("XLA_FLAGS", "")
os.environ["XLA_FLAGS"] = f"{_FLAGS} --xla_cpu_enable_xprof_traceme=true".strip()

from benchmarks.harness import common, peers  # noqa: E402

# (kind, XLA event name, TensorFlow op type, torch operator): the first pattern that
# matches an operation's name in its column gives its kind; none: elementwise / reductions
KINDS = (
    ("attention core", None, None, r"scaled_dot_product|^aten::(_softmax|bmm|baddbmm)"),
    ("matrix products", r"^(dot|MatMul|convolution)", r"(MatMul|Einsum|Conv2D)",
     r"^aten::(mm|addmm|_convolution|mkldnn_convolution|convolution_backward)$"),
    ("layout copies", r"^(transpose|copy)",
     r"^(_Mkl)?(Transpose|ConcatV2|Pack|Unpack|StridedSlice|Tile)",
     r"^aten::(copy_|clone|contiguous|transpose|permute|cat|stack|_unsafe_view)$"),
    ("casts", None, r"^Cast$", None),
)  # fmt: skip
# TensorFlow kernels of the attention core, by node name in the attention layer's scope:
# `einsum`/BatchMatMul, the softmax, its gradient's `mul`, `Sum`, `sub` (not the projections)
ATTENTION_SCOPE = r"MultiHeadDotProductAttention[^/]*/"
CORE_NODE = re.compile(ATTENTION_SCOPE + r"(einsum|Softmax)")
CORE_BATCHED = re.compile(ATTENTION_SCOPE + r"(ArithmeticOptimizer/\w+_)?MatMul")
CORE_GRADIENT = re.compile(r"^gradient_tape/.*" + ATTENTION_SCOPE + r"(mul|Sum|sub)(_\d+)?(/|$)")
XLA_RUNTIME = ("ThunkExecutor", "SlinkyThreadPool", "end: ")
TF_RUNTIME = ("ExecutorState::Process", "ParallelFor", "ExecutorDoneCallback")
TF_MARKERS = {"StartRegion", "StopRegion", "Record", "MemoryAllocation", "MemoryDeallocation"}
TORCH_WRAPPERS = ("ProfilerStep", "autograd::engine", "Optimizer.")  # time of their children


def kind_of(name):
    """The kind of an XLA event (`dot.12`), a TensorFlow op type (`_MklNativeFusedMatMul`;
    `attention core/...` for the core's kernels) or a torch operator (`aten::addmm`)."""
    if name.startswith("attention core/"):
        return "attention core"
    column = 3 if name.startswith("aten::") else 1 if name[:1].islower() else 2
    for row in KINDS:
        if row[column] and re.search(row[column], name):
            return row[0]
    return "elementwise / reductions"


def is_attention_core(node: str, op_type: str) -> bool:
    """Whether a TensorFlow kernel (node name, op type) belongs to the attention core."""
    if CORE_NODE.search(node) or CORE_GRADIENT.search(node):
        return True
    return bool(CORE_BATCHED.search(node)) and "BatchMatMul" in op_type


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="bench.py profile", description=__doc__.split("\n")[0])
    common.add_model_arguments(parser, modes=("infer", "train"), default_mode="train")
    parser.add_argument("--peer", choices=("keras_vit", "timm"), default="keras_vit")
    parser.add_argument("--setting", help="keras_vit: POLICY or POLICY+xla (float32+xla); "
                        "timm: float32 or bfloat16_autocast (float32)")  # fmt: skip
    parser.add_argument("--steps", type=int, default=2, help="profiled steps (2)")
    parser.add_argument("--top", type=int, default=12, help="operations listed (12)")
    args = parser.parse_args(argv)
    common.check_model_arguments(parser, args, "steps", "top")
    timm = args.peer == "timm"
    args.setting = args.setting or ("float32" if timm else "float32+xla")
    try:
        if timm and args.setting not in ("float32", "bfloat16_autocast"):
            raise ValueError(f"{args.setting!r} is not float32 or bfloat16_autocast")
        parse = peers.parse_timm_setting if timm else common.parse_setting
        args.policy, args.compiler = parse(args.setting)
    except ValueError as error:
        parser.error(f"--setting: {error}")
    args.compiler = args.compiler if timm else ("xla" if args.compiler else "noxla")
    return args


def xplane_times(logdir, xla):
    """({operation: seconds}, {operation: events}) of the TensorFlow profile in `logdir`: the
    XLA program's events (less numeric suffixes) or TensorFlow's kernels by op type."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    path = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as handle:
        space.ParseFromString(handle.read())
    times, calls = collections.Counter(), collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if ("Eigen" not in line.name) if xla else not line.name.startswith("tf_"):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if xla and not name.startswith(XLA_RUNTIME):
                    key = re.sub(r"[._]\d+$", "", name)
                elif xla or name.startswith(TF_RUNTIME):
                    continue
                else:
                    node, _, key = name.rpartition(":")
                    if key in TF_MARKERS:
                        continue
                    key = f"attention core/{key}" if is_attention_core(node, key) else key
                times[key] += event.duration_ps / 1e12
                calls[key] += 1
    return times, calls


def profile_keras_vit(args, step):
    """(wall seconds per step, times, calls) of keras_vit's step under TensorFlow's profiler."""
    import tensorflow as tf

    with tempfile.TemporaryDirectory(prefix="keras_vit_profile_") as logdir:
        tf.profiler.experimental.start(logdir)
        seconds = common.time_call(step, args.steps) / args.steps
        tf.profiler.experimental.stop()
        return (seconds, *xplane_times(logdir, args.compiler == "xla"))


def profile_timm(args, step):
    """(wall seconds per step, times, calls) of timm's step under `torch.profiler`."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as trace:
        seconds = common.time_call(step, args.steps) / args.steps
    times, calls = collections.Counter(), collections.Counter()
    for event in trace.key_averages():
        if not event.key.startswith(TORCH_WRAPPERS):
            times[event.key] += event.self_cpu_time_total / 1e6
            calls[event.key] += event.count
    args.setting += f", {torch.get_num_threads()} threads"
    return seconds, times, calls


def print_tables(times, calls, steps, top, item, count):
    """Per kind and for the `top` operations: ms per step, share of the time, calls."""
    total = sum(times.values()) / steps
    by_kind, kind_calls = collections.Counter(), collections.Counter()
    for name, value in times.items():
        by_kind[kind_of(name)] += value / steps
        kind_calls[kind_of(name)] += calls[name] // steps
    print(f"| kind | ms per step | share | {count} per step |\n|---|---|---|---|")
    for kind, value in by_kind.most_common():
        print(f"| {kind} | {value * 1000:.0f} | {100 * value / total:.1f}% | {kind_calls[kind]} |")
    print(f"| {item} | kind | ms per step | share | {count} per step |\n|---|---|---|---|---|")
    for name, value in times.most_common(top):
        print(f"| {name} | {kind_of(name)} | {value / steps * 1000:.1f} | "
              f"{100 * value / steps / total:.1f}% | {calls[name] // steps} |")  # fmt: skip


def main(argv=None):
    args = parse_args(argv)
    timm = args.peer == "timm"
    build = peers.timm_step if timm else peers.keras_step  # as the race's workers build it
    _, step = build(args, args.peer, args.mode, args.policy, args.compiler)
    common.time_call(step, 2)
    seconds, times, calls = (profile_timm if timm else profile_keras_vit)(args, step)
    item, count = ("operator", "calls") if timm else ("operation", "events")
    print(f"{'timm ' if timm else ''}{args.variant} @{args.image_size}, batch {args.batch_size}, "
          f"{args.mode}, {args.setting}: {seconds * 1000:.0f} ms per step (wall, profiler on), "
          f"{sum(times.values()) / args.steps * 1000:.0f} ms of {item} time per step, "
          f"{sum(calls.values()) // args.steps} {count} per step")  # fmt: skip
    print(f"host: {common.host_record()['cpu']}")
    print_tables(times, calls, args.steps, args.top, item, count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
