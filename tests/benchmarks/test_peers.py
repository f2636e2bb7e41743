"""The peers of the harness are one table (benchmarks/harness/peers.py): adding a peer is
adding a `PEERS` row, and every place that starts, names or labels a worker reads it."""

from __future__ import annotations

import argparse
import functools
import sys

import pytest

from benchmarks import bench
from benchmarks.harness import common


@pytest.fixture(scope="module")
def harness():
    from benchmarks.harness import peers, race

    return peers, race


def test_a_new_peer_is_one_table_row(harness, monkeypatch):
    peers, race = harness
    row = peers.Peer(("flax",), "torch", {"KERAS_BACKEND": "jax"}, "keras", peers.keras_step)
    monkeypatch.setitem(peers.PEERS, "flax_vit", row)
    settings = [("float32", True), ("mixed_bfloat16", False)]
    names = peers.points("flax_vit", "train", settings, [])
    assert names == ["flax_vit:train:float32:xla", "flax_vit:train:mixed_bfloat16:noxla"]
    assert [peers.label(name) for name in names] == ["float32+xla", "mixed_bfloat16"]
    assert race.worker_env(names[0]) == {"KERAS_BACKEND": "jax"}
    args = argparse.Namespace(
        python=sys.executable, torch_python="/opt/other/python", variant="Ti/16",
        image_size=224, batch_size=2, steps=1, warmup=1, gemm_sizes="none", threads=0,
    )  # fmt: skip
    assert race.worker_argv(args, names[1])[0] == "/opt/other/python"


@pytest.mark.parametrize(
    "peer, expected",
    [
        ("keras_vit", ["keras_vit:infer:float32:xla", "keras_vit:infer:float32:noxla"]),
        ("keras_vit_torch", ["keras_vit_torch:infer:float32:noxla"]),  # eager only
        ("timm", ["timm:infer:mixed_bfloat16:eager"]),
    ],
)
def test_each_kind_of_settings(harness, peer, expected):
    peers, _ = harness
    keras_settings = [("float32", True), ("float32", False)]
    assert peers.points(peer, "infer", keras_settings, [("mixed_bfloat16", "eager")]) == expected


def test_a_worker_of_a_peer_that_does_not_import_reports_why(harness, capsys):
    peers, _ = harness
    peers.PEERS["absent_peer"] = peers.Peer(("no_such_module_xyz",), "main", {}, "keras", None)
    try:
        args = argparse.Namespace(worker="absent_peer:train:float32:xla", threads=0)
        assert peers.serve(args) == 1
    finally:
        del peers.PEERS["absent_peer"]
    out = capsys.readouterr().out
    assert out.startswith("ERROR ") and "absent_peer does not import" in out
    assert "No module named 'no_such_module_xyz'" in out


def test_bench_entry_dispatches_verbs_and_refuses_an_unknown_one(capsys):
    assert bench.main(["race"]) == 2
    assert "usage: bench.py VERB" in capsys.readouterr().err
    assert bench.main(["figures", "--check"]) == 0  # the documents' figures, as CI checks them
    with pytest.raises(SystemExit) as done:
        bench.main(["gpu", "--peers", "flax"])
    assert done.value.code == 2 and "unknown peer 'flax'" in capsys.readouterr().err


def test_every_suite_line_parses_with_its_verb_both_ways():
    """A workload is one line of suites.toml: its command and quick variant are arguments
    its verb (or study) accepts, and a quick variant times a tiny model."""
    pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    import importlib

    for suite in ("figures", "targets", "gpu"):
        for quick in (False, True):
            for workload, argv in bench.suite_commands(suite, quick):
                assert argv[1] == "-m", argv  # every line runs a module of the package
                if argv[2] == "benchmarks.bench":
                    verb, args = argv[3], argv[4:]
                    name = "benchmarks." + bench.VERBS[verb]
                else:
                    verb, name, args = None, argv[2], argv[3:]
                module = importlib.import_module(name)
                if verb in bench.RACES:  # the races share one parser, a preset per verb
                    module.parse_args(args, verb)  # SystemExit(2) on a bad line
                elif hasattr(module, "parse_args"):
                    module.parse_args(args)
                if quick and "--model" in args:
                    assert args[args.index("--model") + 1] == "8,32,64,4,2", workload
    with pytest.raises(ValueError, match="unknown suite 'nope'"):
        bench.suite_commands("nope", False)
    with pytest.raises(ValueError, match="suite 'gpu' has no workload 'x'"):
        bench.suite_commands("gpu", False, ["x"])


def _fake_calls(names, log, dies_at=None):
    """{name: a call that logs its name, and for `dies_at` (name, n) raises from call n on}."""
    counts = dict.fromkeys(names, 0)

    def call(name):
        counts[name] += 1
        if dies_at and dies_at[0] == name and counts[name] >= dies_at[1]:
            raise RuntimeError("worker exited (-9): killed")
        log.append(name)
        return {"images_per_s": 1.0}

    return {name: functools.partial(call, name) for name in names}


def test_run_rounds_rotates_drops_the_dead_and_stops_at_the_deadline(harness, capsys):
    log = []
    payloads = common.run_rounds(_fake_calls("abc", log, dies_at=("b", 2)), repeats=3)
    assert log == ["a", "b", "c", "c", "a", "a", "c"]  # round 2 starts at b (dead), round 3 at c
    assert sorted(payloads) == ["a", "c"] and len(payloads["a"]) == 3
    assert "dropping b: worker exited (-9): killed" in capsys.readouterr().out
    log.clear()
    payloads = common.run_rounds(_fake_calls("ab", log), repeats=5, deadline=0.0)  # one round
    assert log == ["a", "b"] and all(len(v) == 1 for v in payloads.values())
    log.clear()  # every call dead in round 1: no round 2 (it has no one to start with)
    assert common.run_rounds(_fake_calls("ab", log, dies_at=("a", 1)) | _fake_calls("b", log,
                             dies_at=("b", 1)), repeats=3) == {} and log == []  # fmt: skip
    assert "round 2/3" not in capsys.readouterr().out


def test_targets_points_start_with_the_roofs_and_each_group_fits_in_memory(harness):
    """`targets`: the roofs first, then every framework's settings interleaved, likeliest
    fastest first (so that those share the first group), cut into groups whose expected
    peak RSS (Ti/16 training 2.8 GB a point, a roof 1 GB) fits in `--memory-gb`."""
    _, race = harness
    argv = ["--only", "keras_vit,timm,keras_hub", "--memory-gb", "7"]
    groups = race.target_groups(race.parse_args(argv, "targets"), "Ti/16", "train")
    names = [name for group in groups for name in group]
    assert names[:5] == [
        "gemm", "gemm_torch", "keras_vit:train:mixed_bfloat16:noxla",
        "timm:train:mixed_bfloat16:eager", "keras_hub:train:mixed_bfloat16:noxla",
    ]  # fmt: skip
    assert len(names) == 2 + 4 + 3 + 2 and len(set(names)) == len(names)
    assert [len(group) for group in groups] == [3, 2, 2, 2, 2]
    quick = race.parse_args([*argv, "--quick"], "targets")
    assert [len(group) for group in race.target_groups(quick, "Ti/16", "train")] == [3, 2, 2]


def test_in_process_builds_each_point_with_its_peer_row_as_a_worker_would(harness, monkeypatch):
    """`in-process` (and `profile`) build a point with the row's `build`, given the compiler a
    worker name would carry: Keras "xla"/"noxla", timm "compile"/"eager"; each step warmed up."""
    peers, race = harness
    built, calls = [], []

    def build(args, framework, mode, policy, compiler):
        built.append((framework, mode, policy, compiler))
        return 1, lambda: calls.append(framework)

    for name in ("keras_vit", "timm"):
        monkeypatch.setitem(peers.PEERS, name, peers.PEERS[name]._replace(build=build))
    monkeypatch.setattr(peers, "set_threads", lambda threads: None)
    argv = ["--frameworks", "keras_vit,timm", "--settings", "float32+xla,mixed_bfloat16"]
    args = race.parse_args([*argv, "--warmup", "2"], "in-process")
    steps = race.build_steps(args, args.frameworks)
    assert built == [
        ("keras_vit", "train", "float32", "xla"), ("keras_vit", "train", "mixed_bfloat16", "noxla"),
        ("timm", "train", "float32", "compile"), ("timm", "train", "mixed_bfloat16", "eager"),
    ]  # fmt: skip
    assert list(steps) == [("keras_vit", "float32+xla"), ("keras_vit", "mixed_bfloat16"),
                           ("timm", "float32+xla"), ("timm", "mixed_bfloat16")]  # fmt: skip
    assert calls == ["keras_vit"] * 4 + ["timm"] * 4  # two warm-up steps each


@pytest.mark.parametrize(
    "variant, image_size, message",
    [("5,32,64,4,2", None, "--image-size 224 is not a positive multiple of the patch 5"),
     ("B/16-200", None, "--model 'B/16-200' names size 200 is not a positive multiple"),
     ("B/16-200", 200, "--model 'B/16-200' names size 200 is not a positive multiple"),
     ("B/16", 0, "--image-size 0 is not a positive multiple of the patch 16"),
     ("X/3", None, "--model 'X/3': Unknown model")],
)  # fmt: skip
def test_variant_image_size_names_where_a_bad_size_came_from(harness, variant, image_size, message):
    """A custom variant names no size: its 224 is --image-size's default, not the variant's."""
    with pytest.raises(ValueError) as raised:
        common.variant_image_size(variant, image_size)
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize("variant, tokens", [("8,32,64,4,2", 5), ("R50+B/16", 2)])
def test_scaling_reports_the_points_left_when_a_worker_dies(harness, monkeypatch, capsys,
                                                            variant, tokens):  # fmt: skip
    """`time_points` leaves out a point whose worker died (said so): the table has the rest,
    its tokens those the model sees (a hybrid's: 16 px, a 1 x 1 ResNet feature map)."""
    _, race = harness
    argv = ["--model", variant, "--image-sizes", "16,32", "--batch-sizes", "2",
            "--base-image-size", "16", "--base-batch-size", "2"]  # fmt: skip
    args = race.parse_args(argv, "scaling")

    def time_points(args, points, deadline=None):
        live = [key for key in points if not key.startswith("32px")]  # 32 px: out of memory
        return ({key: [{"images_per_s": 10.0}] for key in live},
                {key: {"params": 1, "warmup_s": 0.1} for key in points},
                {key: 100.0 for key in live})  # fmt: skip

    monkeypatch.setattr(race, "time_points", time_points)
    assert race.scaling(args, argv) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line[:4] in ("| 16", "| 32")]
    assert len(rows) == 1 and rows[0].startswith(f"| 16 | 2 | {tokens} |")  # image, batch


def analytic_params(patch, hidden, mlp, layers, tokens, classes, channels=3):
    """Parameters of the paper's ViT (section 3.1): patch projection, class token, position
    table, `layers` blocks (two LayerNorms, q/k/v/out projections, the MLP), final LayerNorm,
    dense head."""
    block = 2 * 2 * hidden + 4 * (hidden * hidden + hidden) + 2 * hidden * mlp + mlp + hidden
    embed = patch * patch * channels * hidden + hidden + hidden + (tokens + 1) * hidden
    return embed + layers * block + 2 * hidden + hidden * classes + classes


@pytest.mark.parametrize("framework", ["keras_vit", "keras_hub", "vit_keras"])
def test_a_keras_peer_builds_the_architecture_keras_vit_builds(framework):
    """`peers.keras_model`: every Keras framework's ViT of the tiny variant has the paper's
    parameter count and float32 logits of (batch, classes); a hybrid only keras_vit builds."""
    from benchmarks.harness import peers

    reason = peers.import_problem(*peers.PEERS[framework].modules)
    if reason is not None:
        pytest.skip(f"{framework} does not import here: {reason}")
    import numpy as np

    model = peers.keras_model(framework, "8,32,64,4,2", 16, num_classes=10)
    expected = analytic_params(patch=8, hidden=32, mlp=64, layers=2, tokens=4, classes=10)
    assert model.count_params() == expected
    logits = model.predict(np.zeros((2, 16, 16, 3), "float32"), verbose=0)
    assert logits.shape == (2, 10) and logits.dtype == np.float32
    if framework != "keras_vit":
        with pytest.raises(ValueError, match=f"{framework} has no hybrid"):
            peers.keras_model(framework, "R50+B/16", 224)
    with pytest.raises(ValueError, match="Unknown framework 'flax'"):
        peers.keras_model("flax", "8,32,64,4,2", 16)
