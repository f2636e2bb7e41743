"""docs/architecture.md names every module; the docstring examples run; no function of the
package is over 80 lines of code (docstrings not counted)."""

import ast
import doctest
import pathlib

import keras_vit

PACKAGE = pathlib.Path(keras_vit.__file__).parent
DOC = PACKAGE.parent / "docs" / "architecture.md"
MODULE_FILES = sorted(PACKAGE.rglob("*.py"))
MAX_FUNCTION_LINES = 80


def _relative(path: pathlib.Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_the_architecture_doc_names_every_module():
    text = DOC.read_text(encoding="utf-8")
    missing = [_relative(p) for p in MODULE_FILES if f"`{_relative(p)}`" not in text]
    assert missing == [], f"docs/architecture.md does not name {missing}"


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


WITH_EXAMPLES = [_module_name(p) for p in MODULE_FILES if ">>> " in p.read_text()]


def test_some_modules_have_examples():
    assert (
        "keras_vit.spec.configs" in WITH_EXAMPLES and "keras_vit.model.build_any" in WITH_EXAMPLES
    )
    import keras_vit.spec.configs

    assert doctest.testmod(keras_vit.spec.configs).attempted >= 2


def test_the_test_command_runs_the_docstring_examples(pytestconfig):
    """The README's `python -m pytest -q -n 2` collects keras_vit/ with `--doctest-modules`
    (pyproject.toml), so every example above runs as a pytest item of its own."""
    assert "keras_vit" in pytestconfig.getini("testpaths")
    assert "--doctest-modules" in pytestconfig.getini("addopts")


def _code_lines(node) -> int:
    """Lines of a function's body without its docstring (the signature, one argument a line
    in the builders, is not counted; nested functions count in their parent)."""
    body = node.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            body = body[1:]
    return body[-1].end_lineno - body[0].lineno + 1 if body else 0


def long_functions() -> dict[str, int]:
    found = {}
    for path in MODULE_FILES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = _code_lines(node)
                if lines > MAX_FUNCTION_LINES:
                    found[f"{_relative(path)}::{node.name}"] = lines
    return found


# Over the limit today, each to be split like `runs.fit_run` was; the list may only shrink.
KNOWN_LONG: set[str] = set()


def test_the_line_counter_counts_code_not_docstrings():
    tree = ast.parse('def f(\n  x,\n):\n    """doc\n    more"""\n    a = x\n    return a\n')
    assert _code_lines(tree.body[0]) == 2


def test_no_function_is_over_80_lines():
    long = long_functions()
    assert set(long) <= KNOWN_LONG, {k: v for k, v in long.items() if k not in KNOWN_LONG}
