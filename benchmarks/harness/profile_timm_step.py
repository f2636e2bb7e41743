"""Where the time of one timm step goes on CPU, by kind of operation: the PyTorch side of
`profile_step.py` (issue 28: "profile both").

Runs a few training (or inference) steps of timm's ViT for a variant (`torch_peer.build_model`:
the architecture keras_vit's benchmarks build, random weights, AdamW) under
`torch.profiler` and sums the operators' self CPU time by kind: the attention core (the fused
`scaled_dot_product_attention` kernels, or the batched products and softmax of its
unfused path), the other matrix products (linear layers, the patch convolution), layout
copies, and the elementwise / reduction kernels (LayerNorm, GELU, residual adds, dropout
masks, the optimizer's update). Also prints the operator calls per step: what a step costs
beyond its kernels grows with their number.

Self time is the time an operator spent outside its children, on the thread that called it
(PyTorch runs each operator's intra-op threads inside it), so the kinds add up to about the
step's wall time; `profile_step.py` sums TensorFlow's kernel events over its threads
instead, and its total can exceed the wall time (independent kernels run at the same time).

Needs torch and timm (not installed by keras_vit; see benchmarks/README.md):

    python benchmarks/bench.py profile --peer timm --variant S/16 --mode train
    python benchmarks/bench.py profile --peer timm --variant Ti/16 --setting bfloat16_autocast
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.join(_HERE, ".."), os.path.join(_HERE, "..", "harness")]

import common  # noqa: E402
import peers as torch_peer  # noqa: E402

KINDS = (
    ("attention core", re.compile(r"scaled_dot_product|^aten::(_softmax|bmm|baddbmm)")),
    (
        "matrix products",
        re.compile(r"^aten::(mm|addmm|_convolution|mkldnn_convolution|convolution_backward)$"),
    ),
    (
        "layout copies",
        re.compile(r"^aten::(copy_|clone|contiguous|transpose|permute|cat|stack|_unsafe_view)$"),
    ),
)


def kind_of(name: str) -> str:
    """The kind of a PyTorch operator name such as `aten::addmm` or
    `aten::_scaled_dot_product_flash_attention_for_cpu`."""
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return "elementwise / reductions"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_model_arguments(parser, modes=("infer", "train"), default_mode="train")
    parser.add_argument(
        "--setting",
        default="float32",
        choices=("float32", "bfloat16_autocast"),
        help="timm's setting, as in throughput.py's --timm-settings (float32)",
    )
    parser.add_argument("--steps", type=int, default=2, help="profiled steps (2)")
    parser.add_argument("--top", type=int, default=12, help="operators listed (12)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = parser.parse_args(argv)
    common.check_model_arguments(parser, args, {"--steps": args.steps, "--top": args.top})
    return args


def operator_times(profile) -> tuple[collections.Counter, collections.Counter]:
    """({operator: self CPU seconds}, {operator: calls}) of a finished `torch.profiler`."""
    seconds, calls = collections.Counter(), collections.Counter()
    for event in profile.key_averages():
        if event.key.startswith(("ProfilerStep", "autograd::engine", "Optimizer.")):
            continue  # wrappers: their time is their children's
        seconds[event.key] += event.self_cpu_time_total / 1e6
        calls[event.key] += event.count
    return seconds, calls


def main(argv=None):
    args = parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile

    from keras_vit.evaluate.benchmarking import variant_arch

    torch_peer.set_threads(args.threads)
    torch.manual_seed(0)
    model = torch_peer.build_model(variant_arch(args.variant), args.image_size)
    policy, compiler = torch_peer.parse_timm_setting(args.setting)
    step = torch_peer.make_step(
        model, args.mode, args.batch_size, args.image_size, policy, compiler
    )
    for _ in range(2):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as trace:
        seconds = common.time_call(step, args.steps) / args.steps
    times, calls = operator_times(trace)
    total = sum(times.values()) / args.steps
    print(
        f"timm {args.variant} @{args.image_size}, batch {args.batch_size}, {args.mode}, "
        f"{args.setting}, {torch.get_num_threads()} threads: {seconds * 1000:.0f} ms per step "
        f"(wall, profiler on), {total * 1000:.0f} ms of operator self time per step, "
        f"{sum(calls.values()) // args.steps} operator calls per step"
    )
    print(f"host: {common.host_record()['cpu']}, torch {torch.__version__}")
    common.print_profile_tables(
        times, calls, args.steps, kind_of, args.top, item="operator", count="calls"
    )


if __name__ == "__main__":
    main()
