"""benchmarks/bench.py products: the list of a step's matrix products against the analytic
MAC count (checked against the published counts in test_smoke.py), its flags, and a tiny
run in two engines. No timing assertions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.benchmarks.test_smoke import TINY, run_script

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks" / "harness"


@pytest.fixture(scope="module")
def module():
    from benchmarks.harness import products

    return products


ARCHS = st.fixed_dictionaries(
    {
        "patch_size": st.integers(1, 16),
        "heads": st.integers(1, 4),
        "head_dim": st.integers(1, 16),
        "mlp_dim": st.integers(1, 64),
        "num_layers": st.integers(1, 3),
        "grid": st.tuples(st.integers(1, 5), st.integers(1, 5)),
        "batch": st.integers(1, 4),
        "channels": st.sampled_from([1, 3, 4]),
        "classes": st.integers(1, 1000),
    }
)


def arch_of(drawn):
    return {
        "patch_size": drawn["patch_size"],
        "hidden_dim": drawn["heads"] * drawn["head_dim"],
        "mlp_dim": drawn["mlp_dim"],
        "num_heads": drawn["heads"],
        "num_layers": drawn["num_layers"],
    }


@given(ARCHS)
def test_forward_products_add_up_to_the_analytic_count(module, drawn):
    from keras_vit.evaluate.benchmarking import analytic_macs

    arch = arch_of(drawn)
    size = tuple(side * arch["patch_size"] for side in drawn["grid"])
    channels, classes = drawn["channels"], drawn["classes"]
    items = module.step_products(arch, drawn["batch"], size, "infer", channels, classes)
    expected = drawn["batch"] * analytic_macs(
        **arch, image_size=size, channels=channels, num_classes=classes
    )
    assert sum(module.macs(item) for item in items) == expected


@given(ARCHS)
def test_training_adds_both_gradients_of_every_product_but_the_image(module, drawn):
    arch = arch_of(drawn)
    size = tuple(side * arch["patch_size"] for side in drawn["grid"])
    more = (drawn["channels"], drawn["classes"])
    forward = module.step_products(arch, drawn["batch"], size, "infer", *more)
    train = module.step_products(arch, drawn["batch"], size, "train", *more)
    forward_macs = sum(module.macs(item) for item in forward)
    embed = next(item for item in forward if item["name"] == "patch embedding")
    assert sum(module.macs(item) for item in train) == 3 * forward_macs - module.macs(embed)
    # each gradient keeps its forward product's three sizes, in the backward's order
    by_name = {item["name"]: item for item in train}
    for name, item in by_name.items():
        base = by_name.get(name.rsplit(" ", 1)[0])
        if name.endswith((" dX", " dW")) and base is not None:
            assert sorted((item["m"], item["k"], item["n"])) == sorted(
                (base["m"], base["k"], base["n"])
            )
            assert item["transpose_a"] != item["transpose_b"]


def test_operands_are_stored_as_the_transposes_say(module):
    import numpy as np

    item = module.product("x", 3, 5, 7, 1, batch=2, transpose_a=True, transpose_b=True)
    ((a, b),) = module.operands(item, np.random.default_rng(0), 1)
    assert a.shape == (2, 5, 3) and b.shape == (2, 7, 5)
    plain = module.product("y", 3, 5, 7, 1)
    ((a, b),) = module.operands(plain, np.random.default_rng(0), 1)
    assert a.shape == (3, 5) and b.shape == (5, 7)


def test_call_overhead_is_taken_off_each_figure_and_the_floor_takes_the_best(module):
    items = [module.product("a", 2, 2, 2, 3), module.product("b", 4, 4, 4, 1)]
    key_a, key_b = (module.shape_key(item) for item in items)
    per_engine = {
        "one": {"overhead_ms": 0.5, "ms": {key_a: 2.5, key_b: 0.4}},
        "two": {"overhead_ms": 0.0, "ms": {key_a: 1.0, key_b: 5.0}},
    }
    assert module.net_ms(per_engine["one"]) == {key_a: 2.0, key_b: 0.0}
    totals = module.step_figures(items, per_engine)
    assert totals == {"one": 6.0, "two": 8.0, "floor": 3.0}  # 3 x 1.0 + 1 x 0.0
    assert "call overhead" in module.cell(1.0, 0.4, 0.0)


def test_a_tiny_run_times_every_shape_in_each_engine(tmp_path):
    out = tmp_path / "products.json"
    done = run_script(
        "products.py",
        *("--model", TINY, "--batch-size", "2", "--image-size", "32", "--repeats", "1"),
        *("--per-call", "2", "--engines", "numpy,xla", "--json", str(out)),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    payload = json.loads(out.read_text())
    keys = {f"{p['batch']}x{p['m']}x{p['k']}x{p['n']}" for p in payload["products"]}
    for engine in ("numpy", "xla"):  # every shape of the list, timed in both engines
        timed = payload["timed"][engine]
        assert {key.split(" ")[0] for key in timed["ms"]} == keys
        assert all(ms > 0 for ms in timed["ms"].values()) and timed["overhead_ms"] > 0
    steps = payload["step_ms"]
    assert steps["floor"] <= min(steps["numpy"], steps["xla"])
    assert payload["host"]["cores"] >= 1 and payload["failed"] == {}
    assert "products of one step" in done.stdout and "call overhead per product" in done.stdout


def torch_imports():
    return (
        subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0
    )


@pytest.mark.parametrize(
    "args, named",
    [
        (["--engines", "numpy,blas"], "unknown engine 'blas'"),
        (["--engines", "numpy,"], "an empty item"),
        (["--engines", "numpy,numpy"], "'numpy' is given twice"),
        (["--model", "X/99"], "X/99"),
        (["--image-size", "30"], "--image-size 30"),
        (["--per-call", "0"], "--per-call 0"),
        (["--json", ""], "--json ''"),
        (["--torch-python", sys.executable], "add torch to --engines"),
        (["--engines", "torch", "--torch-python", "/no/such/python"], "does not run"),
    ],
)
def test_bad_arguments_are_refused_before_any_work(args, named):
    done = run_script("products.py", *args, timeout=120)
    assert done.returncode == 2
    assert named in done.stderr


def test_a_json_path_under_a_file_is_refused_before_any_work(tmp_path):
    (tmp_path / "afile").write_text("")
    done = run_script("products.py", "--json", str(tmp_path / "afile" / "out.json"))
    assert done.returncode == 2 and "is a file, not a folder" in done.stderr


@pytest.mark.skipif(torch_imports(), reason="torch imports in this interpreter")
def test_an_interpreter_without_torch_is_refused_naming_the_import_error():
    done = run_script("products.py", "--engines", "torch,numpy", timeout=120)
    assert done.returncode == 2
    assert "does not import torch" in done.stderr and "torch" in done.stderr.splitlines()[-1]
