"""`keras-vit` itself: --help without TensorFlow, a quiet start-up unless asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from keras_vit.cli.main import SUBCOMMAND_MODULES, build_parser

COMMANDS = [name.replace("_", "-") for name in SUBCOMMAND_MODULES]  # transfer_suite -> -suite

ROOT = Path(__file__).resolve().parents[2]

HELP_PROBE = """
import contextlib, io, json, sys
from keras_vit.cli.main import main
heavy = {}
for command in [None] + sys.argv[1:]:
    argv = [command, "--help"] if command else ["--help"]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            main(argv)
        except SystemExit as exit:
            code = exit.code
    assert code == 0 and "usage: keras-vit" in out.getvalue(), (argv, out.getvalue())
    heavy[command or ""] = [m for m in ("tensorflow", "keras") if m in sys.modules]
print(json.dumps(heavy))
"""


ENTRY_POINT = "import sys; from keras_vit.cli.main import main; sys.exit(main())"


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=str(ROOT), **extra)
    for name in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_VIT_VERBOSE"):
        env.pop(name, None)
    env.update(extra)
    return env


def test_help_of_every_subcommand_imports_no_tensorflow():
    """--help answers from argparse alone: TensorFlow (seconds to import) is never loaded."""
    done = subprocess.run(
        [sys.executable, "-c", HELP_PROBE, *COMMANDS],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
        check=True,
    )
    heavy = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(heavy) == {"", *COMMANDS}
    assert heavy == {command: [] for command in heavy}


def _unknown_dataset(tmp_path, **env):
    """A command that starts TensorFlow and then fails on its argument (exit 2): the dataset
    name is checked by the data sources, after TensorFlow is imported (a missing file, as
    `convert missing.npz`, is refused before)."""
    return subprocess.run(
        [sys.executable, "-c", ENTRY_POINT, "train", "--dataset", "mnits"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(**env),
        timeout=300,
    )


def test_start_up_is_quiet_unless_verbose(tmp_path):
    quiet = _unknown_dataset(tmp_path)
    assert quiet.returncode == 2
    assert quiet.stderr.splitlines() == [quiet.stderr.strip()]  # one line: the error
    assert quiet.stderr.startswith("keras-vit train: error: Unknown data source")
    # KERAS_VIT_VERBOSE=1 lets TensorFlow's C++ start-up block through (oneDNN, CUDA probe,
    # CPU features: printed on every machine) before the same error line.
    verbose = _unknown_dataset(tmp_path, KERAS_VIT_VERBOSE="1")
    assert verbose.returncode == 2
    assert len(verbose.stderr.splitlines()) > 1
    assert verbose.stderr.splitlines()[-1] == quiet.stderr.strip()
    assert not (tmp_path / "runs").exists()


PYTHON_USER = """
import keras_vit
model = keras_vit.ViT(image_size=8, patch_size=4, hidden_dim=8, num_heads=2, mlp_dim=8,
                      num_layers=1, num_classes=2)
import numpy as np
print(model.predict(np.zeros((1, 8, 8, 3)), verbose=0).shape)
"""


def test_python_users_get_a_quiet_tensorflow_start_unless_they_set_its_log_level(tmp_path):
    """`import keras_vit` and a first model: TensorFlow's start-up block (oneDNN notice,
    "E0000 ... failed call to cuInit" on CPU machines) is hidden; a user's own
    TF_CPP_MIN_LOG_LEVEL (here 0, show everything) or KERAS_VIT_VERBOSE=1 lets it through."""

    def run(**env):
        done = subprocess.run(
            [sys.executable, "-c", PYTHON_USER],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=_env(**env),
            timeout=300,
        )
        assert done.returncode == 0 and done.stdout.strip() == "(1, 2)", done.stderr[-2000:]
        return done.stderr

    assert run() == ""
    shown = run(TF_CPP_MIN_LOG_LEVEL="0")
    assert "absl::InitializeLog()" in shown or "I0000" in shown, shown


@pytest.mark.parametrize(
    "argv, verbose",
    [
        (["train"], False),
        (["-v", "train"], True),
        (["train", "--verbose"], True),
        (["--verbose", "evaluate", "RUN"], True),
    ],
)
def test_verbose_before_or_after_the_subcommand(argv, verbose):
    assert build_parser().parse_args(argv).verbose is verbose


def test_version_prints_the_package_version_without_tensorflow():
    """`keras-vit --version`, as argparse's version action prints it; TensorFlow not loaded."""
    probe = (
        "import sys\nfrom keras_vit.cli.main import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit as exit:\n    assert exit.code == 0\n"
        "assert 'tensorflow' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=_env(), timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    from keras_vit._version import __version__

    assert done.stdout.strip() == f"keras-vit {__version__}"


def test_a_new_subcommand_is_one_module_and_one_name(monkeypatch, capsys):
    """Adding a subcommand touches `cli/<name>.py` (add_parser, run) and its name in
    SUBCOMMAND_MODULES: the parser, the help and the exit codes follow (docs/architecture.md,
    "Where to add"; the doc's `cli/*.py` row names the module)."""
    import types

    from keras_vit.cli import main as cli_main

    def add_parser(subparsers):
        parser = subparsers.add_parser("hello", help="say hello to a model name")
        parser.add_argument("name")
        parser.set_defaults(func=run)
        return parser

    def run(args):
        if args.name == "bad":
            raise cli_main.UsageError("'bad' is no name")
        print(f"hello {args.name}")
        return 0

    module = types.ModuleType("keras_vit.cli.hello")
    module.add_parser, module.run = add_parser, run
    monkeypatch.setitem(sys.modules, "keras_vit.cli.hello", module)
    monkeypatch.setattr(cli_main, "SUBCOMMAND_MODULES", [*SUBCOMMAND_MODULES, "hello"])
    with pytest.raises(SystemExit):
        cli_main.main(["--help"])
    assert "say hello to a model name" in capsys.readouterr().out
    assert cli_main.main(["hello", "B/16"]) == 0
    assert capsys.readouterr().out.strip().endswith("hello B/16")
    assert cli_main.main(["hello", "bad"]) == 2
    assert "keras-vit hello: error: 'bad' is no name" in capsys.readouterr().err
