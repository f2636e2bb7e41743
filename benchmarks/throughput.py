"""Images/second of keras_vit and its peers for inference and a training step, side by side.

For one variant, resolution, batch size, dtype policy and XLA setting, every framework
(keras_vit, keras-hub `ViTBackbone` + dense head, vit-keras `build_model`; peers only when
importable by `--python`) runs in its own subprocess, so peak memory is per framework and
per mode and import order does not matter. All workers build and warm up first; then the
parent asks them in turn for one timed repeat each, rotating the order every round, so that
the load drift of a shared machine hits every framework alike. The float32 GEMM peak is
measured the same way (its own worker, in the rotation), and model FLOP utilisation is the
analytic model FLOP rate (keras_vit.benchmarking; training = 3x forward) over that peak.

    python benchmarks/throughput.py --variant Ti/16 --batch-size 16 --json ti16.json
    python benchmarks/throughput.py --variant B/16 --batch-size 8 --mode infer

Prints one Markdown table (ours, each peer, ratio ours/peer, utilisation); writes JSON.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

GEMM = "gemm"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_model_arguments(parser)
    parser.add_argument("--dtype-policy", default="float32", help="Keras dtype policy")
    parser.add_argument("--no-xla", action="store_true", help="compile without XLA")
    parser.add_argument(
        "--xla-both",
        action="store_true",
        help="time every framework with and without XLA, interleaved in the same run",
    )
    parser.add_argument(
        "--frameworks",
        default=",".join(common.FRAMEWORKS),
        help="comma-separated subset of keras_vit,keras_hub,vit_keras (all)",
    )
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
        "--one-at-a-time",
        action="store_true",
        help="run the frameworks one after another instead of side by side (memory runs)",
    )
    parser.add_argument("--json", dest="json_path", help="write the results here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    unknown = set(args.frameworks) - set(common.FRAMEWORKS)
    if unknown:
        parser.error(f"unknown --frameworks {sorted(unknown)}; choose from {common.FRAMEWORKS}")
    counts = {"--steps": args.steps, "--repeats": args.repeats, "--warmup": args.warmup}
    common.check_model_arguments(parser, args, counts)
    args.sizes = () if args.gemm_sizes == "none" else tuple(map(int, args.gemm_sizes.split(",")))
    return args


# ---- worker side ------------------------------------------------------------------------


def worker_main(args):
    """One framework, mode and compiler (`--worker keras_vit:train:xla`, `...:noxla`) or the
    GEMM peak (`--worker gemm`)."""
    common.exit_with_parent()
    try:
        common.set_threads(args.threads)
        if args.worker == GEMM:
            common.gemm_gflops(min(args.sizes))  # import and warm up TF before READY

            def handle():
                best, per_size = common.gemm_peak(args.sizes, repeats=1, xla=True)
                return {"gemm_gflops": best, "per_size": per_size}

            common.serve(handle, {"framework": GEMM})
            return 0
        framework, mode, compiler = args.worker.split(":")
        if not common.peer_available(framework):
            raise ImportError(f"{framework} is not installed for {sys.executable}")
        import keras

        keras.config.set_dtype_policy(args.dtype_policy)
        model = common.build_model(framework, args.variant, args.image_size)
        step = common.make_step(
            model, mode, args.batch_size, args.image_size, xla=compiler == "xla"
        )
        start = time.perf_counter()
        for _ in range(args.warmup):
            step()
        ready = {
            "framework": framework,
            "params": int(model.count_params()),
            "warmup_s": time.perf_counter() - start,
        }

        def handle():
            seconds = common.time_call(step, args.steps)
            return {"images_per_s": args.steps * args.batch_size / seconds}

        common.serve(handle, ready)
        return 0
    except Exception as error:  # reported to the parent, which carries on without it
        common.report_error(error)
        return 1


# ---- parent side ------------------------------------------------------------------------


def worker_argv(args, worker):
    argv = [args.python, os.path.abspath(__file__), "--worker", worker]
    for name in ("variant", "image_size", "batch_size", "dtype_policy", "steps", "warmup"):
        argv += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    argv += ["--gemm-sizes", args.gemm_sizes or "none", "--threads", str(args.threads)]
    return argv + (["--no-xla"] if args.no_xla else [])


def start_workers(args, names):
    """Starts workers and waits for each to be ready; drops (and reports) the failed ones."""
    workers = {name: common.Worker(worker_argv(args, name)) for name in names}
    ready = {}
    for name, worker in list(workers.items()):
        try:
            ready[name] = worker.read("READY")
        except RuntimeError as error:
            print(f"skipping {name}: {str(error).strip().splitlines()[-1]}", flush=True)
            worker.close()
            del workers[name]
    return workers, ready


def run_rounds(workers, repeats):
    """`repeats` rounds, one timed repeat per worker each, order rotated every round."""
    names = list(workers)
    payloads = {name: [] for name in names}
    for round_index in range(repeats):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            payloads[name].append(workers[name].request("run"))
        print(f"  round {round_index + 1}/{repeats} done", flush=True)
    return payloads


def finish_workers(workers):
    """Closes every worker."""
    for worker in workers.values():
        worker.close()


def time_workers(args, names):
    """Starts `names`, times them in rotation; returns (payloads, ready, peak RSS) by name."""
    workers, ready = start_workers(args, names)
    try:
        payloads = run_rounds(workers, args.repeats) if workers else {}
        peaks = {name: workers[name].request("rss")["peak_rss_mb"] for name in workers}
    finally:
        finish_workers(workers)
    return payloads, ready, peaks


def measure_mode(args, mode, with_gemm):
    """Times every framework in `mode` (plus the GEMM worker); returns records, GEMM figures.

    With `--one-at-a-time` each framework runs alone (no interleaving; for the memory of
    big models, where several resident at once would not fit).
    """
    compilers = ("xla", "noxla") if args.xla_both else ("noxla" if args.no_xla else "xla",)
    names = [f"{f}:{mode}:{c}" for f in args.frameworks for c in compilers]
    names += [GEMM] if with_gemm else []
    print(f"{mode}: starting {', '.join(names)}", flush=True)
    payloads, ready, peaks = {}, {}, {}
    groups = [[name] for name in names] if args.one_at_a_time else [names]
    for group in groups:
        group_payloads, group_ready, group_peaks = time_workers(args, group)
        payloads.update(group_payloads)
        ready.update(group_ready)
        peaks.update(group_peaks)
    records, gemm = [], None
    for name, results in payloads.items():
        if name == GEMM:
            gemm = results
            continue
        rates = [r["images_per_s"] for r in results]
        framework, _, compiler = name.split(":")
        record = common.result_record_from(framework, mode, rates, ready[name])
        record["xla"] = compiler == "xla"
        record["peak_rss_mb"] = peaks[name]
        records.append(record)
    return records, gemm


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker_main(args)
    modes = ("infer", "train") if args.mode == "both" else (args.mode,)
    results, gemm_runs = [], []
    for index, mode in enumerate(modes):
        records, gemm = measure_mode(args, mode, with_gemm=bool(args.sizes) and index == 0)
        results += records
        gemm_runs += gemm or []
    peak = common.median([g["gemm_gflops"] for g in gemm_runs]) if gemm_runs else None
    common.add_derived(results, args.variant, args.image_size, peak)
    note = (
        f"ViT-{args.variant} @{args.image_size}, batch {args.batch_size}, {args.dtype_policy}, "
        f"XLA {'on and off' if args.xla_both else 'off' if args.no_xla else 'on'}, "
        f"{args.repeats} repeats x {args.steps} steps; "
        f"float32 GEMM peak {f'{peak:.1f} GFLOP/s' if peak else 'not measured'}"
    )
    print(common.format_results(results, note))
    if args.json_path:
        config = {k: v for k, v in vars(args).items() if k not in ("worker", "sizes")}
        payload = {
            "config": config,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "gemm_peak_gflops": peak,
            "gemm_runs": gemm_runs,
            "results": results,
        }
        common.write_json(args.json_path, payload)
        print(f"wrote {args.json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
