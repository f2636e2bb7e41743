"""keras_vit/_lazy: PEP 562 `__getattr__` / `__dir__` for packages whose public names are
imported on first use, so that `import keras_vit` starts no TensorFlow."""

import subprocess
import sys
import types

import pytest

from keras_vit._lazy import lazy_exports


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


IMPORT_ORDER = (
    "import sys\n"
    "seen = []\n"
    "class Finder:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name in ('keras', 'tensorflow') and name not in seen:\n"
    "            seen.append(name)\n"
    "sys.meta_path.insert(0, Finder())\n"
    "from keras_vit._lazy import import_quietly\n"
    "import_quietly({module!r})\n"
    "print(seen)\n"
)


@pytest.mark.parametrize(
    "module, seen",
    [("tensorflow", "['keras', 'tensorflow']"), ("keras_vit.spec.configs", "[]")],
)
def test_keras_backend_comes_before_tensorflow_and_light_modules_stay_light(module, seen):
    """A lazily imported module asks for Keras (its backend) before TensorFlow; `spec/` starts
    neither (under KERAS_BACKEND=torch, PyTorch imported after TensorFlow crashes)."""
    code = IMPORT_ORDER.format(module=module)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == seen
