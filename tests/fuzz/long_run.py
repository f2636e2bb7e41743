"""The long run of the reader fuzz suite: each campaign of tests/fuzz/readers.py (byte,
safetensors-header, config.json and npz-member mutations of valid tiny files keras_vit
writes; mutated image headers) for `--examples` inputs, counting the inputs tried and the
distinct failures (`readers.Violation`: another exception type, an error naming no file, a
hang, an allocation beyond 8 x the input + 64 MiB, a read outside the folder). It does not
stop at the first failure: every input runs.

Usage:
    python tests/fuzz/long_run.py --examples 200 --json /tmp/after.json
    # the same campaigns against an older keras_vit (e.g. `git archive` of main):
    PYTHONPATH=/tmp/old:. python tests/fuzz/long_run.py --json /tmp/before.json
    python tests/fuzz/long_run.py --merge /tmp/before.json /tmp/after.json \
        --results benchmarks/results/fuzz_readers.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.append(ROOT)  # after PYTHONPATH


def _kind(message: str) -> str:
    """A failure's class: its first words with numbers and paths taken out."""
    text = re.sub(r"/\S+", "<path>", message)
    text = re.sub(r"0x[0-9a-f]+|\d+(\.\d+)?", "N", text)
    text = re.sub(r"\bN [KMGTPE]iB\b", "N bytes", text)
    return " ".join(text.split()[:9])


def run_campaign(name: str, valid: dict, examples: int, workdir: str, seed: int) -> dict:
    """{"inputs": n, "failures": {kind: count}} of `examples` inputs of one campaign."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    from tests.fuzz import readers

    counts = {"inputs": 0, "failures": {}}

    @hypothesis_seed(seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def case(data):
        counts["inputs"] += 1
        try:
            if name == "image headers":
                readers.run_image_case(data.draw, workdir)
            else:
                readers.run_campaign_case(valid, name, data.draw, workdir)
        except readers.Violation as violation:
            kind = _kind(str(violation))
            counts["failures"][kind] = counts["failures"].get(kind, 0) + 1

    case()
    return counts


def fuzz(examples: int, seed: int, only=None) -> dict:
    from tests.fuzz import readers

    root = tempfile.mkdtemp(prefix="fuzz_readers_")
    valid = readers.valid_files(os.path.join(root, "valid"))
    names = [*readers.CAMPAIGNS, "image headers"]
    report = {}
    for name in names:
        if only and name not in only:
            continue
        start = time.perf_counter()
        report[name] = run_campaign(name, valid, examples, os.path.join(root, "case"), seed)
        report[name]["seconds"] = round(time.perf_counter() - start, 1)
        found = report[name]["failures"]
        print(
            f"{name:<26} {report[name]['inputs']:>5} inputs  {len(found):>3} distinct failures"
            f"  {report[name]['seconds']:>6.1f} s",
            flush=True,
        )
        for kind, count in sorted(found.items(), key=lambda item: -item[1])[:6]:
            print(f"    {count:>4} x {kind}")
    return report


def merge(before_path, after_path, results_path) -> None:
    """Writes the figures file of docs/reliability.md from a run against the old code and
    one against the new."""
    from benchmarks.figures import write_results

    before, after = (json.load(open(p)) for p in (before_path, after_path))
    values = {}
    for name, now in after.items():
        key = re.sub(r"\W+", "_", name).strip("_")
        values[f"{key}_inputs"] = {"value": now["inputs"], "format": "{}"}
        values[f"{key}_found"] = {
            "value": len({_kind(k) for k in before.get(name, {}).get("failures", {})}),
            "format": "{}",
        }
        values[f"{key}_left"] = {"value": len({_kind(k) for k in now["failures"]}), "format": "{}"}
    write_results(
        results_path,
        values,
        command="python tests/fuzz/long_run.py (against an older and the current readers)",
        about="Reader fuzzing: inputs tried per campaign, distinct failures found on the old "
        "readers, distinct failures left",
        notes=f"before: {os.path.basename(before_path)}, after: {os.path.basename(after_path)}",
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=200, help="inputs per campaign (200)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (0)")
    parser.add_argument("--only", nargs="+", help="campaign names to run")
    parser.add_argument("--json", help="write the per-campaign counts here")
    parser.add_argument("--merge", nargs=2, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--results", help="with --merge: the figures file to write")
    args = parser.parse_args(argv)
    if args.merge:
        merge(*args.merge, args.results)
        return 0
    report = fuzz(args.examples, args.seed, args.only)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
