"""The public API (README, "Public API and versions"): the `keras_vit` namespace and the
`__all__` of its documented subpackages. Every public name resolves, and the project's own
readers (README.md, the ```python blocks of docs/, examples/) reach keras_vit only through
public names, never through a module file such as `keras_vit.train.runs`."""

from __future__ import annotations

import importlib
import pathlib
import re

import pytest

import keras_vit

ROOT = pathlib.Path(__file__).resolve().parents[1]
SUBPACKAGES = ("checkpoints", "data", "evaluate", "layers", "runtime", "train", "visualize")
"""The documented subpackages; their `__all__` is public."""


def public_names() -> dict[str, set[str]]:
    """The public names by package: "" (the package itself) -> `keras_vit.__all__`; a
    subpackage -> its `__all__`; "configs" -> the size table module's public attributes."""
    names = {"": set(keras_vit.__all__), "configs": set(vars(keras_vit.configs))}
    names["configs"] = {name for name in names["configs"] if not name.startswith("_")}
    for package in SUBPACKAGES:
        names[package] = set(importlib.import_module(f"keras_vit.{package}").__all__)
    return names


@pytest.mark.parametrize("package", ["", *SUBPACKAGES])
def test_every_public_name_resolves(package):
    """Each `_EXPORTS` entry names a module that defines it (a moved module would make the
    name fail here, not in a user's program)."""
    module = importlib.import_module(f"keras_vit.{package}".rstrip("."))
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert missing == []
    assert set(module.__all__) <= set(dir(module))


def test_the_subpackages_are_public_names_of_the_package():
    assert set(SUBPACKAGES) <= set(keras_vit.__all__)
    for package in SUBPACKAGES:
        assert getattr(keras_vit, package) is importlib.import_module(f"keras_vit.{package}")


# --- the project's own readers -------------------------------------------------------------

FROM_IMPORT = re.compile(r"^\s*from (keras_vit[\w.]*) import \(?([\w\s,#()]+?)\)?\s*$", re.M)
IMPORT = re.compile(r"^\s*import (keras_vit[\w.]*)(?: as (\w+))?\s*$", re.M)
DOTTED = re.compile(r"(?<![\w.])(keras_vit(?:\.\w+)+)(?![\w<{])")  # not `keras_vit.ViT_<name>`


def python_sources() -> dict[str, str]:
    """README.md's and docs/*.md's ```python blocks, and examples/*.py, by file name."""
    sources = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        blocks = re.findall(r"^```python\n(.*?)^```", path.read_text(), re.M | re.S)
        sources[path.relative_to(ROOT).as_posix()] = "\n".join(blocks)
    for path in sorted((ROOT / "examples").glob("*.py")):
        sources[path.relative_to(ROOT).as_posix()] = path.read_text()
    return sources


def private_uses(source: str, names: dict[str, set[str]]) -> list[str]:
    """The references to keras_vit in `source` that are no public name: `import` and
    `from ... import` of keras_vit, dotted `keras_vit.a.b` chains, and attributes of a
    subpackage bound to a local name (`from keras_vit import train` -> `train.x`)."""
    found, bound = [], {}

    def check(chain: list[str]) -> None:
        if not chain:
            return
        head, *rest = chain
        if head not in names[""]:
            found.append("keras_vit." + ".".join(chain))
        elif rest and head in names and rest[0] not in names[head]:
            found.append(f"keras_vit.{head}.{rest[0]}")

    for module, imported in FROM_IMPORT.findall(source):
        package = module.split(".")[1:]
        for name in re.findall(r"\b(\w+)\b(?: as (\w+))?", re.sub(r"#.*", "", imported)):
            check([*package, name[0]])
            if not package and name[0] in SUBPACKAGES:
                bound[name[1] or name[0]] = name[0]
    for module, alias in IMPORT.findall(source):
        check(module.split(".")[1:])
        if alias and module.count(".") == 1:
            bound[alias] = module.split(".")[1]
    for chain in DOTTED.findall(source):
        check(chain.split(".")[1:])
    for alias, package in bound.items():
        for attribute in re.findall(rf"(?<![\w.]){alias}\.(\w+)", source):
            if attribute not in names[package]:
                found.append(f"keras_vit.{package}.{attribute} (as {alias}.{attribute})")
    return found


def test_the_reader_catches_module_paths_and_former_flat_paths():
    names = public_names()
    source = (
        "import keras_vit.runs as runs\n"
        "from keras_vit.train.runs import fit_run\n"
        "from keras_vit import data, train\n"
        "data.load('mnist'); train.fit_run; train.runs\n"
        "keras_vit.distribute.resolve_strategy('auto'); keras_vit.runtime.resolve_strategy\n"
        "keras_vit.ViT_B16(num_classes=10); keras_vit.configs.VIT_CONFIGS\n"
    )
    assert set(private_uses(source, names)) == {
        "keras_vit.runs",
        "keras_vit.train.runs",
        "keras_vit.distribute.resolve_strategy",
        "keras_vit.train.runs (as train.runs)",
    }


@pytest.mark.parametrize("name", sorted(python_sources()))
def test_readme_docs_and_examples_use_only_public_names(name):
    assert private_uses(python_sources()[name], public_names()) == []
