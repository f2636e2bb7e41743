"""keras_vit/_lazy: PEP 562 `__getattr__` / `__dir__` for packages whose public names are
imported on first use, so that `import keras_vit` starts no TensorFlow."""

import subprocess
import sys
import types

import pytest

from keras_vit._lazy import configured_backend, lazy_exports
from tests.import_order import imports_asked


def make_package():
    namespace = {"__name__": "pkg", "already": 1}
    exports = {"dumps": "json", "sqrt": "math", "parser": ""}
    getattr_, dir_ = lazy_exports("email", exports, namespace)
    return namespace, getattr_, dir_


def test_a_name_is_imported_from_its_module_and_kept():
    import json
    import math

    namespace, getattr_, _ = make_package()
    assert getattr_("dumps") is json.dumps
    assert getattr_("sqrt") is math.sqrt
    assert namespace["dumps"] is json.dumps and namespace["sqrt"] is math.sqrt


def test_an_empty_module_name_means_the_sub_module():
    namespace, getattr_, _ = make_package()
    import email.parser

    assert getattr_("parser") is email.parser
    assert namespace["parser"] is email.parser


def test_an_unknown_name_raises_attribute_error_naming_it():
    _, getattr_, _ = make_package()
    with pytest.raises(AttributeError, match=r"module 'email' has no attribute 'nothing'"):
        getattr_("nothing")


def test_dir_lists_the_namespace_and_the_exports_sorted():
    _, _, dir_ = make_package()
    assert dir_() == ["__name__", "already", "dumps", "parser", "sqrt"]


def test_a_package_built_with_it():
    package = types.ModuleType("fake")
    package.__getattr__, package.__dir__ = lazy_exports(
        "fake", {"OrderedDict": "collections"}, package.__dict__
    )
    import collections

    assert package.OrderedDict is collections.OrderedDict
    assert "OrderedDict" in vars(package)  # stored: the next look-up skips __getattr__
    assert "OrderedDict" in dir(package)


def test_keras_vit_imports_its_names_on_first_use():
    """`import keras_vit` starts no TensorFlow; a light name and a sub-module ("" rule) are
    imported when asked for, still without it."""
    script = (
        "import sys, keras_vit, keras_vit.checkpoints\n"
        "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules\n"
        "assert {'ViT', 'WeightsWarning', 'configs'} <= set(dir(keras_vit))\n"
        "assert 'WeightsWarning' not in vars(keras_vit)\n"
        "from keras_vit._warnings import WeightsWarning\n"
        "assert keras_vit.WeightsWarning is WeightsWarning\n"
        "import keras_vit.spec.configs\n"
        "assert keras_vit.configs is keras_vit.spec.configs\n"
        "assert 'tensorflow' not in sys.modules\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "ok"


LIGHT_NAMES = (
    "import keras_vit, keras_vit.checkpoints, keras_vit.data\n"
    "keras_vit.configs, keras_vit.WeightsWarning, keras_vit.checkpoints.read_npz\n"
    "keras_vit.checkpoints.detect_format, keras_vit.data.DatasetInfo\n"
)


@pytest.mark.parametrize("backend, seen", [("tensorflow", "[]"), ("torch", "['keras']")])
def test_light_names_stay_light_and_pytorch_gets_keras_first(tmp_path, backend, seen):
    """Names whose modules need neither Keras nor TensorFlow start neither; under
    KERAS_BACKEND=torch a lazy import asks for Keras (PyTorch) first, since PyTorch imported
    after TensorFlow crashes the process. A stub `keras` package stands in (no torch here)."""
    assert imports_asked(tmp_path, backend, LIGHT_NAMES) == seen


@pytest.mark.parametrize(
    "env, json_text, backend",
    [({"KERAS_BACKEND": "torch"}, '{"backend": "jax"}', "torch"),
     ({}, '{"backend": "torch"}', "torch"), ({}, "not json", "tensorflow"),
     ({}, None, "tensorflow"), ({}, '["torch"]', "tensorflow")],
)  # fmt: skip
def test_configured_backend_reads_the_env_then_keras_json(
    tmp_path, monkeypatch, env, json_text, backend
):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    if json_text is not None:
        (tmp_path / "keras.json").write_text(json_text)
    assert configured_backend() == backend


@pytest.mark.slow
def test_tensorflow_only_names_refuse_in_one_line_without_tensorflow(tmp_path):
    """In a KERAS_BACKEND=jax process where TensorFlow cannot be imported: each public name
    that needs it raises one line naming the name and the install command; the model works."""
    from tests.backends.subset import run_subset

    pytest.importorskip("jax")
    env = {"JAX_PLATFORMS": "cpu"}
    result = run_subset("jax", "tests.helpers.without_tensorflow", tmp_path, env=env, timeout=300)
    failed = result["failed"]
    tensorflow_only = {"runtime.resolve_strategy", "export_saved_model", "data.load"}
    assert {f"keras_vit.{name}" for name in tensorflow_only} <= set(failed)
    for name, error in failed.items():
        assert error.startswith(f"ModuleNotFoundError: {name} needs TensorFlow: pip install"), error
        assert "\n" not in error
    assert result["predict_shape"] == [1, 2] and result["tensorflow_loaded"] is False
