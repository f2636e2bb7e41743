"""Where the time of one keras_vit step goes on CPU, by kind of operation.

Runs a few training (or inference) steps of a variant under the TensorFlow profiler and sums
the operations' trace events by kind: matrix products, layout copies, casts, and the
elementwise / reduction kernels (LayerNorm, GELU, softmax, residual adds, optimizer update).
With `--setting POLICY+xla` (default float32+xla) the events are those of the XLA program
(XLA's per-operation trace events, `--xla_cpu_enable_xprof_traceme`); with `--setting
POLICY` (no XLA, e.g. mixed_bfloat16) they are TensorFlow's own kernels (oneDNN's `_Mkl*`
among them). Shares are of the summed event time; independent operations can run at the
same time on a multi-core machine, so the sum can exceed the wall time.

Without XLA, the attention core's kernels (the batched products of softmax(q k^T) v, the
softmax and its gradient) are their own kind, as in `profile_timm_step.py`, the timm
side. Also prints the events per step: what a step costs beyond its kernels grows with their
number.

Reads the profile with TensorFlow's bundled `xplane_pb2` (an internal module: this is a
developer tool, not part of the package).

    python benchmarks/bench.py profile --variant Ti/16 --batch-size 16 --mode train
    python benchmarks/bench.py profile --variant B/16 --mode infer --setting mixed_bfloat16
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.join(_HERE, ".."), os.path.join(_HERE, "..", "harness")]
# XLA reads its flags once, at its first use: set ours before anything imports TensorFlow.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true"
).strip()

import common  # noqa: E402

KINDS = (
    ("matrix products", re.compile(r"^(dot|MatMul|convolution)")),
    ("layout copies", re.compile(r"^(transpose|copy)")),
)
# TensorFlow kernels (no XLA), by op type: the part of an event name after its last ":"
TF_KINDS = (
    ("matrix products", re.compile(r"(MatMul|Einsum|Conv2D)")),
    ("layout copies", re.compile(r"^(_Mkl)?(Transpose|ConcatV2|Pack|Unpack|StridedSlice|Tile)")),
    ("casts", re.compile(r"^Cast$")),
)
# TensorFlow kernels of the attention core, by node name (no XLA), directly in the attention
# layer's scope: the batched products of softmax(q k^T) v (`einsum`, or `MatMul` run as a
# BatchMatMul), the softmax, and its gradient's elementwise kernels (`mul`, `Sum`, `sub`
# under gradient_tape, with the query scaling's gradient). The q/k/v/out projections (the
# `query`... `out` EinsumDense layers, or one 2-D `MatMul` in the bfloat16 path) are not.
ATTENTION_SCOPE = r"MultiHeadDotProductAttention[^/]*/"
CORE_NODE = re.compile(ATTENTION_SCOPE + r"(einsum|Softmax)")
CORE_BATCHED = re.compile(ATTENTION_SCOPE + r"(ArithmeticOptimizer/\w+_)?MatMul")
CORE_GRADIENT = re.compile(r"^gradient_tape/.*" + ATTENTION_SCOPE + r"(mul|Sum|sub)(_\d+)?(/|$)")


def is_attention_core(node: str, op_type: str) -> bool:
    """Whether a TensorFlow kernel (node name, op type) belongs to the attention core."""
    if CORE_NODE.search(node) or CORE_GRADIENT.search(node):
        return True
    return bool(CORE_BATCHED.search(node)) and "BatchMatMul" in op_type


RUNTIME_EVENTS = ("ThunkExecutor", "SlinkyThreadPool", "end: ")
TF_RUNTIME_EVENTS = ("ExecutorState::Process", "ParallelFor", "ExecutorDoneCallback")
# the thread pools' and allocator's own markers (thousands per step), not kernels
TF_MARKER_EVENTS = frozenset(
    {"StartRegion", "StopRegion", "Record", "MemoryAllocation", "MemoryDeallocation"}
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_model_arguments(parser, modes=("infer", "train"), default_mode="train")
    parser.add_argument(
        "--setting",
        default="float32+xla",
        help="POLICY or POLICY+xla, as in throughput.py's --settings (float32+xla)",
    )
    parser.add_argument("--steps", type=int, default=2, help="profiled steps (2)")
    parser.add_argument("--top", type=int, default=12, help="operation kinds listed (12)")
    args = parser.parse_args(argv)
    common.check_model_arguments(parser, args, {"--steps": args.steps, "--top": args.top})
    try:
        args.policy, args.xla = common.parse_setting(args.setting)
    except ValueError as error:
        parser.error(f"--setting: {error}")
    return args


def kind_of(name):
    """The operation kind of an XLA event name such as `dot.12` or `add_add_fusion.3`, or of a
    TensorFlow op type such as `_MklNativeFusedMatMul` or `Cast` (`attention core/_MklEinsum`:
    a kernel of the attention core, see `tensorflow_op_times`)."""
    if name.startswith("attention core/"):
        return "attention core"
    for kind, pattern in KINDS if name[:1].islower() else TF_KINDS:
        if pattern.search(name) if kind == "matrix products" else pattern.match(name):
            return kind
    return "elementwise / reductions"


def read_profile(logdir):
    """The `XSpace` of the newest profile under `logdir`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    path = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as handle:
        space.ParseFromString(handle.read())
    return space


def compiled_op_times(logdir):
    """({event name without its numeric suffix: summed seconds}, {the same: events}) of the
    XLA program's events."""
    space = read_profile(logdir)
    times, calls = collections.Counter(), collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if "Eigen" not in line.name:  # XLA's worker threads
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if not name.startswith(RUNTIME_EVENTS):
                    key = re.sub(r"[._]\d+$", "", name)
                    times[key] += event.duration_ps / 1e12
                    calls[key] += 1
    return times, calls


def tensorflow_op_times(logdir):
    """({op type: summed seconds}, {op type: kernel calls}) of the TensorFlow kernels (no XLA)
    in the profile; the attention core's kernels (`is_attention_core`) are keyed
    `attention core/<op type>`."""
    space = read_profile(logdir)
    times, calls = collections.Counter(), collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_"):  # TensorFlow's executor and its thread pool
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if name.startswith(TF_RUNTIME_EVENTS):
                    continue
                node, _, op_type = name.rpartition(":")
                if op_type in TF_MARKER_EVENTS:
                    continue
                key = f"attention core/{op_type}" if is_attention_core(node, op_type) else op_type
                times[key] += event.duration_ps / 1e12
                calls[key] += 1
    return times, calls


def main(argv=None):
    args = parse_args(argv)
    import keras
    import tensorflow as tf

    keras.mixed_precision.set_global_policy(args.policy)
    model = common.build_model("keras_vit", args.variant, args.image_size)
    step = common.make_step(
        model, args.mode, args.batch_size, args.image_size, xla=args.xla, framework="keras_vit"
    )
    for _ in range(2):
        step()
    with tempfile.TemporaryDirectory(prefix="keras_vit_profile_") as logdir:
        tf.profiler.experimental.start(logdir)
        seconds = common.time_call(step, args.steps) / args.steps
        tf.profiler.experimental.stop()
        times, calls = compiled_op_times(logdir) if args.xla else tensorflow_op_times(logdir)
    total = sum(times.values()) / args.steps
    print(
        f"{args.variant} @{args.image_size}, batch {args.batch_size}, {args.mode}, "
        f"{args.setting}: {seconds * 1000:.0f} ms per step (wall, profiler on), "
        f"{total * 1000:.0f} ms of operation events per step, "
        f"{sum(calls.values()) // args.steps} events per step"
    )
    common.print_profile_tables(times, calls, args.steps, kind_of, args.top)


if __name__ == "__main__":
    main()
