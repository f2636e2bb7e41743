"""The speed races on one loop: points timed in rotated rounds, one summary.

A point is (peer, mode, setting) of a workload (variant, image size, batch); a peer is a row
of `peers.PEERS`. Every verb times its points in rounds (`common.run_rounds`), each starting
one point later than the last, so that a drift of a shared machine's speed hits every point
alike; a point's figure is its median. The verbs are presets of one parser (`PRESETS`).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import sys
import time

from benchmarks.harness import common, peers

GEMMS = tuple(peers.ROOFS)  # the roof workers: TensorFlow's, torch's
ALL_FRAMEWORKS = tuple(name for name, peer in peers.PEERS.items() if peer.settings)
PRESETS = {  # each verb's defaults of the shared flags (the rest: `build_parser`)
    "run": dict(steps=3, repeats=5, warmup=2, gemm_sizes="1024,2048,4096",
                settings="float32+xla,mixed_bfloat16+xla,mixed_bfloat16",
                frameworks="keras_vit,keras_hub,vit_keras,timm"),
    "targets": dict(mode="train", steps=1, repeats=3, warmup=1, gemm_sizes="1024,2048",
                    settings="mixed_bfloat16,float32+xla,float32,mixed_bfloat16+xla",
                    frameworks="keras_vit,keras_hub,vit_keras,timm,keras_vit_torch",
                    timm_settings="bfloat16_autocast,float32,float32+compile"),
    "in-process": dict(mode="train", steps=2, repeats=10, warmup=2,
                       settings="float32,float32+xla", frameworks="keras_vit,keras_hub,vit_keras"),
    "scaling": dict(mode="train", steps=1, repeats=3, warmup=1),
    "ablation": dict(steps=3, repeats=5, warmup=2),
    "roof": dict(repeats=3, gemm_sizes="1024,2048,4096"),
}  # fmt: skip
MODES = {"in-process": ("infer", "train"), "scaling": ("train", "infer")}
WORKLOADS = "B/16:infer,S/16:train,Ti/16:train"
PEER_SETTINGS = ("mixed_bfloat16", "float32+xla")  # the Keras peers' in `targets`
# expected peak RSS of one point, GB (AMD EPYC run of 2026-12-02, rounded up); GEMM roofs ~1
POINT_GB = {("B/16", "infer"): 2.0, ("S/16", "train"): 3.7, ("Ti/16", "train"): 2.8}
AUTO_TARGET, PEER_TARGET = 0.90, 1.20
SHARE = "roof_share_for_target_over_timm"
RATIOS = ("auto_over_best", "ours_over_timm", "ours_over_keras_peer", "torch_backend_over_timm",
          "torch_backend_over_tensorflow")  # fmt: skip


def build_parser(verb):
    """The one parser: shared flags at `PRESETS[verb]`, and the few a verb adds."""
    preset = {"settings": "float32+xla", "frameworks": "keras_vit", "gemm_sizes": "none",
              "steps": 1, "repeats": 3, "warmup": 1, **PRESETS[verb]}  # fmt: skip
    parser = argparse.ArgumentParser(prog=f"bench.py {verb}", description=__doc__.split("\n")[0])
    modes = MODES.get(verb, ("infer", "train", "both"))
    common.add_model_arguments(parser, modes, preset.pop("mode", modes[-1]))
    add = parser.add_argument
    add("--settings", help="comma-separated POLICY or POLICY+xla (keras_vit, the Keras peers)")
    add("--timm-settings", default=",".join(peers.TIMM_SETTINGS), help="comma-separated, of "
        f"{', '.join(peers.SETTING_PARTS)}")  # fmt: skip
    add("--dtype-policy", help="with --no-xla: one setting, the older spelling of --settings")
    add("--no-xla", action="store_true", help="the setting of --dtype-policy without XLA")
    names = ["--frameworks", "--only"] if verb == "targets" else ["--frameworks"]
    add(*names, dest="frameworks", help=f"comma-separated, of {', '.join(ALL_FRAMEWORKS)}")
    add("--python", default=sys.executable, help="interpreter of the workers (this one)")
    add("--torch-python", help="interpreter of the torch-side peers and roof (--python)")
    add("--steps", type=int, help="steps per timed repeat")
    add("--repeats", "--rounds", dest="repeats", type=int, help="timed rounds")
    add("--warmup", type=int, help="untimed steps per point")
    add("--gemm-sizes", help="n of the n x n GEMM roof products, comma-separated, or none")
    add("--worker", help=argparse.SUPPRESS)
    add("--json", dest="json_path", help="write the raw figures here")
    if verb == "run":
        add("--interleave", choices=("framework", "all"), default="framework")
        add("--one-at-a-time", action="store_true", help="every point alone (memory runs)")
    if verb == "targets":
        add("--workloads", default=WORKLOADS, help=f"comma-separated VARIANT:MODE ({WORKLOADS})")
        add("--budget-s", type=float, default=420.0, help="seconds for all workloads (420)")
        add("--memory-gb", type=float, help="memory of a group of points (85%% of MemAvailable)")
        add("--quick", action="store_true", help="one round, fewer settings: a smoke run")
        out = os.path.join(common.ROOT, "benchmarks", "results", "targets")
        add("--out", default=out, help="no suffix")
    if verb == "scaling":
        add("--image-sizes", default="224,384,512", help="sizes at the base batch")
        add("--batch-sizes", default="1,4,16", help="batches at the base size")
        add("--base-image-size", type=int, default=224)
        add("--base-batch-size", type=int, default=4)
    parser.set_defaults(verb=verb, **preset)
    return parser


def parse_args(argv=None, verb="run"):
    """The arguments of `verb`; `parser.error` (exit 2, naming the value) before any work."""
    parser = build_parser(verb)
    args = parser.parse_args(argv)
    if getattr(args, "quick", False):
        args.repeats, args.settings = 1, "float32+xla,mixed_bfloat16"
        args.timm_settings = ",".join(args.timm_settings.split(",")[:2])
    if args.dtype_policy or args.no_xla:
        args.settings = (args.dtype_policy or "float32") + ("" if args.no_xla else "+xla")
    args.frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    unknown = sorted(set(args.frameworks) - set(ALL_FRAMEWORKS))
    if unknown:
        parser.error(f"unknown --frameworks {unknown}; choose from {ALL_FRAMEWORKS}")
    parses = {"settings": common.parse_setting, "timm_settings": peers.parse_timm_setting}
    for name, parse in parses.items():
        try:
            items = [parse(s) for s in getattr(args, name).split(",")]
        except ValueError as error:
            parser.error(f"--{name.replace('_', '-')}: {error}")
        setattr(args, "setting_list" if name == "settings" else "timm_list", items)
    args.torch_python = args.torch_python or args.python
    args.sizes = () if args.gemm_sizes == "none" else tuple(map(int, args.gemm_sizes.split(",")))
    common.check_model_arguments(parser, args, "steps", "repeats", "warmup")
    if verb == "scaling":
        check_scaling(parser, args)
    allowed = [*peers.KERAS_FRAMEWORKS, "timm"]
    if verb == "in-process" and (set(args.frameworks) - set(allowed) or "keras_vit" not in
                                 args.frameworks):  # fmt: skip
        parser.error(f"--frameworks must include keras_vit and name only {allowed}; got "
                     f"{args.frameworks}")  # fmt: skip
    if verb == "in-process" and {"timm", "keras_hub"} <= set(args.frameworks):
        parser.error("--frameworks: timm and keras_hub cannot share a process (torch's import of "
                     "triton crashed after keras-hub's): time them in separate runs")  # fmt: skip
    if verb == "targets":
        args.workload_list = parse_workloads(parser, args.workloads)
    return args


def check_scaling(parser, args):
    """Integer sizes and batches, multiples of the patch; a variant that names no size."""
    try:
        args.image_sizes = [int(s) for s in args.image_sizes.split(",") if s]
        args.batch_sizes = [int(s) for s in args.batch_sizes.split(",") if s]
    except ValueError:
        parser.error("--image-sizes and --batch-sizes take integers separated by commas")
    patch = common.variant_arch(args.variant)["patch_size"]  # known: `check_model_arguments` ran
    if "," not in args.variant and common.configs.resolve_model(args.variant).image_size:
        parser.error(f"--model {args.variant!r} names image size {args.image_size}: give the "
                     "plain variant: --image-sizes and --base-image-size set sizes")  # fmt: skip
    if any(s < patch or s % patch for s in [*args.image_sizes, args.base_image_size]):
        parser.error(f"every image size must be a positive multiple of the patch ({patch})")
    if min([*args.batch_sizes, args.base_batch_size]) < 1:
        parser.error("batch sizes must be >= 1")


def parse_workloads(parser, text: str) -> list:
    """[(variant, mode)] of `--workloads` ("Ti/16:train,B/16:infer"); parser.error naming the
    first item that is no VARIANT:MODE of a known variant and size, or repeated."""
    workloads = []
    for item in (item.strip() for item in text.split(",")):
        variant, _, mode = item.rpartition(":")
        try:
            if mode not in ("infer", "train") or not variant:
                raise ValueError("must be VARIANT:MODE with MODE infer or train, e.g. Ti/16:train")
            common.variant_image_size(variant)  # ValueError naming an unknown variant or size
            problem = "is given twice" if (variant, mode) in workloads else None
        except ValueError as error:
            problem = str(error)
        if problem:
            parser.error(f"--workloads {text!r}: {item!r} {problem}")
        workloads.append((variant, mode))
    return workloads


def workload_args(args, variant, image_size=None, batch_size=None):
    """`args` for one workload: its variant at `image_size` (or the size its name gives)."""
    size = image_size or common.variant_image_size(variant)
    return argparse.Namespace(**{**vars(args), "variant": variant, "image_size": size,
                                 "batch_size": batch_size or args.batch_size})  # fmt: skip


def worker_env(worker):
    """Environment variables a worker needs beyond the parent's."""
    return peers.PEERS[worker.split(":")[0]].env  # "PEER:MODE:POLICY:COMPILER"


def worker_argv(args, worker):
    """The command line of one point's worker process (`--worker NAME`)."""
    torch_side = peers.PEERS[worker.split(":")[0]].python == "torch"
    python = args.torch_python if torch_side else args.python
    argv = common.module_argv(python, "benchmarks.harness.race")
    argv += ["--worker", worker]
    argv += ["--model", args.variant]
    for name in ("image_size", "batch_size", "steps", "warmup"):
        argv += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    return argv + ["--gemm-sizes", args.gemm_sizes or "none"]


def time_points(args, points, deadline=None):
    """(payloads, ready, peak RSS) by key of `points` {key: (worker name, its args)}: started
    together, timed in rotated rounds (until `deadline`); a failed worker is left out, said why."""
    workers = {key: common.Worker(worker_argv(wargs, name), env=worker_env(name))
               for key, (name, wargs) in points.items()}  # fmt: skip
    ready, peaks, payloads = {}, {}, {}
    try:
        for key, worker in workers.items():
            try:
                ready[key] = worker.read("READY")
            except RuntimeError as error:  # closed with the others below
                print(f"skipping {key}: {str(error).strip().splitlines()[-1]}", flush=True)
        calls = {key: functools.partial(workers[key].request, "run") for key in ready}
        payloads = common.run_rounds(calls, args.repeats, deadline) if ready else {}
        for key in list(payloads):
            try:
                peaks[key] = workers[key].request("rss")["peak_rss_mb"]
            except (OSError, RuntimeError) as error:  # died after its last round
                print(f"  dropping {key}: the worker died: {error}", flush=True)
                del payloads[key]
    finally:
        for worker in workers.values():
            worker.close()
    return payloads, ready, peaks


def time_groups(args, groups, mode, wargs, deadline=None):
    """The records of `groups` (lists of worker names) of one mode, each group timed together
    (in its share of the time left to `deadline`), and {roof worker: its payloads}."""
    records, roofs = [], {kind: [] for kind in GEMMS}
    for index, group in enumerate(groups):
        print(f"{mode}: timing {', '.join(group)}", flush=True)
        left = deadline and (deadline - time.perf_counter()) / (len(groups) - index)
        points = {name: (name, wargs) for name in group}
        payloads, ready, peaks = time_points(args, points, left and time.perf_counter() + left)
        for kind in GEMMS:
            roofs[kind] += payloads.pop(kind, [])
        records += [record_of(n, mode, [p["images_per_s"] for p in runs], ready[n], peaks[n])
                    for n, runs in payloads.items()]  # fmt: skip
    return records, roofs


def time_rounds(steps, rounds, steps_per_point, warmup=0):
    """{point: [ms per step, one a round]} of in-process `steps` {point: step function}, each
    warmed up `warmup` steps first."""
    for step in steps.values():
        common.time_call(step, warmup)
    calls = {key: functools.partial(common.time_call, step, steps_per_point)
             for key, step in steps.items()}  # fmt: skip
    return {k: [1000 * s / steps_per_point for s in v]
            for k, v in common.run_rounds(calls, rounds).items()}  # fmt: skip


def record_of(name, mode, rates, ready, peak):
    """The result record of worker `name`, its setting labelled as the flags spell it."""
    framework, _, policy, compiler = name.split(":")
    return {
        "framework": framework, "mode": mode, "images_per_s": common.median(rates),
        "images_per_s_all": rates, "params": ready.get("params"),
        "warmup_s": ready.get("warmup_s"), "policy": policy, "xla": compiler == "xla",
        "compiler": compiler, "setting": peers.label(name), "peak_rss_mb": peak,
    }  # fmt: skip


def best_by(items, group, rate):
    """{group(item): the item of highest rate(item)}: each framework's best setting."""
    best = {}
    for item in items:
        if group(item) not in best or rate(item) > rate(best[group(item)]):
            best[group(item)] = item
    return best


def auto_choice(variant, image_size, refresh=False):
    """What "auto" (`choose_precision`) picks for the variant's shape (fresh probe: `refresh`)."""
    from keras_vit.runtime import precision_auto
    from keras_vit.runtime.precision_probe import shape_from_kwargs

    shape = shape_from_kwargs(common.variant_arch(variant), image_size)
    os.environ.update({"KERAS_VIT_PRECISION_PROBE": "refresh"} if refresh else {})
    try:
        return precision_auto.choose_precision(shape.pop("hidden_dim"), **shape)
    finally:
        if refresh:
            os.environ.pop("KERAS_VIT_PRECISION_PROBE", None)


def ratio(value, target=None, fmt="{:.2f}x"):
    met = "" if target is None or value is None else " (met)" if value >= target else " (NOT met)"
    return "-" if value is None else fmt.format(value) + met


def host_line(load_before, load_after):
    host = common.host_record()
    return (f"{host['cpu']}, {host['cores']} cores, bfloat16 units: "
            f"{', '.join(host['bfloat16_flags']) or 'none'}; {platform.platform()}; "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; load average "
            f"{load_before} before, {load_after} after")  # fmt: skip


def rotation_groups(args, mode):
    """The groups of worker names timed together, each with the GEMM workers when asked
    (TensorFlow's, and torch's when timm is timed)."""
    columns = [peers.points(f, mode, args.setting_list, args.timm_list) for f in args.frameworks]
    gemm = [GEMMS[0]] + ([GEMMS[1]] if "timm" in args.frameworks else []) if args.sizes else []
    if args.one_at_a_time:
        return [[name] for column in columns for name in column] + [gemm]
    groups = [sum(columns, [])] if args.interleave == "all" else columns
    return [group + gemm for group in groups]


def add_ratios(results):
    """ours/this at the same setting, and each framework's best against keras_vit's best."""
    point = {(r["mode"], r["framework"], r["setting"]): r for r in results}
    best = best_by(results, lambda r: (r["mode"], r["framework"]), lambda r: r["images_per_s"])
    for r in results:
        ours = point.get((r["mode"], "keras_vit", r["setting"]))
        ours_best = best.get((r["mode"], "keras_vit"))
        r["ours_over_this"] = ours["images_per_s"] / r["images_per_s"] if ours else None
        r["best_ours_over_this"] = ours_best and ours_best["images_per_s"] / r["images_per_s"]
        r["is_best_of_framework"] = best[(r["mode"], r["framework"])] is r
    return best


def auto_summary(args, results):
    """What `choose_precision` picks for keras_vit, and its share of the fastest setting."""
    choice = auto_choice(args.variant, args.image_size)
    lines, summary = [f"auto: {choice.describe()}"], {"choice": choice.as_dict(), "modes": {}}
    for mode in sorted({r["mode"] for r in results}):
        ours = [r for r in results if r["mode"] == mode and r["framework"] == "keras_vit"]
        picked = [r["images_per_s"] for r in ours if r["setting"] == choice.setting]
        if picked:
            fastest = max(ours, key=lambda r: r["images_per_s"])
            share = picked[0] / fastest["images_per_s"]
            summary["modes"][mode] = {"setting": choice.setting, "of_fastest": share}
            lines.append(f"  {mode}: auto = {choice.setting}, {picked[0]:.2f} img/s, {share:.0%} "
                         f"of the fastest setting ({fastest['setting']})")  # fmt: skip
    return "\n".join(lines), summary


def run_tables(results, best):
    """Every point, then each framework at its best setting against keras_vit's best."""
    header = ["mode", "framework", "setting", "img/s (median)", "range", "peak RSS MiB",
              "model GFLOP/s", "of roof", "ours/this (same setting)"]  # fmt: skip
    rows = [
        [r["mode"], r["framework"], r["setting"], f"{r['images_per_s']:.2f}",
         f"{min(r['images_per_s_all']):.2f}-{max(r['images_per_s_all']):.2f}",
         f"{r['peak_rss_mb']:.0f}", f"{r['model_gflops_per_s']:.1f}",
         ratio(r["utilisation"], fmt="{:.0%}"), ratio(r["ours_over_this"])] for r in results
    ]  # fmt: skip
    best_rows = [[*row[:4], row[7], ratio(r["best_ours_over_this"])]
                 for row, r in zip(rows, results, strict=True) if r in best.values()]  # fmt: skip
    best_header = ["mode", "framework", "best setting", "img/s", "of roof", "ours best/this best"]
    return common.markdown(header, rows) + "\n\n" + common.markdown(best_header, best_rows)


def run(args, argv):
    """`run`: times every point of every mode; prints the tables, writes --json/--results."""
    load_before, results, gemm = common.load_average(), [], {kind: [] for kind in GEMMS}
    for mode in ("infer", "train") if args.mode == "both" else (args.mode,):
        records, roofs = time_groups(args, filter(None, rotation_groups(args, mode)), mode, args)
        results += records
        for kind, runs in roofs.items():
            gemm[kind] += runs
    load_after = common.load_average()
    roofs = {k: common.median([g["gemm_gflops"] for g in runs]) for k, runs in gemm.items() if runs}
    roof, host = max(roofs.values(), default=None), common.host_record()
    common.add_derived(results, args.variant, args.image_size, roof)
    best = add_ratios(results)
    auto_text, auto = auto_summary(args, results)
    roof_text = ", ".join(f"{peers.ROOFS[kind]} {value:.1f}" for kind, value in roofs.items())
    roof_text = f"{roof:.1f} GFLOP/s ({roof_text})" if roof else "not measured"
    print(f"ViT-{args.variant} @{args.image_size}, batch {args.batch_size}, {args.repeats} "
          f"repeats x {args.steps} steps, interleaved by {args.interleave}; roof (the run's best "
          f"GEMM) {roof_text}; host {host_line(load_before, load_after)}\n"
          f"{run_tables(results, best)}\n{auto_text}")  # fmt: skip
    config = {k: v for k, v in vars(args).items() if k not in ("worker", "sizes", "verb")}
    machine = {**host, "cpus": os.cpu_count(), "platform": platform.platform(),
               "load_average_before": load_before, "load_average_after": load_after}  # fmt: skip
    payload = {"config": config, "machine": machine, "roof_gflops": roof,
               "roof_by_framework_gflops": roofs, "gemm_runs": gemm[GEMMS[0]],
               "gemm_runs_torch": gemm[GEMMS[1]], "results": results, "auto": auto}  # fmt: skip
    if args.json_path:  # the documents' figures: `bench.py results import`
        common.write_json(args.json_path, payload)
        print(f"wrote {args.json_path}")
    return 0


def target_groups(args, variant, mode):
    """The worker names of one workload, cut into groups whose expected peak RSS fits in
    `--memory-gb`: the roofs, then each framework's settings, its likeliest fastest first,
    interleaved so that those share the first group."""
    keras_peers = [common.parse_setting(s) for s in PEER_SETTINGS[: 1 if args.quick else 2]]
    columns = [
        peers.points(f, mode, keras_peers if f in peers.KERAS_PEERS else args.setting_list,
                     args.timm_list)
        for f in args.frameworks
    ]  # fmt: skip
    torch_side = {"timm", "keras_vit_torch"} & set(args.frameworks)
    rows = max(map(len, columns), default=0)
    names = list(GEMMS[: 1 + bool(torch_side)])
    names += [c[i] for i in range(rows) for c in columns if i < len(c)]
    memory_gb = args.memory_gb or 0.85 * memory_available_gb()
    groups, used = [[]], 0.0
    for name in names:
        need = 1.0 if name in GEMMS else POINT_GB.get((variant, mode), 3.7)
        if groups[-1] and used + need > memory_gb:
            groups, used = groups + [[]], 0.0
        groups[-1].append(name)
        used += need
    return groups


def memory_available_gb():
    """MemAvailable of /proc/meminfo in GB (infinite where it cannot be read)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            return next(int(line.split()[1]) / 1e6 for line in handle if "MemAvailable:" in line)
    except (OSError, StopIteration):
        return float("inf")


def roof_share_needed(variant, mode, timm, roofs):
    """The share of the run's roof that keras_vit's own products (`keras_vit_step_gflops`)
    would need, over the whole step with nothing else in it, for PEER_TARGET x timm's best
    (`timm`: (setting, img/s)): above 1, out of reach on this host."""
    if not timm or not roofs:
        return None
    gflop = common.keras_vit_step_gflops(variant, common.variant_image_size(variant), mode)
    return gflop * timm[1] * PEER_TARGET / max(roofs.values())


def summarise(variant, mode, records, roofs, choice):
    """The target ratios of one workload from its records."""
    rate = {(r["framework"], r["setting"]): r["images_per_s"] for r in records}
    best = {f: (s, rate[(f, s)]) for f, (_, s) in best_by(rate, lambda k: k[0], rate.get).items()}
    ours, on_torch, timm = (best.get(f) for f in ("keras_vit", "keras_vit_torch", "timm"))
    auto = rate.get(("keras_vit", choice.setting))
    keras_peers = [best[p] + (p,) for p in peers.KERAS_PEERS if p in best]
    peer = max(keras_peers, key=lambda item: item[1]) if keras_peers else None

    def of(name):
        return {s: v for (f, s), v in rate.items() if f == name}

    def over(a, b):
        return a[1] / b[1] if a and b else None

    return {
        "workload": f"{variant} {mode}", "keras_vit": of("keras_vit"), "timm": of("timm"),
        "keras_peers": {f"{f} {s}": v for (f, s), v in rate.items() if f in peers.KERAS_PEERS},
        "best": {f: {"setting": s, "images_per_s": v} for f, (s, v) in best.items()},
        "auto": {"setting": choice.setting, "images_per_s": auto, "reason": choice.reason},
        "auto_over_best": auto / ours[1] if auto and ours else None,
        "ours_over_timm": over(ours, timm), "keras_vit_torch": of("keras_vit_torch"),
        "torch_backend_over_timm": over(on_torch, timm),
        "torch_backend_over_tensorflow": over(on_torch, ours),
        "ours_over_keras_peer": over(ours, peer),
        "best_keras_peer": f"{peer[2]} {peer[0]}" if peer else None, "roof_gflops": roofs,
        SHARE: roof_share_needed(variant, mode, timm, roofs),
    }  # fmt: skip


def share_text(share):
    return ratio(share, fmt="{:.0%}") + " (past the roof)" * ((share or 0) > 1)


def targets_table(host, summaries):
    """The targets' Markdown table, the host above it."""
    header = ["workload", "keras_vit img/s by setting", "auto", "auto/best", "timm best",
              "ours/timm", "best Keras peer", "ours/peer", "keras_vit on the PyTorch backend",
              "torch backend/timm", "roof GFLOP/s", "roof share 1.2x timm needs"]  # fmt: skip
    rows = []
    for s in summaries:
        timm, peer = s["best"].get("timm"), s["best_keras_peer"]
        listed = lambda values, digits=2: ", ".join(  # noqa: E731
            f"{k} {v:.{digits}f}" for k, v in values.items()) or "-"  # fmt: skip
        rows.append([
            s["workload"], listed(s["keras_vit"]), s["auto"]["setting"],
            ratio(s["auto_over_best"], AUTO_TARGET),
            f"{timm['setting']} {timm['images_per_s']:.2f}" if timm else "-",
            ratio(s["ours_over_timm"], PEER_TARGET),
            f"{peer} {s['keras_peers'][peer]:.2f}" if peer else "-",
            ratio(s["ours_over_keras_peer"], PEER_TARGET), listed(s["keras_vit_torch"]),
            ratio(s["torch_backend_over_timm"], PEER_TARGET), listed(s["roof_gflops"], 0),
            share_text(s[SHARE]),
        ])  # fmt: skip
    return f"Host: {host}\n\n" + common.markdown(header, rows) + "\n"


def targets(args, argv):
    """`targets`: every workload in turn, in its share of `--budget-s`; after each, `--out`
    .json (figures: each workload's `RATIOS`, the raw records beside) and .md."""
    from benchmarks import figures

    started, load_before = time.perf_counter(), common.load_average()
    records, summaries, values = [], [], {}
    for index, (variant, mode) in enumerate(args.workload_list):
        print(f"{variant} {mode}: starting the points", flush=True)
        wargs = workload_args(args, variant)
        deadline = started + args.budget_s / len(args.workload_list) * (index + 1)
        more, gemm = time_groups(args, target_groups(args, variant, mode), mode, wargs, deadline)
        roofs = {peers.ROOFS[k]: max(p["gemm_gflops"] for p in v) for k, v in gemm.items() if v}
        common.add_derived(more, variant, wargs.image_size, max(roofs.values(), default=None))
        choice = auto_choice(variant, wargs.image_size, refresh=True)  # this run's load
        summary = summarise(variant, mode, more, roofs, choice)
        records, summaries = records + more, summaries + [summary]
        key = f"{variant}_{mode}".replace("/", "").lower()
        values.update({f"{key}_{n}": figures.fig(round(summary[n], 3), "{:.2f}x")
                       for n in RATIOS if summary[n] is not None})  # fmt: skip
        elapsed = time.perf_counter() - started
        host = f"{host_line(load_before, common.load_average())}; {elapsed:.0f} s"
        print(f"  {summary['workload']}: {elapsed:.0f} s so far", flush=True)
        config = {k: v for k, v in vars(args).items() if k != "workload_list"}
        figures.write_results(
            args.out + ".json", {"workloads": len(summaries), **values}, notes=host,
            command="python -m benchmarks.bench targets " + " ".join(argv),
            about="CPU targets: auto over the fastest keras_vit setting, keras_vit best over "
            "timm best and over the best Keras peer, batch 16 at 224 or the size the variant's "
            f"name gives (workloads: {', '.join(s['workload'] for s in summaries)})",
            extra={"host": host, "machine_record": common.host_record(), "config": config,
                   "summaries": summaries, "results": records},
        )  # fmt: skip
        with open(args.out + ".md", "w", encoding="utf-8") as handle:
            handle.write(targets_table(host, summaries))
        print(f"wrote {args.out}.json and {args.out}.md")
    print(targets_table(host, summaries))
    return 0


def build_steps(args, frameworks):
    """{(framework, setting): step function}, each built as its worker builds it, warmed up
    (timm: the setting's precision, `torch.compile` for +xla)."""
    import keras

    steps = {}
    for framework in frameworks:
        for policy, xla in args.setting_list:
            keras.utils.set_random_seed(0)
            if framework == "timm":
                peers.set_threads(os.cpu_count() or 0)
            compiler = ("compile", "eager") if framework == "timm" else ("xla", "noxla")
            build = peers.PEERS[framework].build
            _, step = build(args, framework, args.mode, policy, compiler[not xla])
            common.time_call(step, args.warmup)
            steps[(framework, common.setting_label(policy, xla))] = step
    keras.config.set_dtype_policy("float32")
    return steps


def best_settings(times, frameworks):
    """{framework: its setting of lowest median ms per step}."""
    best = best_by(times, lambda k: k[0], lambda k: -common.median(times[k]))
    return {framework: best[framework][1] for framework in frameworks}


def ours_over_peers(times, best):
    """{peer: median over rounds of peer ms / keras_vit ms}, each at its best setting."""
    ours = times[("keras_vit", best["keras_vit"])]
    return {peer: common.median([t / m for m, t in zip(ours, times[(peer, s)], strict=True)])
            for peer, s in best.items() if peer != "keras_vit"}  # fmt: skip


def in_process(args, argv):
    """`in-process`: the points in this process; the table, the ratios, --json."""
    reasons = {f: peers.import_problem(*peers.PEERS[f].modules) for f in args.frameworks}
    frameworks = [f for f in args.frameworks if reasons[f] is None]
    for missing in sorted(set(args.frameworks) - set(frameworks)):
        print(f"{missing} does not import here ({reasons[missing]}): skipped", flush=True)
    started, load_before = time.strftime("%Y-%m-%d %H:%M:%S %Z"), common.load_average()
    times = time_rounds(build_steps(args, frameworks), args.repeats, args.steps)
    best = best_settings(times, frameworks)
    ratios = ours_over_peers(times, best)
    print(f"{args.variant} @{args.image_size}, batch {args.batch_size}, {args.mode}: "
          f"{args.repeats} rounds x {args.steps} steps per point, one process")  # fmt: skip
    rows = [
        [f, s + (" (best)" if best[f] == s else ""), f"{common.median(v):.1f}",
         f"{1000 * args.batch_size / common.median(v):.2f}", f"{min(v):.0f}-{max(v):.0f}"]
        for (f, s), v in times.items()
    ]  # fmt: skip
    header = ["framework", "setting", "ms per step (median)", "img/s", "range ms"]
    print(common.markdown(header, rows))
    for peer, value in ratios.items():
        print(f"keras_vit ({best['keras_vit']}) / {peer} ({best[peer]}): {value:.3f}x "
              "(median of per-round ratios)")  # fmt: skip
    if args.json_path:
        common.write_json(args.json_path, {
            "command": "python -m benchmarks.bench in-process " + " ".join(argv),
            "measured": started, "load_before": load_before,
            "load_after": common.load_average(), "host": common.host_record(),
            "ms_per_step": {f"{f}:{s}": v for (f, s), v in times.items()},
            "best_setting": best, "keras_vit_over_peer": ratios,
            "skipped": {name: reason for name, reason in reasons.items() if reason},
        })  # fmt: skip
    return 0


def scaling_points(args):
    """The (image size, batch size) points: sizes at the base batch, batches at the base size."""
    chosen = [(size, args.base_batch_size) for size in args.image_sizes]
    return list(dict.fromkeys(chosen + [(args.base_image_size, b) for b in args.batch_sizes]))


def scaling(args, argv):
    """`scaling`: one keras_vit worker a point, timed together; a table, --json."""
    (name,) = peers.points("keras_vit", args.mode, args.setting_list[:1], [])
    points = {f"{size}px/b{batch}": (name, workload_args(args, args.variant, size, batch))
              for size, batch in scaling_points(args)}  # fmt: skip
    payloads, ready, peaks = time_points(args, points)
    arch, records = common.variant_arch(args.variant), []
    for key, runs in payloads.items():  # a point whose worker died: said so, left out
        size, batch = points[key][1].image_size, points[key][1].batch_size
        rows, columns = common.token_grid(arch, size)  # a hybrid's: of its ResNet feature map
        r = record_of(name, args.mode, [p["images_per_s"] for p in runs], ready[key], peaks[key])
        gflops = common.model_gflops(args.variant, size, args.mode)
        records.append({**r, "image_size": size, "batch_size": batch, "gflops_per_image": gflops,
                        "tokens": rows * columns + 1, "step_s": batch / r["images_per_s"],
                        "model_gflops_per_s": gflops * r["images_per_s"]})  # fmt: skip
    print(f"ViT-{args.variant} {args.mode} step, {args.settings}, median of {args.repeats}")
    header = ["image", "batch", "tokens", "step s", "ms/image", "GFLOP/image", "GFLOP/s", "RSS MiB"]
    print(common.markdown(header, [
        [r["image_size"], r["batch_size"], r["tokens"], f"{r['step_s']:.3f}",
         f"{1000 / r['images_per_s']:.1f}", f"{r['gflops_per_image']:.2f}",
         f"{r['model_gflops_per_s']:.1f}", f"{r['peak_rss_mb']:.0f}"] for r in records
    ]))  # fmt: skip
    if args.json_path:
        config = {k: v for k, v in vars(args).items() if k != "verb"}
        common.write_json(args.json_path, {"config": config, "results": records})
        print(f"wrote {args.json_path}")
    return 0


def ablation_pair(variant, image_size):
    """(shortcut, full, largest logit difference): the classifier whose last block computes
    only the class token, and the same weights with a full last block (as the peers)."""
    import keras
    import numpy as np

    from keras_vit.layers import TokenPooling
    from keras_vit.model.vit import ViT

    arch = common.variant_arch(variant)
    shortcut = ViT(**arch, image_size=image_size, num_classes=1000, name="class_token_only")
    head = shortcut.get_layer("head")  # zero-initialised; random, so the check below bites
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.02, head.kernel.shape))
    body = ViT(**arch, image_size=image_size, include_top=False, return_sequence=True)
    pooled = TokenPooling("token", name="pool")(body.output)
    logits = keras.layers.Dense(1000, dtype="float32", name="head")(pooled)
    full = keras.Model(body.input, logits, name="full_last_block")
    full.set_weights(shortcut.get_weights())
    images = np.random.default_rng(1).uniform(-1, 1, (2, image_size, image_size, 3))
    outputs = [model.predict(images.astype("float32"), verbose=0) for model in (shortcut, full)]
    return shortcut, full, float(np.abs(outputs[0] - outputs[1]).max())


def ablation(args, argv):
    """`ablation`: logits compared, then both models timed in rotated rounds per mode."""
    shortcut, full, diff = ablation_pair(args.variant, args.image_size)
    print(f"{args.variant} @{args.image_size}: max logit difference {diff:.2e}", flush=True)
    if diff > 1e-4:
        sys.exit("the two models disagree; not timing them")
    for mode in ("infer", "train") if args.mode == "both" else (args.mode,):
        xla = args.setting_list[0][1]
        steps = {m.name: common.make_step(m, mode, args.batch_size, args.image_size, xla=xla)
                 for m in (shortcut, full)}  # fmt: skip
        times = time_rounds(steps, args.repeats, args.steps, args.warmup)
        rates = {k: [1000 * args.batch_size / ms for ms in v] for k, v in times.items()}
        medians = {name: common.median(values) for name, values in rates.items()}
        for name, values in rates.items():
            figures = ", ".join(f"{v:.2f}" for v in values)
            print(f"{mode:5s} {name:16s} {medians[name]:8.2f} img/s  ({figures})")
        value = medians["class_token_only"] / medians["full_last_block"]
        print(f"{mode:5s} class_token_only / full_last_block = {value:.3f}x", flush=True)
    return 0


def roof(args, argv):
    """`roof`: the GEMM roof alone, TensorFlow's (float32 and bfloat16, XLA on and off) and,
    where it imports, torch's."""
    roofs = {"TensorFlow": common.gemm_roof(args.sizes, args.repeats)}
    if peers.import_problem("torch") is None:
        roofs["torch"] = peers.gemm_roof(args.sizes, args.repeats)
    for engine, (best, figures) in roofs.items():
        cells = "; ".join(f"{k}: {', '.join(f'{n} {v:.1f}' for n, v in f.items())}"
                          for k, f in figures.items())  # fmt: skip
        print(f"{engine}: best {best:.1f} GFLOP/s ({cells})")
    return 0


def main(argv=None, verb="run"):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv, verb)
    if args.worker:
        common.exit_with_parent()
        return peers.serve(args)
    verbs = {"run": run, "targets": targets, "in-process": in_process, "scaling": scaling,
             "ablation": ablation, "roof": roof}  # fmt: skip
    return verbs[verb](args, argv)


if __name__ == "__main__":
    sys.exit(main())
