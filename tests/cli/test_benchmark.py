"""`keras-vit benchmark`: the model flag spelled as in `train`, and --quiet (a tiny run)."""

from __future__ import annotations

import json
import logging

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


def test_model_is_the_flag_and_variant_a_deprecated_alias(capsys, caplog):
    parser = build_parser()
    assert parser.parse_args(["benchmark"]).model == "Ti/16"
    assert parser.parse_args(["benchmark", "--model", "B/16"]).model == "B/16"
    with caplog.at_level(logging.WARNING):
        assert parser.parse_args(["benchmark", "--variant", "S/32"]).model == "S/32"
    assert "--variant is deprecated; use --model." in caplog.text
    # both spellings: the new one given first is not silently replaced by the old one
    with pytest.raises(SystemExit) as raised:
        parser.parse_args(["benchmark", "--model", "B/16", "--variant", "Ti/16"])
    assert raised.value.code == 2
    assert "--variant is the old spelling of --model; give one" in capsys.readouterr().err
    assert parser.parse_args(["benchmark", "--variant", "Ti/16", "--model", "B/16"]).model == "B/16"
    with pytest.raises(SystemExit):
        parser.parse_args(["benchmark", "--help"])
    help_text = capsys.readouterr().out
    assert "--model MODEL" in help_text and "--variant" not in help_text


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


def test_peers_that_do_not_import_are_named_with_the_reason(tmp_path, capsys, monkeypatch):
    from keras_vit.evaluate import benchmarking

    missing = {peer: f"keras_vit_test_missing_{peer}" for peer in benchmarking.PEER_MODULES}
    monkeypatch.setattr(benchmarking, "PEER_MODULES", missing)
    out_file = tmp_path / "bench.json"
    assert main(["benchmark", "--model", TINY, *TINY_RUN, "--peers", "--json", str(out_file)]) == 0
    skipped = json.loads(out_file.read_text())["skipped_peers"]
    assert sorted(skipped) == sorted(missing)
    captured = capsys.readouterr()
    assert "| infer | keras_vit" in captured.out
    for peer, module in missing.items():
        assert f"| infer | {peer}" not in captured.out
        assert f"--peers: {peer} skipped" in captured.err
        assert f"No module named {module!r}" in captured.err
        assert skipped[peer] == f"ModuleNotFoundError: No module named {module!r}"


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
