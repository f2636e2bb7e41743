"""Images/second of keras_vit and its peers for inference and a training step, side by side.

For one variant, resolution and batch size, every framework (keras_vit, keras-hub
`ViTBackbone` + dense head, vit-keras `build_model`; peers only when importable by
`--python`) runs under every precision-and-compiler setting of `--settings` (default: float32
with XLA, mixed_bfloat16 with XLA, mixed_bfloat16 without XLA), each (framework, setting) in
its own subprocess, so peak memory is per point and import order does not matter. Workers
build and warm up first; then the parent asks them in turn for one timed repeat each,
rotating the order every round, so that the load drift of a shared machine hits every point
alike. With `--interleave framework` (the default; all points of every framework at once
may not fit in memory) the rotation runs over one framework's settings at a time.

The roof is the machine's best GEMM measured in the same run: a worker in every rotation
times `tf.matmul` in float32 and bfloat16, with and without XLA, at `--gemm-sizes`; model FLOP
utilisation is the analytic model FLOP rate (paper table 1 counts; training = 3x forward)
over that roof. The summary compares each framework at its best setting with keras_vit at
its best, and says what `keras_vit.runtime.distribute.choose_precision` ("auto") picks.

    python benchmarks/bench.py run --variant B/16 --mode infer --json b16.json

Prints two Markdown tables (every point; each framework at its best); writes the raw
figures (`--json FILE`) and/or the figures that README.md and docs/ quote (`--results FILE`,
benchmarks/bench.py results: keys, the import of earlier `--json` files, tables).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.join(_HERE, ".."), os.path.join(_HERE, "..", "harness")]

import common  # noqa: E402
import peers  # noqa: E402

GEMM, GEMM_TORCH, TIMM, KERAS_TORCH = "gemm", "gemm_torch", "timm", "keras_vit_torch"
ALL_FRAMEWORKS = tuple(name for name, peer in peers.PEERS.items() if peer.settings)
ROOF_NAMES = peers.ROOFS
DEFAULT_SETTINGS = "float32+xla,mixed_bfloat16+xla,mixed_bfloat16"


def add_timm_arguments(parser):
    """--timm-settings and --torch-python (the timm peer, benchmarks/harness/peers.py)."""
    parser.add_argument(
        "--timm-settings",
        default=",".join(peers.TIMM_SETTINGS),
        help="comma-separated timm settings: float32, bfloat16_autocast, float32+compile, "
        f"bfloat16_autocast+compile (default {','.join(peers.TIMM_SETTINGS)})",
    )
    parser.add_argument(
        "--torch-python",
        help="interpreter with torch and timm for the timm points and the torch GEMM roof "
        "(default: --python)",
    )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_model_arguments(parser)
    parser.add_argument(
        "--settings",
        default=DEFAULT_SETTINGS,
        help="comma-separated POLICY or POLICY+xla points to time for every framework "
        f"(default {DEFAULT_SETTINGS})",
    )
    parser.add_argument("--dtype-policy", help=argparse.SUPPRESS)  # deprecated
    parser.add_argument("--no-xla", action="store_true", help=argparse.SUPPRESS)  # deprecated
    parser.add_argument(
        "--frameworks",
        default=",".join((*common.FRAMEWORKS, TIMM)),
        help=f"comma-separated subset of {','.join(ALL_FRAMEWORKS)} (all; a peer that does "
        "not import in its interpreter is skipped)",
    )
    add_timm_arguments(parser)
    parser.add_argument("--steps", type=int, default=3, help="steps per timed repeat (3)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats (5)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (2)")
    parser.add_argument(
        "--gemm-sizes", default="1024,2048,4096", help="GEMM sizes, comma-separated, or none"
    )
    parser.add_argument("--threads", type=int, default=0, help="TF thread pools (0: default)")
    parser.add_argument(
        "--python", default=sys.executable, help="interpreter of the workers (this one)"
    )
    parser.add_argument(
        "--interleave",
        choices=("framework", "all"),
        default="framework",
        help="rotate over one framework's settings at a time (default; less memory) or over "
        "every point at once",
    )
    parser.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="run every point alone, one after another (memory runs)",
    )
    parser.add_argument("--json", dest="json_path", help="write the results here")
    parser.add_argument(
        "--results",
        dest="results_path",
        help="write/update this figures file (benchmarks/figures.py format; e.g. "
        "benchmarks/results/throughput_settings.json): this run's values replace its "
        "earlier ones, other runs stay; see benchmarks/bench.py results for the keys",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    unknown = set(args.frameworks) - set(ALL_FRAMEWORKS)
    if unknown:
        parser.error(f"unknown --frameworks {sorted(unknown)}; choose from {ALL_FRAMEWORKS}")
    args.torch_python = args.torch_python or args.python
    try:
        args.timm_list = [peers.parse_timm_setting(p) for p in args.timm_settings.split(",")]
    except ValueError as error:
        parser.error(f"--timm-settings: {error}")
    if args.dtype_policy or args.no_xla:  # the old spelling: one setting
        print("--dtype-policy/--no-xla are deprecated; use --settings", file=sys.stderr)
        args.settings = (args.dtype_policy or "float32") + ("" if args.no_xla else "+xla")
    args.setting_list = common.parse_settings_argument(parser, args.settings)
    counts = {"--steps": args.steps, "--repeats": args.repeats, "--warmup": args.warmup}
    common.check_model_arguments(parser, args, counts)
    args.sizes = () if args.gemm_sizes == "none" else tuple(map(int, args.gemm_sizes.split(",")))
    return args


# ---- parent side ------------------------------------------------------------------------


def worker_env(worker):
    """Environment variables a worker needs beyond the parent's."""
    return peers.PEERS[peers.peer_of(worker)].env


def worker_argv(args, worker):
    torch_side = peers.PEERS[peers.peer_of(worker)].python == "torch"
    python = args.torch_python if torch_side else args.python
    argv = [python, os.path.abspath(__file__), "--worker", worker]
    for name in ("variant", "image_size", "batch_size", "steps", "warmup"):
        argv += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    return argv + ["--gemm-sizes", args.gemm_sizes or "none", "--threads", str(args.threads)]


def start_workers(args, names):
    """Starts workers and waits for each to be ready; drops (and reports) the failed ones."""
    workers = {name: common.Worker(worker_argv(args, name), env=worker_env(name)) for name in names}
    ready = {}
    for name, worker in list(workers.items()):
        try:
            ready[name] = worker.read("READY")
        except RuntimeError as error:
            print(f"skipping {name}: {str(error).strip().splitlines()[-1]}", flush=True)
            worker.close()
            del workers[name]
    return workers, ready


def finish_workers(workers):
    """Closes every worker."""
    for worker in workers.values():
        worker.close()


def time_workers(args, names):
    """Starts `names`, times them in rotation; returns (payloads, ready, peak RSS) by name."""
    workers, ready = start_workers(args, names)
    try:
        payloads = common.run_rounds(workers, args.repeats) if workers else {}
        peaks = {name: workers[name].request("rss")["peak_rss_mb"] for name in workers}
    finally:
        finish_workers(workers)
    return payloads, ready, peaks


def worker_name(framework, mode, policy, xla):
    return f"{framework}:{mode}:{policy}:{'xla' if xla else 'noxla'}"


def framework_points(args, framework, mode):
    """The worker names of one framework's settings (`peers.points`)."""
    return peers.points(framework, mode, args.setting_list, args.timm_list)


def rotation_groups(args, mode):
    """The groups of worker names timed together (each with the GEMM workers when asked:
    TensorFlow's, and torch's when timm is timed)."""
    points = [framework_points(args, f, mode) for f in args.frameworks]
    if args.one_at_a_time:
        groups = [[name] for group in points for name in group]
    elif args.interleave == "all":
        groups = [[name for group in points for name in group]]
    else:
        groups = points
    gemm = ([GEMM] + ([GEMM_TORCH] if TIMM in args.frameworks else [])) if args.sizes else []
    return [group + gemm for group in groups] if not args.one_at_a_time else groups + [gemm]


def record_of(name, mode, rates, ready, peak):
    """The result record of worker `name` (settings labelled as `--settings`/`--timm-settings`
    spell them)."""
    framework, _, policy, compiler = name.split(":")
    record = common.result_record_from(framework, mode, rates, ready)
    record.update(policy=policy, xla=compiler == "xla", compiler=compiler)
    record["setting"] = peers.label(name)
    record["peak_rss_mb"] = peak
    return record


def measure_mode(args, mode):
    """Times every point of `mode`; returns the records and the GEMM worker's figures."""
    payloads, ready, peaks, gemm = {}, {}, {}, {GEMM: [], GEMM_TORCH: []}
    for group in rotation_groups(args, mode):
        if not group:
            continue
        print(f"{mode}: timing {', '.join(group)}", flush=True)
        group_payloads, group_ready, group_peaks = time_workers(args, group)
        for kind in gemm:
            gemm[kind] += group_payloads.pop(kind, [])
        payloads.update(group_payloads)
        ready.update(group_ready)
        peaks.update(group_peaks)
    records = [
        record_of(name, mode, [r["images_per_s"] for r in results], ready[name], peaks[name])
        for name, results in payloads.items()
    ]
    return records, gemm


def add_ratios(results):
    """ours/this at the same setting, and each framework's best against keras_vit's best."""
    by_point = {(r["mode"], r["framework"], r["setting"]): r for r in results}
    best = {}
    for r in results:
        key = (r["mode"], r["framework"])
        if key not in best or r["images_per_s"] > best[key]["images_per_s"]:
            best[key] = r
    for r in results:
        ours = by_point.get((r["mode"], "keras_vit", r["setting"]))
        r["ours_over_this"] = ours["images_per_s"] / r["images_per_s"] if ours else None
        ours_best = best.get((r["mode"], "keras_vit"))
        r["best_ours_over_this"] = (
            ours_best["images_per_s"] / r["images_per_s"] if ours_best else None
        )
        r["is_best_of_framework"] = best[(r["mode"], r["framework"])] is r
    return best


def auto_summary(args, results):
    """What `choose_precision` picks for keras_vit (measuring on CPU, as a run does), and how
    it fares against the fastest."""
    from keras_vit.runtime import precision
    from keras_vit.runtime.precision_probe import shape_from_kwargs

    shape = shape_from_kwargs(common.variant_arch(args.variant), args.image_size)
    choice = precision.choose_precision(shape.pop("hidden_dim"), **shape)
    label = choice.setting
    lines, summary = [f"auto: {choice.describe()}"], {"choice": choice.as_dict(), "modes": {}}
    for mode in sorted({r["mode"] for r in results}):
        ours = [r for r in results if r["mode"] == mode and r["framework"] == "keras_vit"]
        picked = [r for r in ours if r["setting"] == label]
        if not ours or not picked:
            continue
        fastest = max(ours, key=lambda r: r["images_per_s"])
        share = picked[0]["images_per_s"] / fastest["images_per_s"]
        summary["modes"][mode] = {"setting": label, "of_fastest": share}
        lines.append(
            f"  {mode}: auto = {label}, {picked[0]['images_per_s']:.2f} img/s, "
            f"{100 * share:.0f}% of the fastest setting ({fastest['setting']})"
        )
    return "\n".join(lines), summary


def markdown(header, rows):
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join(
        [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)]
    )


def percent(value):
    return "-" if value is None else f"{100 * value:.0f}%"


def ratio(value):
    return "-" if value is None else f"{value:.2f}x"


def format_tables(results, best):
    """Every point, then each framework at its best setting against keras_vit's best."""
    header = ["mode", "framework", "setting", "img/s (median)", "range", "peak RSS MiB"]
    header += ["model GFLOP/s", "of roof", "ours/this (same setting)"]
    rows = [
        [
            r["mode"],
            r["framework"],
            r["setting"],
            f"{r['images_per_s']:.2f}",
            f"{min(r['images_per_s_all']):.2f}-{max(r['images_per_s_all']):.2f}",
            f"{r['peak_rss_mb']:.0f}",
            f"{r['model_gflops_per_s']:.1f}",
            percent(r["utilisation"]),
            ratio(r["ours_over_this"]),
        ]
        for r in results
    ]
    best_rows = [
        [
            r["mode"],
            r["framework"],
            r["setting"],
            f"{r['images_per_s']:.2f}",
            percent(r["utilisation"]),
            ratio(r["best_ours_over_this"]),
        ]
        for r in best.values()
    ]
    best_header = ["mode", "framework", "best setting", "img/s", "of roof", "ours best/this best"]
    return markdown(header, rows) + "\n\n" + markdown(best_header, best_rows)


def load_average():
    """The 1-, 5- and 15-minute load averages (os.getloadavg), or None where unknown."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        common.exit_with_parent()
        return peers.serve(args)
    modes = ("infer", "train") if args.mode == "both" else (args.mode,)
    load_before = load_average()
    results, gemm_runs = [], {GEMM: [], GEMM_TORCH: []}
    for mode in modes:
        records, gemm = measure_mode(args, mode)
        results += records
        for kind, runs in gemm.items():
            gemm_runs[kind] += runs
    load_after = load_average()
    roofs = {
        kind: common.median([g["gemm_gflops"] for g in runs])
        for kind, runs in gemm_runs.items()
        if runs
    }
    roof = max(roofs.values()) if roofs else None
    host = common.host_record()
    common.add_derived(results, args.variant, args.image_size, roof)
    best = add_ratios(results)
    auto_text, auto = auto_summary(args, results)
    roof_text = ", ".join(f"{ROOF_NAMES[kind]} {value:.1f}" for kind, value in roofs.items())
    note = (
        f"ViT-{args.variant} @{args.image_size}, batch {args.batch_size}, "
        f"{args.repeats} repeats x {args.steps} steps, interleaved by {args.interleave}; "
        f"roof (best GEMM of the run: float32/bfloat16, XLA on/off; torch float32/bfloat16) "
        f"{f'{roof:.1f} GFLOP/s ({roof_text})' if roof else 'not measured'}; "
        f"load average {load_before} before, {load_after} after; host {host['cpu']}, "
        f"{host['cores']} cores, bfloat16 units: {', '.join(host['bfloat16_flags']) or 'none'}"
    )
    print(note)
    print(format_tables(results, best))
    print(auto_text)
    if args.json_path or args.results_path:
        config = {k: v for k, v in vars(args).items() if k not in ("worker", "sizes")}
        payload = {
            "config": config,
            "machine": {
                **host,
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "load_average_before": load_before,
                "load_average_after": load_after,
            },
            "roof_gflops": roof,
            "roof_by_framework_gflops": roofs,
            "gemm_runs": gemm_runs[GEMM],
            "gemm_runs_torch": gemm_runs[GEMM_TORCH],
            "results": results,
            "auto": auto,
        }
        write_outputs(args, payload)
    return 0


def write_outputs(args, payload):
    """The raw payload (`--json`) and/or its figures (`--results`)."""
    if args.json_path:
        common.write_json(args.json_path, payload)
        print(f"wrote {args.json_path}")
    if args.results_path:
        import throughput_figures

        ids = throughput_figures.update_results(
            args.results_path,
            payload,
            date=datetime.date.today().isoformat(),
            command=throughput_figures.command_of(payload["config"]),
        )
        print(f"wrote runs {', '.join(ids)} to {args.results_path}")


if __name__ == "__main__":
    sys.exit(main())
