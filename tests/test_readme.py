"""README.md runs as written.

Convention: a fenced ```bash block directly preceded by the line `<!-- runnable -->` holds
commands a reader can paste; `<!-- runnable, not executed: REASON -->` marks one the tests
do not run, and says why (it installs packages, starts a server, is the test suite itself,
or is run by another test). Each `keras-vit <subcommand> [flags]` must name a registered
subcommand and only flags its parser knows; each `python examples/<name>.py [flags]` must
name an existing example whose parser accepts those flags.

Executed: every ```python block of the README (in a fresh interpreter, in an empty folder)
and every `<!-- runnable -->` shell block, whose `keras-vit` commands run in that folder
with `TINY_FLAGS` appended (later flags win in argparse), so a minutes-long `keras-vit train`
becomes a seconds-long one with the same code path.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNABLE_MARK = "<!-- runnable -->"
MARK = re.compile(r"^<!-- runnable(?:, not executed: (?P<reason>\S.*?))? -->$")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


# --- extraction ---------------------------------------------------------------------------------


def marked_blocks(markdown: str) -> list[tuple[str, str | None]]:
    """(body, reason) of the ```bash blocks directly preceded by a runnable mark; reason is
    None for blocks the tests execute."""
    lines = markdown.splitlines()
    blocks = []
    for index, line in enumerate(lines[:-1]):
        mark = MARK.match(line.strip())
        if not mark or lines[index + 1].strip() not in ("```bash", "```sh"):
            continue
        body = []
        for inner in lines[index + 2 :]:
            if inner.strip().startswith("```"):
                break
            body.append(inner)
        else:
            raise ValueError(f"runnable block after line {index + 1} is never closed")
        blocks.append(("\n".join(body), mark["reason"]))
    return blocks


def runnable_blocks(markdown: str) -> list[str]:
    """The bodies of the ```bash blocks directly preceded by a runnable mark."""
    return [body for body, _ in marked_blocks(markdown)]


def python_blocks(markdown: str) -> list[str]:
    """The bodies of every ```python block."""
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.M | re.S)


def block_commands(block: str) -> list[list[str]]:
    """Simple commands of a shell block as token lists: continuation lines joined, comments
    dropped, split at `&&`, `||`, `;` and `|`, leading VAR=value assignments removed."""
    joined = re.sub(r"\\\n", " ", block)
    commands = []
    for line in joined.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current: list[str] = []
        for token in lexer:
            if token in (";", "&&", "||", "|", "&"):
                commands.append(current)
                current = []
            else:
                current.append(token)
        commands.append(current)
    cleaned = []
    for tokens in commands:
        while tokens and ENV_ASSIGNMENT.match(tokens[0]):
            tokens = tokens[1:]
        if tokens:
            cleaned.append(tokens)
    return cleaned


def runnable_commands(markdown: str) -> list[list[str]]:
    return [command for block in runnable_blocks(markdown) for command in block_commands(block)]


# --- checking -----------------------------------------------------------------------------------


def _option_names(tokens: list[str]) -> list[str]:
    """The option names used in `tokens` (`--flag=value` -> `--flag`); `--` ends options."""
    names = []
    for token in tokens:
        if token == "--":
            break
        if token.startswith("-") and len(token) > 1 and not re.fullmatch(r"-[\d.]+", token):
            names.append(token.split("=", 1)[0])
    return names


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def check_keras_vit(tokens: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """Problems with one `keras-vit ...` command: unknown subcommand or flags."""
    args = tokens[1:]
    top_options = set(parser._option_string_actions)
    while args and args[0] in top_options:  # global flags such as -v
        args = args[1:]
    if not args or args[0] in ("-h", "--help"):
        return []
    subcommands = _subparsers(parser)
    if args[0] not in subcommands:
        return [f"`keras-vit {args[0]}`: no such subcommand (known: {sorted(subcommands)})"]
    known = set(subcommands[args[0]]._option_string_actions)
    return [
        f"`keras-vit {args[0]}`: unknown flag {name}"
        for name in _option_names(args[1:])
        if name not in known
    ]


def load_example(path: Path):
    """Imports an example module (cheap: the examples import TensorFlow only inside main)."""
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_example(tokens: list[str], root: Path) -> list[str]:
    """Problems with one `python examples/<name>.py ...` command: missing file, bad flags."""
    script = next((t for t in tokens[1:] if t.endswith(".py")), None)
    if script is None:
        return []  # `python -m pytest`, `python -c ...`: not an example
    path = root / script
    if not path.is_file():
        return [f"`{script}` does not exist"]
    parser = load_example(path).build_parser()
    args = tokens[tokens.index(script) + 1 :]
    known = set(parser._option_string_actions)
    problems = [f"`{script}`: unknown flag {n}" for n in _option_names(args) if n not in known]
    if not problems:
        try:
            parser.parse_args(args)
        except SystemExit:
            problems.append(f"`{script}`: arguments {args} do not parse")
    return problems


def check_commands(commands, root: Path) -> list[str]:
    from keras_vit.cli.main import build_parser

    parser = build_parser()
    problems = []
    for tokens in commands:
        if tokens[0] == "keras-vit":
            problems += check_keras_vit(tokens, parser)
        elif Path(tokens[0]).name.startswith("python") and len(tokens) > 1:
            problems += check_example(tokens, root)
    return problems


# --- the extraction itself, on a fixture README -------------------------------------------------

FIXTURE = """\
# A project

```bash
keras-vit not-runnable --whatever
```

<!-- runnable -->
```bash
pip install -e ".[dev]" && keras-vit export runs/mnist serving/vit --top-k 3
# a comment line
TF_CPP_MIN_LOG_LEVEL=2 python examples/train_from_scratch.py --quick \\
    --out /tmp/x  # trailing comment
keras-vit -v explain runs/pets cat.jpg --out=map.png | tee log.txt
```

<!-- runnable -->

```bash
keras-vit also-not-runnable
```

<!-- runnable -->
```python
print("not a shell block")
```

<!-- runnable, not executed: starts a server -->
```bash
tensorboard --logdir runs
```
"""


def test_runnable_blocks_only_marked_bash_fences():
    blocks = marked_blocks(FIXTURE)
    assert len(blocks) == 2  # unmarked, separated-by-a-blank-line and python blocks excluded
    assert "not-runnable" not in blocks[0][0] and blocks[0][1] is None
    assert blocks[1] == ("tensorboard --logdir runs", "starts a server")
    assert python_blocks(FIXTURE) == ['print("not a shell block")\n']


def test_block_commands_split_join_and_strip():
    commands = runnable_commands(FIXTURE)
    assert commands == [
        ["pip", "install", "-e", ".[dev]"],
        ["keras-vit", "export", "runs/mnist", "serving/vit", "--top-k", "3"],
        ["python", "examples/train_from_scratch.py", "--quick", "--out", "/tmp/x"],
        ["keras-vit", "-v", "explain", "runs/pets", "cat.jpg", "--out=map.png"],
        ["tee", "log.txt"],
        ["tensorboard", "--logdir", "runs"],
    ]


def test_fixture_commands_pass_the_check():
    assert check_commands(runnable_commands(FIXTURE), ROOT) == []


def test_check_reports_unknown_subcommand_flag_and_example():
    bad = runnable_commands(
        "<!-- runnable -->\n```bash\n"
        "keras-vit frobnicate --x\n"
        "keras-vit export a b --no-such-flag 1\n"
        "python examples/no_such_example.py --quick\n"
        "python examples/train_from_scratch.py --quick --no-such-flag\n"
        "python examples/distributed_training.py --strategy bogus\n"
        "```\n"
    )
    problems = check_commands(bad, ROOT)
    assert len(problems) == 5, problems
    assert "frobnicate" in problems[0]
    assert "--no-such-flag" in problems[1]
    assert "does not exist" in problems[2]
    assert "--no-such-flag" in problems[3]
    assert "do not parse" in problems[4]


def test_unclosed_runnable_block_is_an_error():
    with pytest.raises(ValueError, match="never closed"):
        runnable_blocks("<!-- runnable -->\n```bash\nkeras-vit train\n")


# --- the real documents -------------------------------------------------------------------------


@pytest.mark.parametrize("document", ["README.md", "docs/examples.md", "docs/serving.md"])
def test_document_commands_exist(document):
    """Every runnable command of the document names a real subcommand/example and real flags."""
    path = ROOT / document
    if not path.is_file():
        pytest.skip(f"{document} not written yet")
    commands = runnable_commands(path.read_text())
    if not commands:
        pytest.skip(f"{document} marks no block `{RUNNABLE_MARK}` yet")
    assert check_commands(commands, ROOT) == []


def _export_commands_by_section(markdown: str) -> dict[str, list[list[str]]]:
    """{`### ` heading: the `keras-vit export` commands of the runnable blocks under it}."""
    sections = re.split(r"^### ", markdown, flags=re.M)[1:]
    return {
        section.splitlines()[0].strip(): [
            tokens for tokens in runnable_commands(section) if tokens[:2] == ["keras-vit", "export"]
        ]
        for section in sections
    }


def test_serving_document_has_a_section_per_format_with_its_accepted_commands():
    """docs/serving.md: a `### `format`` section for every export format, whose commands parse,
    name that format, are accepted by `check_format`, and show the float32 export and, where
    the format takes quantization, its int8 export."""
    from keras_vit.cli.main import build_parser
    from keras_vit.spec.export_formats import FORMATS, QUANTIZED_FORMATS, check_format

    sections = _export_commands_by_section((ROOT / "docs" / "serving.md").read_text())
    parser = build_parser()
    for format in FORMATS:
        commands = sections.get(f"`{format}`")
        assert commands, f"docs/serving.md has no section `{format}` with a runnable command"
        modes = set()
        for tokens in commands:
            args = parser.parse_args(tokens[1:])
            assert args.format == format, tokens
            check_format(args.format, args.quantize)
            modes.add(args.quantize)
        assert None in modes, f"`{format}`: no float32 command"
        assert modes - {None} <= set(QUANTIZED_FORMATS.get(format, ()))
        if format in QUANTIZED_FORMATS:
            assert "int8" in modes, f"`{format}` takes int8 but its section shows no command"


def test_examples_document_names_every_example():
    """docs/examples.md (the README's Examples table) runs each example in its runnable block."""
    scripts = {p.name for p in (ROOT / "examples").glob("*.py")}
    named = {
        Path(token).name
        for command in runnable_commands((ROOT / "docs" / "examples.md").read_text())
        for token in command
        if token.startswith("examples/")
    }
    assert scripts and scripts <= named


# --- README.md runs as written -------------------------------------------------------

# Appended to the README's `keras-vit` commands when the tests run them: the same code path
# on a tiny problem (8x8 MNIST, 5 images per class, one epoch; 2 fine-tuning steps at 16 px).
TINY_FLAGS = {
    "train": ["--image-size", "8", "--shots-per-class", "5", "--batch-size", "25"]
    + ["--epochs", "1", "--no-jit-compile"],
    "finetune": ["--image-size", "16", "--steps", "2", "--batch-size", "20", "--no-jit-compile"],
}
README = ROOT / "README.md"


def test_readme_python_fits_print_a_line_per_epoch():
    """Keras' bar (`verbose=1`, fit's default) redraws itself with \r and \b even when the
    output goes to a file (Keras takes any POSIX system for a terminal): each `fit` of the
    README's Python passes `verbose=2` (or 0)."""
    fits = re.findall(r"\.fit\((.*?)\)\n", "".join(python_blocks(README.read_text())), re.S)
    assert fits, "the README's Python fits no model"
    assert all(re.search(r"\bverbose=[02]\b", arguments) for arguments in fits), fits


@pytest.mark.slow
def test_readme_python_blocks_run_as_written(tmp_path):
    """Each ```python block runs in a fresh interpreter in an empty folder, unchanged."""
    blocks = python_blocks(README.read_text())
    assert blocks, "the README has no Python block"
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    for number, block in enumerate(blocks, 1):
        folder = tmp_path / f"block{number}"
        folder.mkdir()
        done = subprocess.run(
            [sys.executable, "-c", block],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"block {number}:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
        # what a file or a log receives: lines, no bar redrawn in place with \r and \b
        long = [line[:200] for line in done.stdout.split("\n") if len(line) > 120]
        assert not long and "\r" not in done.stdout, f"block {number}: {long}"
    story = tmp_path / "block1"  # the "From Python" story writes what it says it writes
    assert (story / "mine.npz").is_file()
    assert (story / "serving" / "mnist_vit" / "1" / "saved_model.pb").is_file()


@pytest.mark.slow
def test_readme_executed_shell_blocks_run(tmp_path, monkeypatch):
    """Every `<!-- runnable -->` block of the README runs, its `keras-vit` commands made tiny."""
    from keras_vit.cli.main import main

    executed = [body for body, reason in marked_blocks(README.read_text()) if reason is None]
    assert executed, "the README executes no shell block"
    monkeypatch.chdir(tmp_path)
    for body in executed:
        for tokens in block_commands(body):
            assert tokens[0] == "keras-vit", f"executed blocks run keras-vit only: {tokens}"
            argv = [*tokens[1:], *TINY_FLAGS.get(tokens[1], [])]
            assert main(argv) == 0, f"`{' '.join(tokens)}` failed"
    assert list((tmp_path / "runs").glob("train-*/best.keras"))  # the Quick start's run
    assert (tmp_path / "serving" / "digits" / "1" / "saved_model.pb").is_file()


def test_blocks_not_executed_say_why_and_are_covered_elsewhere():
    """A not-executed block gives its reason; one left to tests/test_examples.py names only
    examples that test runs."""
    from tests.test_examples import EXAMPLE_NAMES

    skipped = [(body, reason) for body, reason in marked_blocks(README.read_text()) if reason]
    assert skipped
    for body, reason in skipped:
        if "tests/test_examples.py" in reason:
            names = {
                Path(token).stem
                for tokens in block_commands(body)
                for token in tokens
                if token.startswith("examples/")
            }
            assert names and names <= set(EXAMPLE_NAMES)
