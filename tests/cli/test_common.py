"""The flags every model-running subcommand shares: --mixed-precision and --jit-compile."""

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
}


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
