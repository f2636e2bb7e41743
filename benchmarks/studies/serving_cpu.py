"""Study: CPU serving of every export format, batch 1 and 32, beside timm's own ONNX export.

Each model (`default`: the `keras-vit train` model, a ResNet-stem hybrid at 28 px, 10
classes; `B/16`: ViT-B/16 at 224 px, 1000 classes; weights random, the zero-initialised head
and biases drawn too) is written by `keras_vit.export_formats.export_model` as a TF
SavedModel, ONNX, LiteRT and OpenVINO artifact in float32 and in int8: Keras' int8
(`keras.Model.quantize`) for SavedModel and ONNX, NNCF's int8 weight compression for OpenVINO
(what `export_model(..., "openvino", quantize="int8")` writes, compared with the float Keras
model); each export checks its logits in its own runtime (the largest difference and the
probe's top-1 agreement are recorded). LiteRT's own dynamic-range int8 (the converter's
`Optimize.DEFAULT` on the same float graph, a different scheme from Keras' int8) stands in
for LiteRT int8, compared with the float Keras logits.

The artifacts are then loaded in their runtimes in this one process and timed in rounds, the
runtimes' order rotating every round (on a shared host the ratios within a run are fair; the
absolute figures move with the load): `--warmup` untimed calls, then up to `--iterations`
timed calls per point, fewer where a point's calls would pass `--point-budget-s` (the counts
are recorded). Per point: img/s (images / total time of the timed calls), p50 and p99 latency
of a call (ms). Each runtime uses every core of the process; onnxruntime's threads do not spin
between calls (its default spinning would take the cores from the runtime timed next).

The peer is timm's `vit_base_patch16_224` written by timm's own `timm.utils.onnx.onnx_export`
(`--peer-onnx`, made by `benchmarks/studies/timm_onnx_peer.py` in an environment with timm),
served by the same onnxruntime; its input is the normalised NCHW batch timm takes.

    python -m benchmarks.bench serving --peer-onnx timm_b16.onnx --results \
        benchmarks/results/serving_cpu.json

`--merge` adds a run of some points (`--runtimes`, `--precisions`, `--skip`) to an existing
`--results` file: a point it measures replaces the file's, the others stay, and each row and
export names its run (`runs`: every run's command, date, notes, load averages and wall time).
"""

from __future__ import annotations

import datetime
import gc
import json
import logging
import os
import sys
import tempfile
import time

from benchmarks.studies import report

logger = logging.getLogger(__name__)

MODELS = ("default", "B/16")
SLUGS = {"default": "default", "B/16": "b16"}
RUNTIMES = ("saved_model", "onnx", "litert", "openvino")
PRECISIONS = ("float32", "int8")
PEER = "timm_onnx"
NOT_MEASURED: dict = {}
"""{(runtime, precision): why} of points the study skips (none at present)."""


def parse_args(argv=None):
    parser = report.parser(__doc__, "serving_cpu.json")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--runtimes", nargs="+", default=list(RUNTIMES), choices=RUNTIMES)
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument(
        "--skip", nargs="+", default=[], metavar="RUNTIME:PRECISION",
        help="points not exported or timed (recorded as skipped), e.g. onnx:int8",
    )  # fmt: skip
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32], help="(1 32)")
    parser.add_argument("--iterations", type=int, default=30, help="timed calls a point (30)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls a point (2)")
    parser.add_argument(
        "--point-budget-s", type=float, default=30.0, help="fewer calls past this (30)"
    )
    parser.add_argument("--min-iterations", type=int, default=3, help="(3)")
    parser.add_argument("--peer-onnx", help="timm's ViT-B/16 ONNX file (timm_onnx_peer.py)")
    parser.add_argument("--peer-notes", default="", help="how the peer file was made")
    parser.add_argument(
        "--merge", action="store_true",
        help="keep the points of the --results file this run does not measure (each row and "
        "export names its run; the file lists every run's command and load averages)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    report.at_least(parser, args, "iterations", "min_iterations")
    points = {f"{runtime}:{precision}" for runtime in RUNTIMES for precision in PRECISIONS}
    if set(args.skip) - points:
        parser.error(f"--skip takes RUNTIME:PRECISION of {sorted(points)}. Received: {args.skip}")
    if args.merge and not args.results:
        parser.error("--merge merges into the --results file: give --results")
    if any(batch < 1 for batch in args.batches):
        parser.error(f"--batches must be positive ints. Received: {args.batches}")
    return args


def build(name: str):
    """The model `name` of `MODELS` with random weights (every all-zero variable drawn)."""
    import keras
    import numpy as np

    from benchmarks.harness import common
    from keras_vit.train import training

    keras.utils.set_random_seed(0)
    if name == "default":
        model = training.TrainConfig().build(num_classes=10, channels=1)
    else:
        model = common.build_model(name, 224, 1000)
    rng = np.random.default_rng(0)
    for variable in model.weights:
        value = keras.ops.convert_to_numpy(variable)
        if value.size and not np.any(value):
            variable.assign(rng.normal(0.0, 0.02, value.shape).astype(value.dtype))
    return model


def export_all(model, folder: str, runtimes=RUNTIMES, precisions=PRECISIONS, skip=()) -> dict:
    """{(runtime, precision): {"path", "max_difference", ...} or {"skipped": why}}."""
    from keras_vit import export_formats

    done = {}
    for runtime in runtimes:
        for precision in precisions:
            key, target = (runtime, precision), os.path.join(folder, f"{runtime}_{precision}")
            start = time.perf_counter()
            if f"{runtime}:{precision}" in skip:
                done[key] = {"skipped": "not run: left out of this run (--skip)"}
            elif key in NOT_MEASURED:
                done[key] = {"skipped": NOT_MEASURED[key]}
            elif runtime == "litert" and precision == "int8":
                done[key] = litert_dynamic_range(model, target)
            else:
                quantize = None if precision == "float32" else precision
                made = export_formats.export_model(model, target, runtime, quantize=quantize)
                done[key] = {"path": made.path, "max_difference": made.max_difference,
                             "probe_top1_agreement": made.top1_agreement,
                             "reference": reference(runtime, precision)}  # fmt: skip
            done[key]["export_s"] = round(time.perf_counter() - start, 1)
            print(f"exported {runtime} {precision}: {done[key]}", flush=True)
    return done


def reference(runtime: str, precision: str) -> str:
    """The Keras model an export's logits are compared with."""
    if precision == "float32" or runtime in ("openvino", "litert"):
        return "Keras float32"
    return "Keras int8 (keras.Model.quantize)"


def litert_dynamic_range(model, folder: str) -> dict:
    """LiteRT's dynamic-range int8 (`Optimize.DEFAULT`) of the float serving graph; its
    largest logit difference to the float Keras model and top-1 agreement on a probe."""
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_vit import export_formats
    from keras_vit.kernels import dispatch

    size = tuple(model.inputs[0].shape[1:3])
    served = export_formats.serving_model(model, size)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.tflite")
    probe = export_formats.probe_images(size, served.inputs[0].shape[3], 5)
    with dispatch.portable_kernels():
        served(probe[:1])
        served.export(path, format="litert", verbose=False,
                      optimizations=[tf.lite.Optimize.DEFAULT])  # fmt: skip
    expected = keras.ops.convert_to_numpy(served(probe, training=False))
    got = export_formats.run_litert(path, probe)
    return {
        "path": path, "max_difference": float(np.abs(got - expected).max()),
        "max_abs_logit": float(np.abs(expected).max()),
        "probe_top1_agreement": float((got.argmax(-1) == expected.argmax(-1)).mean()),
        "reference": reference("litert", "int8"),
        "scheme": "LiteRT dynamic-range int8 (Optimize.DEFAULT): int8 weights, activations "
        "quantized per call by the kernels",
    }  # fmt: skip


def runner(runtime: str, path: str, batch: int):
    """A function of a float32 batch running `path` in `runtime` (loaded once, here)."""
    cores = os.cpu_count() or 1
    if runtime == "saved_model":
        import tensorflow as tf

        from keras_vit.export import SERVING_SIGNATURE

        signature = tf.saved_model.load(path).signatures[SERVING_SIGNATURE]
        return lambda x: signature(images=tf.constant(x))["logits"].numpy()
    if runtime in ("onnx", PEER):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = cores
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        return lambda x: session.run(None, {name: x})[0]
    if runtime == "litert":
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_path=path, num_threads=cores)
        source = interpreter.get_input_details()[0]
        output = interpreter.get_output_details()[0]["index"]
        shape = [batch, *source["shape"][1:]]
        interpreter.resize_tensor_input(source["index"], shape)
        interpreter.allocate_tensors()

        def run(x):
            interpreter.set_tensor(source["index"], x)
            interpreter.invoke()
            return interpreter.get_tensor(output)

        return run
    import openvino

    compiled = openvino.Core().compile_model(
        path, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": cores}
    )
    return lambda x: compiled(x)[compiled.outputs[0]]


def time_points(points: dict, inputs: dict, args) -> dict:
    """{point: {"latencies_ms": [...]}}: warm-up, then rounds over the points in a rotating
    order, each point stopping at its iteration count."""
    import numpy as np

    counts, latencies = {}, {point: [] for point in points}
    for point, run in points.items():
        start = time.perf_counter()
        for _ in range(args.warmup):
            run(inputs[point])
        each = (time.perf_counter() - start) / max(1, args.warmup)
        fit = int(args.point_budget_s / max(each, 1e-9))
        counts[point] = max(args.min_iterations, min(args.iterations, fit))
    order = list(points)
    for round_index in range(max(counts.values())):
        shift = round_index % len(order)
        for point in order[shift:] + order[:shift]:
            if len(latencies[point]) < counts[point]:
                start = time.perf_counter()
                points[point](inputs[point])
                latencies[point].append(1000.0 * (time.perf_counter() - start))
    rows = {}
    for point, times in latencies.items():
        batch = inputs[point].shape[0]
        values = np.array(times)
        rows[point] = {
            "iterations": len(times), "warmup": args.warmup,
            "img_s": round(batch * len(times) / (values.sum() / 1000.0), 2),
            "p50_ms": round(float(np.percentile(values, 50)), 3),
            "p99_ms": round(float(np.percentile(values, 99)), 3),
        }  # fmt: skip
    return rows


def measure_model(name: str, args, folder: str) -> dict:
    """Exports `name` in every format and times them (and the peer for B/16)."""
    import numpy as np

    model = build(name)
    size, channels = tuple(model.inputs[0].shape[1:3]), model.inputs[0].shape[3]
    loads = [load_point(f"{name} start")]
    artifacts = export_all(model, os.path.join(folder, SLUGS[name]), args.runtimes,
                           args.precisions, args.skip)  # fmt: skip
    loads.append(load_point(f"{name} exported"))
    del model
    gc.collect()
    rng = np.random.default_rng(1)
    rows = []
    for batch in args.batches:
        pixels = rng.uniform(0, 255, (batch, *size, channels)).astype(np.float32)
        points, inputs = {}, {}
        for (runtime, precision), made in artifacts.items():
            if "path" in made:
                points[(runtime, precision)] = runner(runtime, made["path"], batch)
                inputs[(runtime, precision)] = pixels
        if name == "B/16" and args.peer_onnx:
            points[(PEER, "float32")] = runner(PEER, args.peer_onnx, batch)
            inputs[(PEER, "float32")] = rng.standard_normal((batch, 3, 224, 224), np.float32)
        timed = time_points(points, inputs, args)
        for (runtime, precision), figures in timed.items():
            rows.append({"model": name, "runtime": runtime, "precision": precision,
                         "batch": batch, **figures})  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
        points.clear()
        gc.collect()
        loads.append(load_point(f"{name} batch {batch} timed"))
    exports = [{"model": name, "runtime": r, "precision": p,
                **{key: value for key, value in made.items() if key != "path"}}
               for (r, p), made in artifacts.items()]  # fmt: skip
    return {"rows": rows, "exports": exports, "load_averages": loads}


def load_point(when: str) -> dict:
    """`{"when", "load_average"}`: the host's 1-, 5- and 15-minute load averages now."""
    from benchmarks.harness import common

    return {"when": when, "load_average": common.load_average()}


def figure_values(rows: list[dict], exports: list[dict], peer_note: str | None) -> dict:
    """`MODEL_RUNTIME_PRECISION_bBATCH_METRIC` per timed point and
    `MODEL_RUNTIME_PRECISION_max_difference` per export (or its reason for none)."""
    forms = {"img_s": "{:.1f}", "p50_ms": "{:.1f}", "p99_ms": "{:.1f}", "iterations": "{}"}
    values = {}
    for row in rows:
        stem = f"{SLUGS[row['model']]}_{row['runtime']}_{row['precision']}_b{row['batch']}"
        values |= {f"{stem}_{key}": report.fig(row[key], form) for key, form in forms.items()}
    for made in exports:
        stem = f"{SLUGS[made['model']]}_{made['runtime']}_{made['precision']}"
        if "max_difference" in made:
            values[f"{stem}_max_difference"] = report.fig(made["max_difference"], "{:.1e}")
            if "probe_top1_agreement" in made:
                agreement = made["probe_top1_agreement"]
                values[f"{stem}_probe_top1_agreement"] = report.fig(agreement, "{:.0%}")
        else:
            values[f"{stem}_max_difference"] = report.fig(made["skipped"], "{}")
    if peer_note:
        values["b16_timm_onnx_note"] = report.fig(peer_note, "{}")
    return values


def point_key(entry: dict) -> tuple:
    """(model, runtime, precision) of an export, and the batch too of a timed row."""
    point = (entry["model"], entry["runtime"], entry["precision"])
    return (*point, entry["batch"]) if "batch" in entry else point


def file_runs(existing: dict) -> tuple[list, list, list]:
    """(runs, rows, exports) of a results file; a file of one run without `runs` becomes run 1
    (its command, date, notes, load averages and wall time)."""
    if not existing:
        return [], [], []
    if "runs" in existing:
        return existing["runs"], existing["rows"], existing["exports"]
    measured = existing.get("measured", {})
    run = {"run": 1, "command": existing["command"], "date": measured.get("date"),
           "notes": measured.get("notes", ""), "wall_s": existing.get("wall_s"),
           "load_averages": existing.get("load_averages", [])}  # fmt: skip
    return [run], *([{**entry, "run": 1} for entry in existing.get(part, [])]
                    for part in ("rows", "exports"))  # fmt: skip


def merge_runs(existing: dict, run: dict, rows: list, exports: list) -> tuple[list, list, list]:
    """(runs, rows, exports) of the results file `existing` ({} for none) and this `run`: each
    row and export names its run; a point this run measured replaces the file's, one it skipped
    keeps the file's; runs no point names any more are dropped."""
    runs, old_rows, old_exports = file_runs(existing)
    number = max((each["run"] for each in runs), default=0) + 1
    rows = [{**row, "run": number} for row in rows]
    exports = [{**made, "run": number} for made in exports]
    timed = {point_key(row) for row in rows}
    made = {point_key(entry) for entry in exports if "skipped" not in entry}
    old_rows = [row for row in old_rows if point_key(row) not in timed]
    old_exports = [entry for entry in old_exports if point_key(entry) not in made]
    kept = {point_key(entry) for entry in old_exports}
    exports = [entry for entry in exports if point_key(entry) not in kept]
    order = {name: index for index, name in enumerate((*RUNTIMES, PEER))}

    def place(entry):
        return (entry["model"], entry.get("batch", 0), order[entry["runtime"]],
                PRECISIONS.index(entry["precision"]))  # fmt: skip

    rows, exports = sorted(old_rows + rows, key=place), sorted(old_exports + exports, key=place)
    named = {entry["run"] for entry in rows + exports}
    runs = [each for each in [*runs, {"run": number, **run}] if each["run"] in named]
    return runs, rows, exports


def run_notes(args, loads, wall_s, measured: list, done: bool, peer_note) -> str:
    """What a reader needs to compare the figures of one run."""
    ones = [point["load_average"][0] for point in loads if point["load_average"]]
    return (
        "one process, every runtime on all cores, rounds in rotating order; the host is "
        "shared with other processes (other users' tests and training ran at the same "
        f"time: 1-minute load average {min(ones, default=0):.1f} to {max(ones, default=0):.1f} "
        "over the run, `load_averages`), so compare within this run. Iteration counts per "
        "point are in `rows`. "
        f"Peer: {args.peer_notes or peer_note or args.peer_onnx}. Wall {wall_s} s"
        + ("" if done else f"; the run stopped after {measured}")
    )


def write(args, argv, rows, exports, loads, start, done: bool) -> None:
    """The raw figures (`--json`) and the documents' figures (`--results`, merged into the
    file's other runs with `--merge`) of the models measured so far (written after each
    model, so that a stopped run keeps its finished part)."""
    wall_s = round(time.time() - start, 1)
    payload = {"rows": rows, "exports": exports, "load_averages": loads, "wall_s": wall_s}
    report.save_json(args.json, payload)
    if not args.results:
        return
    peer_note = None
    if "B/16" in args.models and not args.peer_onnx:
        peer_note = "not measured: no timm ONNX file (--peer-onnx)"
    measured = sorted({row["model"] for row in rows})
    words = sys.argv[1:] if argv is None else argv
    run = {"command": "python -m benchmarks.bench serving " + " ".join(words),
           "date": datetime.date.today().isoformat(),
           "notes": run_notes(args, loads, wall_s, measured, done, peer_note),
           "wall_s": wall_s, "load_averages": loads}  # fmt: skip
    existing = {}
    if args.merge and os.path.isfile(args.results):
        with open(args.results, encoding="utf-8") as handle:
            existing = json.load(handle)
    runs, rows, exports = merge_runs(existing, run, rows, exports)
    if any(row["runtime"] == PEER for row in rows):
        peer_note = None
    notes = runs[0]["notes"]
    if len(runs) > 1:
        notes = (
            f"{len(runs)} runs on this host merged (`runs`: each run's command, date, notes, "
            "load averages and wall time; each row and export names its `run`): compare rows "
            "within one run. "
            + "; ".join(f"run {each['run']} ({each['date']}): {each['notes']}" for each in runs)
        )
    about = __doc__.split("\n\n")[0].split(": ", 1)[1]
    command = " && ".join(each["command"] for each in runs)
    extra = {"rows": rows, "exports": exports, "runs": runs}
    report.write_results(args.results, figure_values(rows, exports, peer_note), command=command,
                         about=about, notes=notes, extra=extra)  # fmt: skip
    print(f"wrote {args.results}", flush=True)


def main(argv=None) -> int:
    logging.basicConfig(level=logging.WARNING)
    args = parse_args(argv)
    if args.peer_onnx and not os.path.isfile(args.peer_onnx):
        raise SystemExit(
            f"bench serving: --peer-onnx {args.peer_onnx!r}: no such file (write it with "
            "python -m benchmarks.studies.timm_onnx_peer FILE in an environment with timm)"
        )
    start, rows, exports, loads = time.time(), [], [], []
    with tempfile.TemporaryDirectory() as folder:
        for index, name in enumerate(args.models):
            measured = measure_model(name, args, folder)
            rows += measured["rows"]
            exports += measured["exports"]
            loads += measured["load_averages"]
            write(args, argv, rows, exports, loads, start, done=index == len(args.models) - 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
