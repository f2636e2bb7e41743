"""The flags subcommands share: --mixed-precision and --jit-compile (every subcommand that
runs a model), --quiet (every one that prints progress or chatter besides its result)."""

import pytest

from keras_vit.cli.main import build_parser

# subcommand -> the positional arguments it needs to parse
SUBCOMMANDS = {
    "train": [],
    "finetune": [],
    "evaluate": ["run"],
    "predict": ["run", "image.png"],
    "export": ["run", "serving"],
    "benchmark": [],
    "fewshot": ["run"],
    "transfer-suite": ["run"],
}

# and the subcommands with --quiet (explain prints only its result: no flag)
QUIET_SUBCOMMANDS = {**SUBCOMMANDS, "convert": ["src.npz", "dst.keras"]}


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
@pytest.mark.parametrize(
    "flags, expected",
    [
        ([], ("auto", "auto")),
        (["--mixed-precision", "mixed_bfloat16"], ("mixed_bfloat16", "auto")),
        (["--jit-compile"], ("auto", True)),
        (["--jit-compile", "false"], ("auto", False)),
        (["--jit-compile", "on"], ("auto", True)),
        (["--no-jit-compile", "--mixed-precision", "float32"], ("float32", False)),
    ],
)
def test_one_spelling_in_every_subcommand(command, flags, expected):
    args = build_parser().parse_args([command, *SUBCOMMANDS[command], *flags])
    assert (args.mixed_precision, args.jit_compile) == expected


@pytest.mark.parametrize("flags", [["--mixed-precision", "half"], ["--jit-compile", "maybe"]])
def test_bad_values_are_argparse_errors(flags, capsys):
    with pytest.raises(SystemExit) as raised:
        build_parser().parse_args(["train", *flags])
    assert raised.value.code == 2
    assert flags[1] in capsys.readouterr().err


@pytest.mark.parametrize("command", sorted(QUIET_SUBCOMMANDS))
def test_quiet_in_every_subcommand_that_prints_more_than_its_result(command):
    parser = build_parser()
    assert parser.parse_args([command, *QUIET_SUBCOMMANDS[command]]).quiet is False
    assert parser.parse_args([command, *QUIET_SUBCOMMANDS[command], "--quiet"]).quiet is True


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
@pytest.mark.parametrize("after", [[], ["--no-jit-compile"]])
def test_a_bare_mixed_precision_is_an_error_listing_the_values(command, after, capsys):
    with pytest.raises(SystemExit) as raised:
        build_parser().parse_args([command, *SUBCOMMANDS[command], "--mixed-precision", *after])
    assert raised.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error == (
        f"keras-vit {command}: error: argument --mixed-precision: needs a value, one of auto, "
        "float32, mixed_float16, mixed_bfloat16 (e.g. --mixed-precision mixed_bfloat16); a "
        f"bare --mixed-precision has no meaning (see keras-vit {command} --help)"
    )


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_help_shows_which_value_is_optional(command, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "--mixed-precision POLICY auto, float32, mixed_float16, mixed_bfloat16;" in text
    assert "--jit-compile [{auto,true,false}] compile with XLA" in text
    assert "--no-jit-compile same as --jit-compile false" in text


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
@pytest.mark.parametrize(
    "flags",
    [
        ["--jit-compile", "true", "--no-jit-compile"],
        ["--no-jit-compile", "--jit-compile"],
        ["--jit-compile", "false", "--no-jit-compile"],  # agreeing, but two spellings
    ],
)
def test_jit_compile_and_no_jit_compile_together_are_refused(command, flags, capsys):
    """Which one would win was the order on the line: refused instead of guessed."""
    with pytest.raises(SystemExit) as raised:
        build_parser().parse_args([command, *SUBCOMMANDS[command], *flags])
    assert raised.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["train", "finetune", "transfer-suite"])
@pytest.mark.parametrize("run_dir", ["", "  "])
def test_an_empty_run_dir_is_refused_not_replaced_by_the_default(command, run_dir, capsys):
    with pytest.raises(SystemExit) as raised:
        build_parser().parse_args([command, *SUBCOMMANDS[command], "--run-dir", run_dir])
    assert raised.value.code == 2
    assert f"argument --run-dir: expected a folder path, got {run_dir!r}" in capsys.readouterr().err
