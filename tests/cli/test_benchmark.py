"""`keras-vit benchmark`: the model flag spelled as in `train`, and --quiet (a tiny run)."""

from __future__ import annotations

import json

import pytest

from keras_vit.cli import benchmark
from keras_vit.cli.main import UsageError, build_parser, main

TINY = "8,32,64,4,2"  # patch, hidden, mlp, heads, layers (the tests' tiny ViT)
TINY_RUN = ["--image-size", "16", "--batch-size", "2", "--mode", "infer", "--no-jit-compile"]
TINY_RUN += ["--steps", "1", "--repeats", "1", "--warmup", "1", "--gemm-sizes", "none"]


@pytest.mark.parametrize("quiet", [False, True])
def test_quiet_prints_the_table_only(tmp_path, capsys, quiet):
    out_file = tmp_path / "bench.json"
    argv = ["benchmark", "--model", TINY, *TINY_RUN, "--json", str(out_file)]
    assert main(argv + ["--quiet"] * quiet) == 0
    out = capsys.readouterr().out
    assert "| infer | keras_vit" in out and f"ViT-{TINY} @16, batch 2" in out
    chatter = [line for line in out.splitlines() if line.startswith(("Precision: ", "timing "))]
    assert len(chatter) == (0 if quiet else 2), out
    assert json.loads(out_file.read_text())["config"]["model"] == TINY


def test_model_names_the_architecture(capsys):
    parser = build_parser()
    assert parser.parse_args(["benchmark"]).model == "Ti/16"
    assert parser.parse_args(["benchmark", "--model", "B/16"]).model == "B/16"
    with pytest.raises(SystemExit):
        parser.parse_args(["benchmark", "--help"])
    assert "--model MODEL" in capsys.readouterr().out


@pytest.mark.parametrize(
    "flags", [["--variant", "S/32"], ["--dtype-policy", "float32"], ["--no-xla"]]
)
def test_one_spelling_per_flag_others_are_refused(flags, capsys):
    """`--model`, `--mixed-precision` and `--no-jit-compile` are the only spellings."""
    with pytest.raises(SystemExit) as raised:
        build_parser().parse_args(["benchmark", *flags])
    assert raised.value.code == 2
    assert f"unrecognized arguments: {' '.join(flags)}" in capsys.readouterr().err


@pytest.mark.parametrize(
    "spelling, name",
    [("Ti/16", "Ti/16"), ("ViT_B16", "B/16"), ("ti16", "Ti/16"), ("vit-l32", "L/32"), (TINY, TINY)],
)
def test_the_variant_spellings_of_train_model(spelling, name):
    assert benchmark.variant_name(spelling) == name


def test_an_unknown_model_is_a_usage_error_naming_the_flag(capsys):
    with pytest.raises(UsageError, match=r"--model 'X/99' is not a named variant \(Ti/16, "):
        benchmark.variant_name("X/99")
    assert main(["benchmark", "--model", "8,32,64,5,2"]) == 2  # hidden 32 not divisible by 5
    assert capsys.readouterr().err.startswith("keras-vit benchmark: error: --model: A custom")


def test_a_json_path_in_a_missing_folder_is_refused_before_work(tmp_path, capsys, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the benchmark ran before --json was checked")

    monkeypatch.setattr(benchmark, "measure", refuse)
    missing = tmp_path / "no" / "such" / "dir"
    argv = ["benchmark", "--model", TINY, *TINY_RUN, "--json", str(missing / "x.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--json '{missing / 'x.json'}': the folder '{missing}' does not exist" in err, err
    assert not (tmp_path / "no").exists()  # no folder created
    assert main(["benchmark", "--model", TINY, *TINY_RUN, "--json", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


@pytest.mark.parametrize(
    "words, pair", [(["224"], (224, 224)), (["224", "160"], (224, 160)), (["224,160"], (224, 160))]
)
def test_image_size_is_the_checked_pair_of_the_other_subcommands(words, pair, capsys):
    parser = build_parser()
    assert parser.parse_args(["benchmark", "--image-size", *words]).image_size == pair
    assert parser.parse_args(["train", "--image-size", *words]).image_size == pair
    default = parser.parse_args(["benchmark"])
    benchmark.check_args(default)
    assert default.image_size == (224, 224)
    for bad in (["0"], ["16,x"], ["16", "16", "16"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["benchmark", "--image-size", *bad])
    assert "argument --image-size" in capsys.readouterr().err


def test_the_image_size_help_is_the_same_everywhere(capsys):
    from keras_vit.cli.flags import IMAGE_SIZE_HELP

    for command in ("benchmark", "train", "finetune", "convert", "transfer-suite"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        help_text = " ".join(capsys.readouterr().out.split())
        assert IMAGE_SIZE_HELP in help_text, command


def test_a_non_square_benchmark_runs_and_checks_each_side(capsys):
    argv = ["benchmark", "--model", TINY, *TINY_RUN, "--quiet"]
    assert main([*argv, "--image-size", "16,24"]) == 0  # the later flag wins
    assert f"ViT-{TINY} @16x24, batch 2" in capsys.readouterr().out
    assert main([*argv, "--image-size", "16,20"]) == 2
    assert "--image-size 16x20: each side must be a multiple of the patch (8)" in (
        capsys.readouterr().err
    )


def test_analytic_macs_of_a_non_square_image():
    from keras_vit.evaluate.benchmarking import analytic_macs, variant_arch

    arch = variant_arch(TINY)
    assert analytic_macs(**arch, image_size=(16, 32)) == analytic_macs(**arch, image_size=(32, 16))
    assert analytic_macs(**arch, image_size=16) == analytic_macs(**arch, image_size=(16, 16))


@pytest.mark.parametrize("below", ["x.json", "sub/x.json"])
def test_a_json_path_below_a_file_says_it_is_not_a_folder(tmp_path, capsys, below):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("")
    assert main(["benchmark", "--model", TINY, *TINY_RUN, "--json", str(a_file / below)]) == 2
    err = capsys.readouterr().err
    assert f"'{a_file}' is a file, not a folder" in err and "does not exist" not in err, err


def test_an_image_size_in_the_model_name_is_honoured_or_refused():
    parser = build_parser()
    args = parser.parse_args(["benchmark", "--model", "ViT-Ti_16-384"])
    benchmark.check_args(args)
    assert (args.model, args.image_size) == ("Ti/16", (384, 384))  # was Ti/16 at 224
    args = parser.parse_args(["benchmark", "--model", "Ti/16-384", "--image-size", "224"])
    with pytest.raises(UsageError, match="names image size 384, --image-size 224,224 another"):
        benchmark.check_args(args)


@pytest.mark.parametrize("kind", ["fifo", "empty", "trailing separator"])
def test_a_json_path_that_names_no_file_is_refused_before_work(tmp_path, capsys, monkeypatch, kind):
    import os
    import stat

    def refuse(*args, **kwargs):
        raise AssertionError("the benchmark ran before --json was checked")

    monkeypatch.setattr(benchmark, "measure", refuse)
    path = {"fifo": str(tmp_path / "pipe.json"), "empty": ""}.get(kind, f"{tmp_path}/new/")
    if kind == "fifo":  # stands for /dev/null: the atomic write would replace it with a file
        os.mkfifo(path)
    assert main(["benchmark", "--model", TINY, *TINY_RUN, "--json", path]) == 2
    err = capsys.readouterr().err
    expected = {
        "fifo": "neither a file nor a folder",
        "empty": "--json '': give a file name",
        "trailing separator": "ends in a path separator",
    }[kind]
    assert expected in err, err
    if kind == "fifo":
        assert stat.S_ISFIFO(os.lstat(path).st_mode)
    assert not (tmp_path / "new").exists()


HYBRID_SPELLINGS = [
    ("R50+B/16", "R50+B/16"),
    ("R50_B16", "R50+B/16"),
    ("r50b16", "R50+B/16"),
    ("R50+ViT-B_16", "R50+B/16"),
    ("R26+S/32", "R26+S/32"),
    ("r26_s32", "R26+S/32"),
    ("R26+B/32", "R26+B/32"),
    ("R50+L/32", "R50+L/32"),
    ("R+Ti/16", "R+Ti/16"),
    ("R_Ti16", "R+Ti/16"),
]


@pytest.mark.parametrize("spelling, name", HYBRID_SPELLINGS)
def test_each_hybrid_spelling_is_timed_as_its_table_row(
    spelling, name, tmp_path, capsys, monkeypatch
):
    """Every spelling reaches the timer as its table row, and the table's GFLOP/s are the
    hybrid's analytic count x img/s. The timer is a stand-in here (the real one: the test
    below); R50+L/32 would take minutes to build."""
    from keras_vit.evaluate import benchmarking

    timed = []

    def fake_measure(variant, image_size, batch_size, mode, **kwargs):
        timed.append((variant, image_size, mode))
        return benchmarking.result_record("keras_vit", mode, [10.0], 1, 0.0)

    monkeypatch.setattr(benchmark, "measure", fake_measure)
    out_file = tmp_path / "bench.json"
    argv = ["benchmark", "--model", spelling, *TINY_RUN, "--mode", "both", "--image-size", "64"]
    assert main([*argv, "--json", str(out_file)]) == 0
    assert timed == [(name, (64, 64), "infer"), (name, (64, 64), "train")]
    captured = capsys.readouterr()
    assert f"{name} @64, batch 2" in captured.out and "ViT-R" not in captured.out
    payload = json.loads(out_file.read_text())
    assert payload["config"]["model"] == name
    for record in payload["results"]:
        gflops = benchmarking.model_gflops(name, 64, record["mode"])
        assert record["model_gflops_per_s"] == pytest.approx(10.0 * gflops)


@pytest.mark.large  # ~23 s (a Ti/16 Transformer); the tiny run of test_smoke.py stays
def test_a_hybrid_is_timed_for_inference_and_training(tmp_path, capsys):
    out_file = tmp_path / "bench.json"
    argv = ["benchmark", "--model", "R_Ti16", *TINY_RUN, "--mode", "both", "--image-size", "32"]
    assert main([*argv, "--quiet", "--json", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert "R+Ti/16 @32, batch 2" in out
    results = json.loads(out_file.read_text())["results"]
    assert [(r["framework"], r["mode"]) for r in results] == [
        ("keras_vit", "infer"),
        ("keras_vit", "train"),
    ]
    assert all(r["images_per_s"] > 0 and r["model_gflops_per_s"] > 0 for r in results)
    assert results[0]["params"] > 5_000_000  # the Ti/16 Transformer after the ResNet root


def test_a_hybrid_image_size_its_feature_map_cannot_patch_is_refused(capsys, monkeypatch):
    monkeypatch.setattr(benchmark, "measure", lambda *a, **k: pytest.fail("timed"))
    # R+Ti/16: patch 8 on the stride-4 feature map; 40 px -> a 10x10 map
    assert main(["benchmark", "--model", "R+Ti/16", *TINY_RUN, "--image-size", "40"]) == 2
    err = capsys.readouterr().err
    assert "--image-size 40: the ResNet feature map is 10x10; each side must be a multiple of " in (
        err
    )


def _layer_macs_of_a_forward_pass(model, images):
    """MACs per image of every Conv2D / StdConv2D / Dense / EinsumDense of `model`, from
    its kernel's actual shape and the actual output shape of one forward pass (each layer's
    `call` wrapped to record what it returns), and the token count the key projections
    returned."""
    import keras
    import numpy as np

    from keras_vit.layers import StdConv2D

    kinds = (keras.layers.Conv2D, StdConv2D, keras.layers.Dense, keras.layers.EinsumDense)
    layers = [layer for layer in model._flatten_layers() if isinstance(layer, kinds)]
    outputs = {}

    def recording(layer):
        call = layer.call

        def wrapped(*args, **kwargs):
            result = call(*args, **kwargs)
            outputs.setdefault(id(layer), []).append(tuple(result.shape[1:]))
            return result

        return wrapped

    for layer in layers:
        layer.call = recording(layer)
    model(images)
    keys = {outputs[id(layer)][0][0] for layer in layers if layer.name == "key"}
    total = 0
    for layer in layers:
        kernel = tuple(layer.kernel.shape)
        if getattr(layer, "equation", "").startswith("btd,dnh"):  # q/k/v: (D, heads, head_dim)
            contracted = kernel[0]
        else:  # conv (kh, kw, in, out), dense (in, out), attention out (heads, head_dim, D)
            contracted = int(np.prod(kernel[:-1]))
        for shape in outputs[id(layer)]:
            total += int(np.prod(shape)) * contracted
    (tokens,) = keys  # every block attends over the same tokens
    return total, tokens


@pytest.mark.parametrize(
    "stages, patch, image_size",
    [
        ((), 2, (32, 24)),
        ((), 2, (30, 22)),  # odd sides after the root conv: "same" rounds up (15 -> 8)
        ((1,), 1, (16, 16)),
        ((1,), 1, (29, 30)),
        ((1, 2), 1, (26, 38)),
        ((2, 1, 1), 2, (64, 32)),
    ],
)
def test_hybrid_macs_equal_a_count_of_the_built_layers(stages, patch, image_size):
    """analytic_macs of a hybrid == the MACs of the built HybridViT's convolutions and dense
    layers (actual kernel and output shapes) + q k^T and the weighted sum of values
    (2 N^2 D a block, N read from the key projection's actual output)."""
    import numpy as np

    from keras_vit.evaluate.benchmarking import analytic_macs
    from keras_vit.model.hybrid import HybridViT

    arch = dict(patch_size=patch, hidden_dim=16, mlp_dim=24, num_heads=2, num_layers=2)
    model = HybridViT(
        resnet_stages=stages,
        resnet_width=8,
        resnet_groups=4,
        image_size=image_size,
        num_classes=5,
        pooling="gap",  # every block over every token (token pooling's last block: 1 query)
        **arch,
    )
    images = np.zeros((1, *image_size, 3), "float32")
    layers, n = _layer_macs_of_a_forward_pass(model, images)
    attention = arch["num_layers"] * 2 * n * n * arch["hidden_dim"]
    expected = layers + attention
    got = analytic_macs(
        **arch,
        image_size=image_size,
        num_classes=5,
        class_token=False,
        resnet_stages=stages,
        resnet_width=8,
    )
    assert got == expected


def test_the_stem_count_of_resnet50_is_the_published_one():
    """ResNet-50 v1.5 (stages 3, 4, 6, 3; the same convolutions and strides as the BiT
    stem) at 224 + its 2048 x 1000 classifier: 4.09 GMACs (torchvision's ResNet50 table,
    "GFLOPS 4.09", which are multiply-adds)."""
    from keras_vit.evaluate.benchmarking import stem_convolutions

    convs, feature_map = stem_convolutions((3, 4, 6, 3), 224)
    assert feature_map == (7, 7, 2048)
    macs = sum(kh * kw * cin * cout * h * w for kh, kw, cin, cout, h, w in convs)
    assert round((macs + 2048 * 1000) / 1e9, 2) == 4.09
