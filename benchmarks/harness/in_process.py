"""keras_vit against the Keras peers (keras-hub, vit-keras), timed alternately in one process.

`throughput.py` gives every (framework, setting) point its own process, for per-point peak
RSS and isolation; on a host whose speed moves by up to ~2x between minutes its ratios need
many rounds. Here every Keras model lives in one process (one TensorFlow runtime, the same
thread pools) and each round times every point once, starting at a different point each
round, so a drift of the host's speed reaches all points of a round alike; the ratio of two
frameworks is the median over rounds of their per-round ratio, each framework at its
fastest setting of the run (by median).

timm (PyTorch, optional: `--frameworks keras_vit,timm` where torch and timm import) joins
the same rotation: a setting POLICY is timm eager in that precision (float32, or bfloat16
autocast for mixed_bfloat16), POLICY+xla is `torch.compile` of it (`torch_peer.py`). The
two runtimes' thread pools take turns, as the points do; on a 2-core AMD EPYC timm's float32
step took the same time here as in a process of its own (955 against 928-1010 ms).

    python benchmarks/bench.py in-process --variant Ti/16 --mode train --rounds 12
    python benchmarks/bench.py in-process --frameworks keras_vit,timm --settings float32+xla
    python benchmarks/bench.py in-process --variant B/16 --mode infer --settings float32+xla
"""

from __future__ import annotations

import argparse
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.join(_HERE, ".."), os.path.join(_HERE, "..", "harness")]

import common  # noqa: E402
import peers as torch_peer  # noqa: E402

DEFAULT_SETTINGS = "float32,float32+xla"
FRAMEWORKS = (*common.FRAMEWORKS, "timm")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_model_arguments(parser, modes=("infer", "train"), default_mode="train")
    parser.add_argument(
        "--frameworks",
        default=",".join(common.FRAMEWORKS),
        help=f"comma-separated subset of {','.join(FRAMEWORKS)} (default: the Keras ones; a "
        "peer that does not import is skipped, with a note)",
    )
    parser.add_argument(
        "--settings",
        default=DEFAULT_SETTINGS,
        help=f"comma-separated POLICY or POLICY+xla points for every framework "
        f"(default {DEFAULT_SETTINGS})",
    )
    parser.add_argument("--steps", type=int, default=2, help="steps per point and round (2)")
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds (10)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per point (2)")
    parser.add_argument("--json", dest="json_path", help="write the results here")
    args = parser.parse_args(argv)
    args.frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    unknown = set(args.frameworks) - set(FRAMEWORKS)
    if unknown or "keras_vit" not in args.frameworks:
        parser.error(
            f"--frameworks must include keras_vit and name only {list(FRAMEWORKS)}; "
            f"got {args.frameworks}"
        )
    if {"timm", "keras_hub"} <= set(args.frameworks):
        parser.error(
            "--frameworks: timm and keras_hub cannot share a process (torch's import of "
            "triton crashed after keras-hub's); time them in separate runs"
        )
    args.setting_list = common.parse_settings_argument(parser, args.settings)
    counts = {"--steps": args.steps, "--rounds": args.rounds, "--warmup": args.warmup}
    common.check_model_arguments(parser, args, counts)
    return args


def build_points(args, frameworks):
    """{(framework, setting name): step function}, each model built under its policy."""
    import keras

    steps = {}
    for framework in frameworks:
        for policy, xla in args.setting_list:
            keras.mixed_precision.set_global_policy(policy)
            keras.utils.set_random_seed(0)
            if framework == "timm":
                step = timm_step(args, policy, xla)
            else:
                model = common.build_model(framework, args.variant, args.image_size)
                step = common.make_step(
                    model, args.mode, args.batch_size, args.image_size, xla=xla, framework=framework
                )
            for _ in range(args.warmup):
                step()
            steps[(framework, common.setting_label(policy, xla))] = step
    keras.mixed_precision.set_global_policy("float32")
    return steps


def timm_step(args, policy: str, compiled: bool):
    """timm's step for a Keras setting: the policy's precision, `torch.compile` for +xla."""
    torch_peer.set_threads(os.cpu_count() or 0)
    model = torch_peer.build_model(common.variant_arch(args.variant), args.image_size)
    compiler = "compile" if compiled else "eager"
    size, batch = args.image_size, args.batch_size
    return torch_peer.make_step(model, args.mode, batch, size, policy, compiler)


def peer_import_error(framework: str) -> str | None:
    """None when `framework` (a `peers.PEERS` row) imports here, else why not."""
    return torch_peer.import_problem(*torch_peer.PEERS[framework].modules)


def time_rounds(steps, rounds, steps_per_point):
    """{point: [ms per step, one figure per round]}; round r starts at point r (rotation)."""
    points = list(steps)
    times = {point: [] for point in points}
    for round_index in range(rounds):
        shift = round_index % len(points)
        for point in points[shift:] + points[:shift]:
            seconds = common.time_call(steps[point], steps_per_point)
            times[point].append(1000 * seconds / steps_per_point)
    return times


def best_settings(times, frameworks):
    """{framework: its setting with the lowest median ms per step}."""
    return {
        framework: min(
            (common.median(values), setting)
            for (name, setting), values in times.items()
            if name == framework
        )[1]
        for framework in frameworks
    }


def ours_over_peers(times, best):
    """{peer: median over rounds of peer ms / keras_vit ms}, each at its best setting
    (> 1: keras_vit is faster)."""
    ours = times[("keras_vit", best["keras_vit"])]
    ratios = {}
    for peer, setting in best.items():
        if peer != "keras_vit":
            pairs = zip(ours, times[(peer, setting)], strict=True)
            ratios[peer] = common.median([theirs / mine for mine, theirs in pairs])
    return ratios


def main(argv=None):
    args = parse_args(argv)
    reasons = {framework: peer_import_error(framework) for framework in args.frameworks}
    frameworks = [framework for framework in args.frameworks if reasons[framework] is None]
    for missing in sorted(set(args.frameworks) - set(frameworks)):
        print(f"{missing} does not import here ({reasons[missing]}): skipped", flush=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load_before = os.getloadavg()
    steps = build_points(args, frameworks)
    times = time_rounds(steps, args.rounds, args.steps)
    best = best_settings(times, frameworks)
    ratios = ours_over_peers(times, best)
    print(
        f"{args.variant} @{args.image_size}, batch {args.batch_size}, {args.mode}: "
        f"{args.rounds} rounds x {args.steps} steps per point, one process"
    )
    print(
        "| framework | setting | ms per step (median) | img/s | range ms |\n|---|---|---|---|---|"
    )
    for (framework, setting), values in times.items():
        median = common.median(values)
        mark = " (best)" if best[framework] == setting else ""
        print(
            f"| {framework} | {setting}{mark} | {median:.1f} | "
            f"{1000 * args.batch_size / median:.2f} | {min(values):.0f}-{max(values):.0f} |"
        )
    for peer, ratio in ratios.items():
        print(
            f"keras_vit ({best['keras_vit']}) / {peer} ({best[peer]}): {ratio:.3f}x "
            "(median of per-round ratios)"
        )
    if args.json_path:
        common.write_json(
            args.json_path,
            {
                "command": "python benchmarks/bench.py in-process "
                + " ".join(argv or sys.argv[1:]),
                "measured": started,
                "load_before": load_before,
                "load_after": os.getloadavg(),
                "host": common.host_record(),
                "ms_per_step": {
                    f"{fw}:{setting}": values for (fw, setting), values in times.items()
                },
                "best_setting": best,
                "keras_vit_over_peer": ratios,
                "skipped": {name: reason for name, reason in reasons.items() if reason},
            },
        )


if __name__ == "__main__":
    main()
