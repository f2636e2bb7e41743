"""The package's import graph: every module imports alone, and no two modules import each
other, directly or through others (imports inside functions count too)."""

import ast
import pathlib
import subprocess
import sys

import keras_vit

PACKAGE = pathlib.Path(keras_vit.__file__).parent


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _owner(name: str) -> str:
    """The module that `name` (a module or an object inside one) belongs to."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str) -> set[str]:
    """The keras_vit modules `module` imports anywhere in its file."""
    path = MODULES[module]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(_owner(a.name) for a in node.names if a.name.startswith("keras_vit"))
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, path.name == "__init__.py")
            if base.split(".")[0] != "keras_vit":
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in MODULES else _owner(base))
    found.discard(module)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None (depth-first search)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_import_graph_reads_real_imports():
    # Guards the parser itself: edges that exist in the sources are found.
    assert "keras_vit.spec.configs" in imports_of("keras_vit.model.vit")
    assert "keras_vit.checkpoints.base.naming" in imports_of("keras_vit.checkpoints.loading")
    assert "keras_vit.layers" in imports_of("keras_vit.model.builder")


def test_find_cycle_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_package_import_graph_has_no_cycle():
    graph = {module: imports_of(module) for module in MODULES}
    assert find_cycle(graph) is None


def test_every_module_imports_alone():
    """Each module imported first in a clean keras_vit state (TensorFlow stays loaded, the
    package is dropped from sys.modules between modules), in one fresh interpreter."""
    script = (
        "import importlib, sys\n"
        "failed = []\n"
        f"for name in {sorted(MODULES)!r}:\n"
        "    for loaded in [m for m in sys.modules if m.split('.')[0] == 'keras_vit']:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as error:\n"
        "        failed.append(f'{name}: {type(error).__name__}: {error}')\n"
        "print('\\n'.join(failed))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == ""


def test_no_subcommand_imports_another():
    """CLI helpers two subcommands share live in a helper module of keras_vit.cli (`flags`,
    `model_files`, `run_driver`, ...) or in the library."""
    from keras_vit.cli.main import SUBCOMMAND_MODULES

    subcommands = {f"keras_vit.cli.{name}" for name in SUBCOMMAND_MODULES}
    assert subcommands <= set(MODULES)
    offenders = {m: imports_of(m) & subcommands for m in subcommands if imports_of(m) & subcommands}
    assert offenders == {}


# The folders, bottom up (docs/architecture.md draws them): a module may import its own
# folder and the folders of lower ranks, never a higher one (imports inside functions count).
# Private helpers (`keras_vit._*.py`) sit at the bottom; the package facade at the top.
RANKS = {
    "spec": 0,
    "_private": 0,
    "kernels": 1,
    "layers": 2,
    "data": 3,
    "checkpoints": 3,
    "runtime": 3,
    "visualize": 4,
    "model": 5,
    "train": 6,
    "evaluate": 7,
    "export": 7,
    "cli": 8,
    "keras_vit": 9,
}


def folder_of(module: str) -> str:
    """The folder `module` belongs to: `keras_vit.train.runs` -> "train"; a private
    top-level helper (`keras_vit._atomic`) -> "_private"; the package itself -> "keras_vit"."""
    parts = module.split(".")
    if len(parts) == 1:
        return "keras_vit"
    return "_private" if parts[1].startswith("_") else parts[1]


def upward_imports(modules) -> set[tuple[str, str]]:
    return {
        (module, imported)
        for module in modules
        for imported in imports_of(module)
        if RANKS[folder_of(imported)] > RANKS[folder_of(module)]
    }


# Inside a folder with sub-folders, the same rule one level down: a module imports its own
# sub-folder and lower-ranked ones, never a higher one nor a sibling of its rank (the Hugging
# Face and timm formats share `base/`, never each other). "" is the folder's top-level modules
# (its entry points), above every sub-folder.
SUB_RANKS = {
    "checkpoints": {
        "base": 0,
        "release": 1,
        "hf": 1,
        "timm": 1,
        "keras_files": 1,
        "published": 2,
        "": 3,
    },
}


def subfolder_of(module: str) -> str:
    """The sub-folder of `module` inside its folder: `keras_vit.checkpoints.hf.hf_io` -> "hf";
    a module at the top of the folder (`keras_vit.checkpoints.loading`) -> ""."""
    parts = module.split(".")
    folder = folder_of(module)
    if len(parts) > 2 and parts[2] in SUB_RANKS.get(folder, {}):
        return parts[2]
    return ""


def sideways_or_upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(module, imported) pairs of `graph` (module -> what it imports) inside one ranked folder
    where `imported` sits in another sub-folder of the same or a higher rank."""
    found = set()
    for module in graph:
        ranks = SUB_RANKS.get(folder_of(module))
        if ranks is None:
            continue
        mine = subfolder_of(module)
        for imported in graph[module]:
            theirs = subfolder_of(imported)
            if folder_of(imported) == folder_of(module) and theirs != mine:
                if ranks[theirs] >= ranks[mine]:
                    found.add((module, imported))
    return found


def test_every_sub_folder_has_a_rank():
    for folder, ranks in SUB_RANKS.items():
        on_disk = {p.name for p in (PACKAGE / folder).iterdir() if (p / "__init__.py").exists()}
        assert on_disk == set(ranks) - {""}, folder


def test_the_sub_folder_rule_catches_planted_imports():
    with_planted = {
        "keras_vit.checkpoints.hf.hf_io": {"keras_vit.checkpoints.timm.timm_family"},
        "keras_vit.checkpoints.base.naming": {"keras_vit.checkpoints.loading"},
        "keras_vit.checkpoints.loading": {"keras_vit.checkpoints.base.naming"},
    }
    assert sideways_or_upward_imports(with_planted) == {
        ("keras_vit.checkpoints.hf.hf_io", "keras_vit.checkpoints.timm.timm_family"),
        ("keras_vit.checkpoints.base.naming", "keras_vit.checkpoints.loading"),
    }


def test_the_architecture_doc_draws_the_sub_folder_ranks():
    """docs/architecture.md's table of checkpoints/ sub-folders holds SUB_RANKS' ranks."""
    import re

    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    drawn = {}
    for rank, cells in re.findall(r"^\| (\d) \| (.*) \|$", doc, flags=re.M):
        for sub in re.findall(r"`checkpoints/(\w+)/`", cells):
            drawn[sub] = int(rank)
    ranks = {sub: rank for sub, rank in SUB_RANKS["checkpoints"].items() if sub}
    assert drawn == ranks


def test_no_import_runs_up_or_across_the_sub_folders():
    graph = {module: imports_of(module) for module in MODULES}
    assert sideways_or_upward_imports(graph) == set()


def test_every_folder_has_a_rank():
    assert {folder_of(m) for m in MODULES} <= set(RANKS)


def test_the_rank_rule_catches_a_planted_upward_import():
    assert RANKS[folder_of("keras_vit.train.runs")] > RANKS[folder_of("keras_vit.layers.mlp")]
    assert folder_of("keras_vit._atomic") == "_private" and folder_of("keras_vit") == "keras_vit"


def test_no_import_runs_up_the_folders():
    assert upward_imports(MODULES) == set()


def test_no_module_imports_the_package_facade_or_a_missing_path():
    """Inside the package, names come from the module that defines them, never from
    `keras_vit` itself (whose lazy names import upward) nor from a path that is no module of
    the package (`imports_of` gives such a path's nearest existing parent, the facade for a
    top-level one such as `keras_vit.runs`)."""
    offenders = {
        (module, imported)
        for module in MODULES
        if module != "keras_vit"
        for imported in imports_of(module)
        if imported == "keras_vit"
    }
    assert offenders == set()


def test_a_path_that_is_no_module_counts_as_the_facade():
    assert _owner("keras_vit.runs") == "keras_vit"
    assert _owner("keras_vit.layers.mlp.MlpBlock") == "keras_vit.layers.mlp"


def test_from_checkpoint_keeps_its_public_names():
    import keras_vit.checkpoints.from_checkpoint as reader
    import keras_vit.model.from_kwargs

    assert keras_vit.from_checkpoint is keras_vit.model.from_kwargs.from_checkpoint
    assert callable(reader.architecture_kwargs) and callable(reader.model_kwargs)


def test_from_kwargs_does_not_reach_up_to_the_resolver():
    assert "keras_vit.model.from_source" not in imports_of("keras_vit.model.from_kwargs")


def test_the_model_from_anything_module_is_what_its_callers_use():
    assert "keras_vit.model.from_source" in imports_of("keras_vit.train.run_plan")
    assert "keras_vit.model.from_source" in imports_of("keras_vit.cli.convert")
    for caller in ("keras_vit.train.run_plan", "keras_vit.cli.convert"):
        assert "keras_vit.model.vit" not in imports_of(caller)
        assert "keras_vit.model.hybrid" not in imports_of(caller)


def test_kernels_sit_below_the_layers():
    """keras_vit.kernels imports nothing from keras_vit.layers (the layers call dispatch), and
    the layers hold no backend test or TensorFlow import of their own."""
    kernels = [m for m in MODULES if m.startswith("keras_vit.kernels")]
    assert "keras_vit.kernels.dispatch" in kernels
    upward = {(m, i) for m in kernels for i in imports_of(m) if i.startswith("keras_vit.layers")}
    assert upward == set()
    for module, path in MODULES.items():
        if module.startswith("keras_vit.layers"):
            text = path.read_text()
            assert "keras.backend.backend()" not in text, module
            assert "import tensorflow" not in text and "from tensorflow" not in text, module
    assert "keras_vit.kernels.dispatch" in imports_of("keras_vit.layers.attention")
