"""keras_vit's layers are registered with Keras once both packages are imported, in either
order, and `import keras_vit` alone starts no TensorFlow (keras_vit/_registration.py)."""

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
for name in sys.argv[1].split(","):
    __import__(name)
    if name == "keras_vit":
        tensorflow_after_keras_vit = "tensorflow" in sys.modules
import keras
# read the registry before anything imports keras_vit.layers explicitly
registered = sorted(k.split(">", 1)[1] for k in keras.saving.get_custom_objects()
                    if k.startswith("keras_vit>"))
hooks = [type(f).__name__ for f in sys.meta_path]
import keras_vit.layers
print(json.dumps({"names": sorted(keras_vit.layers.__all__), "registered": registered,
                  "tensorflow_after_keras_vit": tensorflow_after_keras_vit,
                  "keras_loader": type(keras.__spec__.loader).__name__, "hooks": hooks}))
"""


@pytest.mark.parametrize(
    "order",
    # the third is the CLI's: TensorFlow probes for keras (find_spec) while it imports
    ["keras_vit,keras", "keras,keras_vit", "keras_vit,tensorflow,keras"],
)
def test_layers_are_registered_whatever_the_import_order(order):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, order], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(report["names"]) >= 10
    assert set(report["names"]) <= set(report["registered"])
    assert "WarmupSchedule" in report["registered"]  # a training run's optimizer schedule
    assert report["tensorflow_after_keras_vit"] is (order == "keras,keras_vit")
    assert report["keras_loader"] == "SourceFileLoader"  # Keras keeps its own loader
    assert "_AfterKerasImport" not in report["hooks"]  # the hook is one-shot
