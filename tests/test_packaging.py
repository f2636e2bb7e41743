"""Packaging checks (user reports B09, B37)."""

import ast
import pathlib
import re
import subprocess
import sys

import keras_vit

PACKAGE = pathlib.Path(keras_vit.__file__).parent
SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_b09_imports_cleanly_in_a_fresh_process():
    result = subprocess.run(
        [sys.executable, "-c", "import keras_vit, keras; print(keras.__version__)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().startswith("3.")


def test_b09_no_private_or_legacy_keras_imports():
    pattern = re.compile(r"keras\.src|tensorflow\.python\.keras|tf_keras|keras\.engine")
    offenders = [
        f"{path.relative_to(PACKAGE)}:{lineno}"
        for path in SOURCES
        for lineno, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line) and not line.lstrip().startswith("#")
    ]
    assert offenders == []


def test_b37_training_flag_is_passed_by_keyword():
    """B37: no call passes `training` positionally, e.g. layer(x, True)."""
    offenders = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and len(node.args) >= 2:
                last = node.args[-1]
                if isinstance(last, ast.Constant) and isinstance(last.value, bool):
                    offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
                if isinstance(last, ast.Name) and last.id == "training":
                    offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == []


def test_layers_use_keras_ops_only():
    """Layers and builders run on every Keras backend: no TensorFlow import there."""
    model_code = [*sorted((PACKAGE / "layers").glob("*.py")), *(PACKAGE / "model").glob("*.py")]
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in model_code
        if re.search(r"^\s*(import tensorflow|from tensorflow)", path.read_text(), re.M)
    ]
    assert offenders == []


def test_public_api_of_the_design():
    for name in ("ViT", "ViT_Ti16", "ViT_B16", "ViT_H14", "preprocess_inputs", "layers"):
        assert hasattr(keras_vit, name), name
    for name in ("PatchEmbed", "ClassToken", "AddPositionEmbs", "TransformerBlock"):
        assert hasattr(keras_vit.layers, name), name


def test_lazy_namespace_resolves_every_public_name():
    """keras_vit imports its public names on first use (so `keras-vit --help` stays light);
    each one resolves, and `keras_vit.finetune` stays the function once the sub-module of
    the same name is imported."""
    import importlib

    importlib.import_module("keras_vit.model.finetune")
    for name in keras_vit.__all__:
        assert getattr(keras_vit, name) is not None, name
    assert callable(keras_vit.finetune) and keras_vit.finetune.__name__ == "finetune"
    assert set(keras_vit.__all__) <= set(dir(keras_vit))
    try:
        keras_vit.no_such_name  # noqa: B018
    except AttributeError as error:
        assert "no_such_name" in str(error)
    else:
        raise AssertionError("an unknown attribute must raise AttributeError")


def test_every_runtime_dependency_is_explained_in_the_readme():
    import configparser

    config = configparser.ConfigParser()
    config.read(PACKAGE.parent / "setup.cfg")
    required = [
        re.split(r"[<>=!~\[ ]", line.strip())[0]
        for line in config["options"]["install_requires"].strip().splitlines()
    ]
    readme = (PACKAGE.parent / "README.md").read_text()
    section = readme[readme.index("## Dependencies") :].split("\n## ", 1)[0]
    explained = re.findall(r"^- `([\w.-]+)`: \S", section, flags=re.M)
    assert sorted(explained) == sorted(required)
    assert "keras-cv" in section and "Keras 3" in section


def _extras_of_setup_cfg() -> dict[str, set[str]]:
    import configparser

    config = configparser.ConfigParser()
    config.read(PACKAGE.parent / "setup.cfg")
    return {
        name: {re.split(r"[<>=!~\[ ;]", line.strip())[0] for line in text.strip().splitlines()}
        for name, text in config["options.extras_require"].items()
    }


def test_the_readme_lists_each_extra_with_exactly_its_packages():
    """README.md's "Extras" bullets ("- `NAME`, ...: `package` ...") name every extra of
    setup.cfg and, in backticks, exactly the packages each installs (a description of `dev`
    that leaves most of it out fails)."""
    readme = (PACKAGE.parent / "README.md").read_text()
    section = readme[readme.index("\n## Extras\n") :].split("\n## ", 2)[1]
    bullets = re.findall(r"^- `([\w.-]+)`(.*?)(?=^- |\Z)", section, flags=re.M | re.S)
    listed = {name: set(re.findall(r"`([\w.-]+)`", text)) for name, text in bullets}
    assert listed == _extras_of_setup_cfg()


def test_the_tests_need_no_benchmark_peer():
    """`bench` holds what only the benchmarks (and skippable cross-checks) import: no package
    of it is in `dev`, and the tests that use one skip cleanly without it."""
    extras = _extras_of_setup_cfg()
    assert not extras["bench"] & extras["dev"]
    assert {"jax", "pytest", "hypothesis"} <= extras["dev"]  # the CI's JAX lane needs jax
    tests = PACKAGE.parent / "tests"
    for module in ("keras_hub", "vit_keras", "tensorflow_text", "psutil"):
        for path in tests.rglob("*.py"):
            text = path.read_text()
            imported = re.search(rf"^\s*(import|from) {module}\b", text, flags=re.M)
            assert not imported, f"{path} imports {module} (a bench package) unconditionally"
