"""keras_vit/_aliases: every module path of the flat layout (`keras_vit.runs`,
`keras_vit.configs`, ...) imports as the very module now under spec/, model/, runtime/,
train/ or evaluate/ (one object, its own `__spec__.name`), and `.keras` files are unaffected."""

import importlib
import json
import subprocess
import sys
import zipfile

import keras
import numpy as np
import pytest

from keras_vit import _aliases

# The flat layout's modules and where they went (the move's commit, written out by hand).
FORMER = {
    "spec": ["configs", "layer_names", "run_config_file", "kept_model", "resize_methods",
             "image_formats"],
    "model": ["builder", "models", "hybrid", "build_any", "model_source", "finetune"],
    "runtime": ["precision", "precision_probe", "optimizers", "distribute"],
    "train": ["training", "run_plan", "runs", "run_lock", "callbacks", "learning_curves",
              "worker_restart"],
    "evaluate": ["fewshot", "transfer_suite", "benchmarking"],
}  # fmt: skip
EXPECTED = {f"keras_vit.{n}": f"keras_vit.{d}.{n}" for d, names in FORMER.items() for n in names}
EXPECTED["keras_vit.test_selection"] = "keras_vit.train.selection"
EXPECTED.update(  # model/ files renamed for what they hold
    {
        "keras_vit.models": "keras_vit.model.vit",
        "keras_vit.build_any": "keras_vit.model.from_kwargs",
        "keras_vit.model_source": "keras_vit.model.from_source",
    }
)


def test_the_table_is_the_move():
    assert _aliases.MOVED == EXPECTED


@pytest.mark.parametrize("former, new", sorted(EXPECTED.items()))
def test_former_path_is_the_module_itself(former, new):
    old_module = importlib.import_module(former)
    new_module = importlib.import_module(new)
    assert old_module is new_module
    assert sys.modules[former] is new_module
    assert new_module.__spec__.name == new_module.__name__ == new


def test_former_paths_in_a_fresh_interpreter():
    """Imported first under the former name (before anything imported the new one): still
    one module, named by its new path; `from keras_vit import x` and `from keras_vit.x import
    name` work; a patch through either name is seen through the other."""
    script = """
import keras_vit.configs as old
import keras_vit.spec.configs as new
assert old is new, (old, new)
assert new.__spec__.name == new.__name__ == "keras_vit.spec.configs", new.__spec__.name
from keras_vit import test_selection, kept_model
from keras_vit.train import selection
from keras_vit.spec import kept_model as kept
assert test_selection is selection and kept_model is kept
from keras_vit.configs import resolve_model
assert resolve_model is new.resolve_model
old.resolve_model = "patched"
assert new.resolve_model == "patched"
try:
    import keras_vit.no_such_module
except ModuleNotFoundError as error:
    assert "keras_vit.no_such_module" in str(error)
else:
    raise AssertionError("an unknown path imported")
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "ok"


def test_install_puts_one_finder_on_the_path():
    _aliases.install()
    _aliases.install()
    finders = [f for f in sys.meta_path if type(f).__name__ == "_FormerPaths"]
    assert len(finders) == 1
    assert finders[0].find_spec("keras_vit.spec.configs") is None
    assert finders[0].find_spec("keras_vit.train") is None


def test_a_keras_file_names_no_former_path(tmp_path, tiny_vit_kwargs):
    import keras_vit

    model = keras_vit.ViT(**tiny_vit_kwargs)
    path = tmp_path / "m.keras"
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
    modules = set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("module"), str):
                modules.add(node["module"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config)
    assert modules and not modules & set(EXPECTED)
    x = np.random.default_rng(0).uniform(-1, 1, (1, *model.input_shape[1:])).astype("float32")
    np.testing.assert_allclose(keras.saving.load_model(path)(x), model(x), rtol=1e-6, atol=1e-6)
