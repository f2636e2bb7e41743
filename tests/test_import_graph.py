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
    assert "keras_vit.configs" in imports_of("keras_vit.models")
    assert "keras_vit.checkpoints.naming" in imports_of("keras_vit.checkpoints.loading")
    assert "keras_vit.layers" in imports_of("keras_vit.builder")


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
    """CLI helpers two subcommands share live in keras_vit.cli.common (or the library)."""
    from keras_vit.cli.main import SUBCOMMAND_MODULES

    subcommands = {f"keras_vit.cli.{name}" for name in SUBCOMMAND_MODULES}
    assert subcommands <= set(MODULES)
    offenders = {m: imports_of(m) & subcommands for m in subcommands if imports_of(m) & subcommands}
    assert offenders == {}


# The layers, bottom up: what a lower module may not import (imports inside functions count).
BELOW_THE_BUILDERS = ("keras_vit.checkpoints", "keras_vit.kernels", "keras_vit.layers")
BELOW_THE_BUILDERS_MODULES = ("keras_vit.configs", "keras_vit.builder", "keras_vit.layer_names")
ABOVE_THE_BUILDERS = (
    "keras_vit.models",
    "keras_vit.hybrid",
    "keras_vit.model_source",
    "keras_vit.run_plan",
    "keras_vit.runs",
    "keras_vit.training",
    "keras_vit.finetune",
    "keras_vit.cli",
)
# No door left open: `keras_vit.from_checkpoint` lives in build_any, above the builders, and
# reads the file through checkpoints/from_checkpoint.py (below them).
KNOWN_UPWARD: set[tuple[str, str]] = set()


def _is_below(module: str) -> bool:
    return module.startswith(BELOW_THE_BUILDERS) or module in BELOW_THE_BUILDERS_MODULES


def test_no_import_runs_up_from_below_the_builders():
    upward = {
        (module, imported)
        for module in MODULES
        if _is_below(module)
        for imported in imports_of(module)
        if imported.startswith(ABOVE_THE_BUILDERS) or imported == "keras_vit.build_any"
    }
    assert upward == KNOWN_UPWARD
    # build_any reaches up to the builders only, never to the resolver above it.
    assert "keras_vit.model_source" not in imports_of("keras_vit.build_any")


def test_from_checkpoint_keeps_its_public_names():
    import keras_vit.build_any
    import keras_vit.checkpoints.from_checkpoint as reader

    assert keras_vit.from_checkpoint is keras_vit.build_any.from_checkpoint
    assert callable(reader.architecture_kwargs) and callable(reader.model_kwargs)


def test_the_model_from_anything_module_is_what_its_callers_use():
    assert "keras_vit.model_source" in imports_of("keras_vit.run_plan")
    assert "keras_vit.model_source" in imports_of("keras_vit.cli.convert")
    for caller in ("keras_vit.run_plan", "keras_vit.cli.convert"):
        assert "keras_vit.models" not in imports_of(caller)
        assert "keras_vit.hybrid" not in imports_of(caller)


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
