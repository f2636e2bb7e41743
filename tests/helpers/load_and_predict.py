"""Subprocess worker for user-report row B40: load a saved model in a fresh process.

Splits the CPU into two logical devices, loads MODEL_PATH (safe mode) once outside any
strategy scope and once inside `MirroredStrategy(2 CPUs).scope()`, predicts on INPUTS_NPY
with both, and writes the predictions to OUT_DIR/outside.npy and OUT_DIR/inside.npy.

Usage: python load_and_predict.py MODEL_PATH INPUTS_NPY OUT_DIR
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import numpy as np  # noqa: E402

from keras_vit.train import runs  # noqa: E402


def main():
    model_path, inputs_path, out_dir = sys.argv[1:4]
    inputs = np.load(inputs_path)
    outside = runs.load_model(model_path)
    np.save(os.path.join(out_dir, "outside.npy"), outside.predict(inputs, verbose=0))
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        inside = runs.load_model(model_path)
    np.save(os.path.join(out_dir, "inside.npy"), inside.predict(inputs, verbose=0))
    print("RESULT done", flush=True)


if __name__ == "__main__":
    main()
