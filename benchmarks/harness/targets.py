"""The CPU speed targets in one run: B/16 inference, S/16 and Ti/16 training steps.

For each workload (batch 16 at 224, or at the size a name such as B/16-384 gives) every point
runs in its own process (the workers of benchmarks/bench.py run): keras_vit at float32,
float32+XLA, mixed_bfloat16 and mixed_bfloat16+XLA; timm at float32, bfloat16 autocast and
torch.compile (`--torch-python`, skipped with the reason when torch/timm do not import there);
the Keras peers keras-hub and vit-keras at float32+XLA and mixed_bfloat16 (skipped with the
reason when not installed); and the GEMM roof of TensorFlow and of torch. The points of a
workload start together, as many as fit in memory (`--memory-gb`, default 85% of MemAvailable,
over each point's expected peak RSS; S/16 training needs ~3.5 GB a point, so on 24 GiB it runs
in groups, each group's points timed together; the likeliest-fastest setting of every framework
is in the first group), then the parent asks each for one timed repeat per round, the order
rotated every round, so that the load of the machine hits every point alike. Rounds stop at
`--repeats` or when the workload's (group's) share of `--budget-s` is spent (at least one
round). The results are written after every workload, so a run cut short keeps what it
measured. After the rounds, "auto" (`keras_vit.runtime.precision.choose_precision`, measuring with a
fresh probe unless `--keep-probe-cache`) is asked which setting it picks for the model's shape.

The table gives the ratios the targets need: auto over the fastest keras_vit setting
(target >= 0.90), keras_vit's best over timm's best and over the best Keras peer (>= 1.20),
and the share of the run's roof (its best GEMM) at which keras_vit's own products
(`keras_vit.evaluate.benchmarking.keras_vit_step_gflops`) would have to run, over the whole step
with nothing else in it, for 1.2x timm's best: past 100%, no choice of kernels reaches that target
on the host.
Every figure is written with the host (CPU model, bfloat16 units, cores, load average) to
`--out` (.json and .md).

    python benchmarks/bench.py targets --torch-python /path/to/torch/python
    python benchmarks/bench.py targets --quick   # one round, fewer points: a smoke run
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.join(_HERE, ".."), os.path.join(_HERE, "..", "harness")]

import common  # noqa: E402
import figures  # noqa: E402
import peers  # noqa: E402
import throughput  # noqa: E402

WORKLOADS = (("B/16", "infer"), ("S/16", "train"), ("Ti/16", "train"))
# each framework's settings, likeliest fastest first (so that those share the first group)
KERAS_VIT_SETTINGS = ("mixed_bfloat16", "float32+xla", "float32", "mixed_bfloat16+xla")
PEER_SETTINGS = ("mixed_bfloat16", "float32+xla")
KERAS_TORCH_SETTINGS = ("mixed_bfloat16", "float32")  # eager: torch.compile takes minutes here
TIMM_SETTINGS = ("bfloat16_autocast", "float32", "float32+compile")
# expected peak RSS of one point, GB (AMD EPYC run of 2026-12-02, rounded up); GEMM roofs ~1
POINT_GB = {("B/16", "infer"): 2.0, ("S/16", "train"): 3.7, ("Ti/16", "train"): 2.8}
AUTO_TARGET, PEER_TARGET = 0.90, 1.20
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "results", "targets")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch-python", default=sys.executable, help="interpreter with timm")
    parser.add_argument("--python", default=sys.executable, help="interpreter of keras_vit")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per workload (3)")
    parser.add_argument("--steps", type=int, default=1, help="steps per timed repeat (1)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="seconds for all (420)")
    parser.add_argument("--gemm-sizes", default="1024,2048", help="GEMM roof sizes")
    parser.add_argument(
        "--workloads",
        default=",".join(f"{v}:{m}" for v, m in WORKLOADS),
        help="comma-separated VARIANT:MODE, MODE infer or train (default "
        + ",".join(f"{v}:{m}" for v, m in WORKLOADS)
        + ")",
    )
    parser.add_argument(
        "--memory-gb",
        type=float,
        default=None,
        help="memory the points of one group may use (default 85%% of MemAvailable)",
    )
    parser.add_argument(
        "--only",
        default=None,
        help="comma-separated frameworks to time (of keras_vit, keras_vit_torch, timm, "
        "keras_hub, vit_keras; default all that import)",
    )
    parser.add_argument("--keep-probe-cache", action="store_true", help="auto from the cache")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: one round, no torch.compile, keras_vit's float32+xla and "
        "mixed_bfloat16 and one peer setting only",
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help="path without suffix (.json, .md)")
    args = parser.parse_args(argv)
    args.workload_list = parse_workloads(parser, args.workloads)
    known = ("keras_vit", throughput.KERAS_TORCH, "timm", *peers.KERAS_PEERS)
    args.only_list = known if args.only is None else tuple(args.only.split(","))
    if set(args.only_list) - set(known):
        parser.error(f"--only: unknown {sorted(set(args.only_list) - set(known))}; of {known}")
    if args.quick:
        args.repeats = 1
    return args


def point_names(args, mode):
    """The worker names of one workload (throughput.py's spelling)."""
    ours = ("float32+xla", "mixed_bfloat16") if args.quick else KERAS_VIT_SETTINGS
    peers = PEER_SETTINGS[:1] if args.quick else PEER_SETTINGS
    timm = TIMM_SETTINGS[:2] if args.quick else TIMM_SETTINGS
    wanted = args.only_list
    columns = [[throughput.worker_name("keras_vit", mode, *common.parse_setting(s)) for s in ours]]
    columns = columns if "keras_vit" in wanted else []
    roofs = [throughput.GEMM]
    if skip_reason(args.torch_python, "timm") is None:
        if "timm" in wanted:
            columns.append(
                [
                    f"timm:{mode}:{policy}:{compiler}"
                    for policy, compiler in map(peers.parse_timm_setting, timm)
                ]
            )
        if throughput.KERAS_TORCH in wanted:
            columns.append(
                [f"{throughput.KERAS_TORCH}:{mode}:{p}:noxla" for p in KERAS_TORCH_SETTINGS]
            )
        roofs.append(throughput.GEMM_TORCH)
    for peer in peers.KERAS_PEERS:
        if peer in wanted and skip_reason(args.python, peer) is None:
            columns.append(
                [throughput.worker_name(peer, mode, *common.parse_setting(s)) for s in peers]
            )
    rows = max(len(c) for c in columns)
    interleaved = [c[i] for i in range(rows) for c in columns if i < len(c)]
    return roofs + interleaved


def memory_available_gb():
    """MemAvailable of /proc/meminfo in GB (None where it cannot be read)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1e6
    except OSError:
        return None
    return None


def groups_of(names, variant, mode, memory_gb):
    """`names` cut into consecutive groups whose expected peak RSS fits in `memory_gb`."""
    point_gb = POINT_GB.get((variant, mode), 3.7)
    if memory_gb is None:
        available = memory_available_gb()
        memory_gb = 0.85 * available if available else float("inf")
    groups, used = [[]], 0.0
    for name in names:
        need = 1.0 if name in (throughput.GEMM, throughput.GEMM_TORCH) else point_gb
        if groups[-1] and used + need > memory_gb:
            groups.append([])
            used = 0.0
        groups[-1].append(name)
        used += need
    return groups


def parse_workloads(parser, text: str) -> list:
    """[(variant, mode), ...] of `--workloads` ("Ti/16:train,B/16:infer"); parser.error naming
    the first item that is no VARIANT:MODE of a named variant (custom comma specs cannot be
    given here: commas separate the items), MODE infer or train, or a repeated item."""
    items = [item.strip() for item in text.split(",")]
    workloads = []
    for item in items:
        variant, _, mode = item.rpartition(":")
        problem = None
        if mode not in ("infer", "train") or not variant:
            problem = "must be VARIANT:MODE with MODE infer or train, e.g. Ti/16:train"
        else:
            try:
                patch = common.variant_arch(variant)["patch_size"]
            except ValueError as error:
                problem = f"unknown VARIANT: {error}"
            else:
                problem = sized_workload_problem(variant, patch)
        if problem is None and (variant, mode) in workloads:
            problem = "is given twice"
        if problem:
            parser.error(f"--workloads {text!r}: {item!r} {problem}")
        workloads.append((variant, mode))
    return workloads


def sized_workload_problem(variant, patch) -> str | None:
    """Why the image size `variant`'s name gives cannot be timed, or None."""
    try:
        size = common.variant_image_size(variant)
    except ValueError as error:
        return str(error)
    if size % patch:
        return f"gives image size {size}, not a multiple of the patch {patch}"
    return None


_SKIPS = {}


def skip_reason(python, framework):
    """None when `framework` (a `peers.PEERS` row) imports in `python`, else the reason
    (printed once)."""
    key = (python, framework)
    if key not in _SKIPS:
        problem = common.import_problem_in(python, ", ".join(peers.PEERS[framework].modules))
        _SKIPS[key] = None if problem is None else f"does not import in {python}: {problem}"
        if _SKIPS[key]:
            print(f"skipping {framework}: {_SKIPS[key]}", flush=True)
    return _SKIPS[key]


def worker_args(args, variant):
    """The namespace throughput.py's `worker_argv` reads."""
    return argparse.Namespace(
        variant=variant,
        image_size=common.variant_image_size(variant),
        batch_size=16,
        steps=args.steps,
        warmup=1,
        gemm_sizes=args.gemm_sizes,
        threads=0,
        python=args.python,
        torch_python=args.torch_python,
    )


def time_workload(args, variant, mode, deadline):
    """{name: [payloads]}, ready records and peak RSS of one workload's points, group by group."""
    groups = groups_of(point_names(args, mode), variant, mode, args.memory_gb)
    payloads, ready, peaks = {}, {}, {}
    for index, group in enumerate(groups):
        if len(groups) > 1:
            print(f"  group {index + 1}/{len(groups)}: {', '.join(group)}", flush=True)
        share = (deadline - time.perf_counter()) / (len(groups) - index)
        timed = time_group(args, variant, group, time.perf_counter() + share)
        for into, values in zip((payloads, ready, peaks), timed, strict=True):
            into.update(values)
    return payloads, ready, peaks


def time_group(args, variant, names, deadline):
    """{name: [payloads]}, ready records and peak RSS of points timed together."""
    wargs = worker_args(args, variant)
    workers, ready = throughput.start_workers(wargs, names)
    try:
        payloads = common.run_rounds(workers, args.repeats, deadline)
        peaks = {}
        for name in list(workers):
            try:
                peaks[name] = workers[name].request("rss")["peak_rss_mb"]
            except (OSError, RuntimeError) as error:  # died after its last round
                print(f"  dropping {name}: the worker died: {error}", flush=True)
                workers.pop(name).close()
                payloads.pop(name, None)
    finally:
        throughput.finish_workers(workers)
    return payloads, ready, peaks


def auto_setting(variant, refresh):
    """What "auto" picks for the variant's shape (a fresh probe when `refresh`)."""
    from keras_vit.runtime import precision
    from keras_vit.runtime.precision_probe import shape_from_kwargs

    shape = shape_from_kwargs(common.variant_arch(variant), common.variant_image_size(variant))
    if refresh:
        os.environ["KERAS_VIT_PRECISION_PROBE"] = "refresh"
    try:
        choice = precision.choose_precision(shape.pop("hidden_dim"), **shape)
    finally:
        os.environ.pop("KERAS_VIT_PRECISION_PROBE", None)
    return choice


def summarise(variant, mode, records, roofs, choice):
    """The target ratios of one workload from its records."""
    rate = {(r["framework"], r["setting"]): r["images_per_s"] for r in records}
    best = {}
    for (framework, setting), value in rate.items():
        if framework not in best or value > best[framework][1]:
            best[framework] = (setting, value)
    ours = best.get("keras_vit")
    on_torch = best.get(throughput.KERAS_TORCH)
    auto = rate.get(("keras_vit", choice.setting))
    keras_peers = [best[p] + (p,) for p in peers.KERAS_PEERS if p in best]
    best_peer = max(keras_peers, key=lambda item: item[1]) if keras_peers else None
    timm = best.get("timm")
    return {
        "workload": f"{variant} {mode}",
        "keras_vit": {s: v for (f, s), v in rate.items() if f == "keras_vit"},
        "timm": {s: v for (f, s), v in rate.items() if f == "timm"},
        "keras_peers": {f"{f} {s}": v for (f, s), v in rate.items() if f in peers.KERAS_PEERS},
        "best": {f: {"setting": s, "images_per_s": v} for f, (s, v) in best.items()},
        "auto": {"setting": choice.setting, "images_per_s": auto, "reason": choice.reason},
        "auto_over_best": auto / ours[1] if auto and ours else None,
        "ours_over_timm": ours[1] / timm[1] if ours and timm else None,
        "keras_vit_torch": {s: v for (f, s), v in rate.items() if f == throughput.KERAS_TORCH},
        "torch_backend_over_timm": on_torch[1] / timm[1] if on_torch and timm else None,
        "torch_backend_over_tensorflow": on_torch[1] / ours[1] if on_torch and ours else None,
        "ours_over_keras_peer": ours[1] / best_peer[1] if ours and best_peer else None,
        "best_keras_peer": f"{best_peer[2]} {best_peer[0]}" if best_peer else None,
        "roof_gflops": roofs,
        "roof_share_for_target_over_timm": roof_share_needed(variant, mode, timm, roofs),
    }


def roof_share_needed(variant, mode, timm, roofs):
    """The share of the run's best product speed (its roof) that keras_vit's own products
    (`keras_vit_step_gflops`) would have to run at, over the whole step with nothing else
    in it, for PEER_TARGET x timm's best: above 1, out of reach on this host."""
    if not timm or not roofs:
        return None
    gflop = common.keras_vit_step_gflops(variant, common.variant_image_size(variant), mode)
    return gflop * timm[1] * PEER_TARGET / max(roofs.values())


def measure(args, variant, mode, deadline):
    print(f"{variant} {mode}: starting the points", flush=True)
    payloads, ready, peaks = time_workload(args, variant, mode, deadline)
    roofs = {
        throughput.ROOF_NAMES[kind]: max(p["gemm_gflops"] for p in payloads.pop(kind))
        for kind in (throughput.GEMM, throughput.GEMM_TORCH)
        if payloads.get(kind)
    }
    records = [
        throughput.record_of(
            name, mode, [p["images_per_s"] for p in runs], ready[name], peaks[name]
        )
        for name, runs in payloads.items()
    ]
    common.add_derived(
        records, variant, common.variant_image_size(variant), max(roofs.values()) if roofs else None
    )
    choice = auto_setting(variant, refresh=not args.keep_probe_cache)
    return records, summarise(variant, mode, records, roofs, choice)


def ratio(value, target=None):
    if value is None:
        return "-"
    mark = "" if target is None else (" (met)" if value >= target else " (NOT met)")
    return f"{value:.2f}x{mark}"


def share_text(share):
    """`roof_share_needed` as a percentage, marked where it is past the roof."""
    if share is None:
        return "-"
    return f"{share:.0%}" + (" (past the roof)" if share > 1 else "")


def markdown(host_line, summaries):
    lines = [f"Host: {host_line}", ""]
    lines.append(
        "| workload | keras_vit img/s by setting | auto | auto/best | timm best | "
        "ours/timm | best Keras peer | ours/peer | keras_vit on the PyTorch backend | "
        "torch backend/timm | roof GFLOP/s | roof share 1.2x timm needs |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in summaries:
        ours = ", ".join(f"{k} {v:.2f}" for k, v in s["keras_vit"].items())
        timm = s["best"].get("timm")
        timm_text = f"{timm['setting']} {timm['images_per_s']:.2f}" if timm else "-"
        peer = s["best_keras_peer"]
        peer_text = f"{peer} {s['keras_peers'][peer]:.2f}" if peer else "-"
        roofs = ", ".join(f"{k} {v:.0f}" for k, v in s["roof_gflops"].items())
        on_torch = ", ".join(f"{k} {v:.2f}" for k, v in s["keras_vit_torch"].items()) or "-"
        cells = [
            s["workload"],
            ours,
            s["auto"]["setting"],
            ratio(s["auto_over_best"], AUTO_TARGET),
            timm_text,
            ratio(s["ours_over_timm"], PEER_TARGET),
            peer_text,
            ratio(s["ours_over_keras_peer"], PEER_TARGET),
            on_torch,
            ratio(s["torch_backend_over_timm"], PEER_TARGET),
            roofs,
            share_text(s["roof_share_for_target_over_timm"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def host_line(load_before, load_after, elapsed):
    host = common.host_record()
    return (
        f"{host['cpu']}, {host['cores']} cores, bfloat16 units: "
        f"{', '.join(host['bfloat16_flags']) or 'none'}; {platform.platform()}; "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; load average "
        f"{load_before} before, {load_after} after; {elapsed:.0f} s"
    )


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()
    load_before = throughput.load_average()
    share = args.budget_s / len(args.workload_list)
    all_records, summaries = [], []
    for index, (variant, mode) in enumerate(args.workload_list):
        deadline = start + share * (index + 1)
        records, summary = measure(args, variant, mode, deadline)
        all_records += records
        summaries.append(summary)
        print(f"  {summary['workload']}: {time.perf_counter() - start:.0f} s so far", flush=True)
        line = host_line(load_before, throughput.load_average(), time.perf_counter() - start)
        text = markdown(line, summaries)
        write(args, line, summaries, all_records, text)
    print(text)
    return 0


def figure_values(summaries) -> dict:
    """The ratios of each workload as figures (benchmarks/figures.py keys)."""
    values = {"workloads": len(summaries)}
    for s in summaries:
        key = s["workload"].replace("/", "").replace(" ", "_").lower()
        names = ("auto_over_best", "ours_over_timm", "ours_over_keras_peer")
        for name in (*names, "torch_backend_over_timm", "torch_backend_over_tensorflow"):
            if s[name] is not None:
                values[f"{key}_{name}"] = {"value": round(s[name], 3), "format": "{:.2f}x"}
    return values


def write(args, line, summaries, records, text):
    """`--out`.json (benchmarks/figures.py's results format, the raw figures beside) and .md."""
    config = {k: v for k, v in vars(args).items() if k != "workload_list"}
    figures.write_results(
        args.out + ".json",
        figure_values(summaries),
        command="python benchmarks/bench.py targets "
        + " ".join(a for a in sys.argv[1:] if a != "--worker"),
        about="CPU targets: auto over the fastest keras_vit setting, keras_vit best over "
        "timm best and over the best Keras peer, batch 16 at 224 or the size the variant's "
        "name gives (workloads: " + ", ".join(s["workload"] for s in summaries) + ")",
        notes=line,
        extra={
            "host": line,
            "machine_record": common.host_record(),
            "config": config,
            "summaries": summaries,
            "results": records,
        },
    )
    with open(args.out + ".md", "w", encoding="utf-8") as handle:
        handle.write(text)
    print(f"wrote {args.out}.json and {args.out}.md")


if __name__ == "__main__":
    sys.exit(main())
