"""Shared helpers of the benchmarks: arguments, timing, worker processes, tables, output; the
FLOP counts, GEMM roof and keras_vit's model builder of `keras_vit.evaluate.benchmarking`
re-exported (the peers' models: `peers.py`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from statistics import median  # noqa: F401  (re-exported for the scripts)

from keras_vit.evaluate.benchmarking import (  # noqa: F401  (re-exported for the scripts)
    add_derived,
    build_model,
    gemm_roof,
    keras_vit_step_gflops,
    make_step,
    model_gflops,
    peak_rss_mb,
    token_grid,
    variant_arch,
)  # fmt: skip
from keras_vit.evaluate.benchmarking import time_steps as time_call  # noqa: F401  (re-exported)
from keras_vit.runtime.precision_probe import setting_label  # noqa: F401  (the one setting label)
from keras_vit.spec import configs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def module_argv(python: str, module: str) -> list[str]:
    """The command line running `module` (e.g. "benchmarks.harness.race") with `python`; its
    process needs `child_env` (the repository root on PYTHONPATH)."""
    return [python, "-m", module]


def child_env(env: dict | None = None) -> dict:
    """`env` (default: this process' environment) with the repository root first on
    PYTHONPATH, so that a child `module_argv` imports `benchmarks` from any folder."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (ROOT, env.get("PYTHONPATH"))))
    return env


def host_record() -> dict:
    """CPU model, cores this process may use, the CPU's flags and its bfloat16 units."""
    from keras_vit.runtime import precision_auto, precision_probe

    flags = precision_auto.cpu_flags()
    return {"cpu": precision_probe.cpu_model(), "cores": precision_probe.core_count(),
            "bfloat16_flags": [f for f in precision_auto.BFLOAT16_CPU_FLAGS if f in flags],
            "cpu_flags": sorted(flags)}  # fmt: skip


def load_average():
    """The 1-, 5- and 15-minute load averages (os.getloadavg), or None where unknown."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def parse_setting(text):
    """ "mixed_bfloat16+xla" -> ("mixed_bfloat16", True); "float32" -> ("float32", False)."""
    from keras_vit.runtime import precision

    policy, _, compiler = text.strip().partition("+")
    if policy not in precision.POLICIES or compiler not in ("", "xla"):
        raise ValueError(f"{text!r} is not POLICY or POLICY+xla, POLICY in {precision.POLICIES}")
    return policy, compiler == "xla"


def variant_image_size(variant: str, image_size: int | None = None) -> int:
    """The side to time `variant` at: `image_size` when given, else its name's ("B/16-384": 384,
    as the release's and timm's names mean it), else 224; ValueError naming the value unless the
    variant is known and the side a positive multiple of its patch, and the name's if it has one."""
    try:
        patch = variant_arch(variant)["patch_size"]
        named = None if "," in variant else configs.resolve_model(variant).image_size
    except ValueError as error:
        raise ValueError(f"--model {variant!r}: {error}") from None
    if None not in (named, image_size) and image_size != named:
        raise ValueError(f"--model {variant!r} names image size {named}, --image-size "
                         f"{image_size} another: give one of them")  # fmt: skip
    size = next(side for side in (image_size, named, 224) if side is not None)
    if size < patch or size % patch:
        source = "--image-size" if named is None else f"--model {variant!r} names size"
        raise ValueError(f"{source} {size} is not a positive multiple of the patch {patch}")
    return size


def add_model_arguments(parser, modes=("infer", "train", "both"), default_mode="both"):
    """Adds --model, --image-size, --batch-size and --mode (shared by the scripts)."""
    parser.add_argument(
        "--model", dest="variant", default="Ti/16", help="a named variant or P,D,MLP,HEADS,LAYERS"
    )
    parser.add_argument("--image-size", type=int, help="side (224, or the variant name's size)")
    parser.add_argument("--batch-size", type=int, default=16, help="batch size (16)")
    parser.add_argument("--mode", choices=modes, default=default_mode)


def checked_image_size(parser, args) -> None:
    """Sets `args.image_size` (`variant_image_size`), its ValueError a `parser.error`."""
    try:
        args.image_size = variant_image_size(args.variant, args.image_size)
    except ValueError as error:
        parser.error(str(error))


def at_least(parser, args, *names, minimum=1) -> None:
    """`parser.error` naming the first flag of `names` (None skipped) below `minimum`."""
    for name in names:
        value = getattr(args, name)
        if value is not None and value < minimum:
            parser.error(f"--{name.replace('_', '-')} {value}: must be >= {minimum}")


def check_model_arguments(parser, args, *counts) -> None:
    """`checked_image_size`; `at_least` 1 for the batch size and `counts` (names of `args`)."""
    checked_image_size(parser, args)
    at_least(parser, args, "batch_size", *counts)


def markdown(header, rows) -> str:
    """A Markdown table (cells unpadded: `| timm | float32 |` reads the same in a log)."""
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(map(str, cells)) + " |" for cells in lines)


class Worker:
    """A benchmark subprocess: prints `READY <json>` once built and warmed up, then answers
    each `run` line with `RESULT <json>` (`rss`: its peak RSS); `quit` ends it. Other lines
    (library logging) are ignored; `ERROR <json>` is raised as RuntimeError."""

    def __init__(self, argv: list[str], env: dict | None = None):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", **(env or {}))
        env = child_env(env)
        self.stderr = tempfile.TemporaryFile(mode="w+")  # a full pipe would block the child
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
            text=True, env=env,
        )  # fmt: skip

    def read(self, prefix: str) -> dict:
        """The JSON payload of the next stdout line with `prefix`; raises RuntimeError."""
        while True:
            line = self.process.stdout.readline()
            if not line:
                code = self.process.wait()
                self.stderr.seek(0)
                raise RuntimeError(f"worker exited ({code}): {self.stderr.read()[-2000:]}")
            if line.startswith(prefix + " "):
                return json.loads(line[len(prefix) + 1 :])
            if line.startswith("ERROR "):
                raise RuntimeError(json.loads(line[6:])["error"])

    def request(self, command: str) -> dict:
        """Sends one command line and returns the worker's RESULT payload."""
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read("RESULT")

    def close(self) -> None:
        """Asks the worker to quit; kills it after a timeout."""
        try:
            if self.process.poll() is None:
                self.process.stdin.write("quit\n")
                self.process.stdin.flush()
                self.process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        self.stderr.close()


def run_rounds(calls: dict, repeats: int, deadline=None) -> dict:
    """{name: [results]} of up to `repeats` rounds of `calls` ({name: () -> result}), none after
    the round that passes `deadline` or drops the last, the order rotated every round (a drift of
    the machine's speed hits every point alike); a call raising OSError or RuntimeError (a worker
    that died) is dropped, said so."""
    names, results = list(calls), {name: [] for name in calls}
    for index in range(repeats):
        for name in names[index % len(names) :] + names[: index % len(names)]:
            try:
                results[name].append(calls[name]())
            except (OSError, RuntimeError) as error:  # e.g. killed by the kernel's OOM killer
                print(f"  dropping {name}: {error}", flush=True)
                names.remove(name)
        print(f"  round {index + 1}/{repeats} done", flush=True)
        if not names or deadline is not None and time.perf_counter() > deadline:
            break
    return {name: results[name] for name in names if results[name]}


def child_result(argv, prefix="RESULT ", **run) -> dict:
    """The JSON of the last `prefix` line `argv` prints, also where it crashed after (`run`:
    subprocess.run's options); RuntimeError naming why there is none (the timeout, or the exit
    code and last error line), its `output` the tails of the child's stdout and stderr."""
    output = ""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, **run)
    except subprocess.TimeoutExpired as error:
        why = f"killed after {error.timeout:.0f} s"
    except OSError as error:
        why = f"{argv[0]} does not run: {error.strerror or error}"
    else:
        lines = [line for line in done.stdout.splitlines() if line.startswith(prefix)]
        if lines:  # a GPU framework's teardown may crash after the figures are out
            return json.loads(lines[-1][len(prefix) :])
        why = f"exit {done.returncode}: " + (done.stderr.strip().splitlines() or ["-"])[-1][:300]
        output = done.stdout[-2000:] + done.stderr[-3000:]
    error = RuntimeError(why)
    error.output = output
    raise error


def exit_with_parent(poll_s: float = 2.0) -> None:
    """Ends this worker when its parent goes away (killed harness, interrupted test run)."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(3)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def serve(handle_run: Callable[[], dict], ready: dict) -> None:
    """The child side of `Worker`: prints READY, answers `run` lines until `quit`/EOF."""
    print("READY " + json.dumps(ready), flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "run":
            print("RESULT " + json.dumps(handle_run()), flush=True)
        elif command == "rss":
            print("RESULT " + json.dumps({"peak_rss_mb": peak_rss_mb()}), flush=True)
        elif command == "quit" or not command:
            break
    sys.stdout.flush()


def report_error(error: BaseException) -> None:
    """Reports a worker failure to the parent as one ERROR line."""
    print("ERROR " + json.dumps({"error": f"{type(error).__name__}: {error}"}), flush=True)


def write_json(path: str, payload: dict) -> None:
    """Writes `payload` as JSON atomically (temporary file in the same folder, then rename)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    temp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    with open(temp, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(payload, indent=2) + "\n")
    os.replace(temp, path)
