"""Subprocess worker: `keras-vit train` (the CLI's own recipe) under MirroredStrategy over two
logical CPUs and under OneDeviceStrategy, same flags, same seed.

The CPU must be split before TensorFlow is used, so this runs in its own process. Each run
writes its run directory under OUT_DIR (`mirrored`, `one_device`); the test reads their
history.csv and metrics.json.

Usage: python cli_recipe_mirrored.py OUT_DIR [extra keras-vit train flags]
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

from keras_vit.cli.main import main  # noqa: E402

FLAGS = ["--image-size", "8", "--shots-per-class", "5", "--batch-size", "10", "--epochs", "1"]


def run():
    out_dir, extra = sys.argv[1], sys.argv[2:]
    for strategy in ("mirrored", "one_device"):
        run_dir = os.path.join(out_dir, strategy)
        args = ["train", *FLAGS, *extra, "--strategy", strategy, "--run-dir", run_dir]
        status = main(args)
        if status:
            raise SystemExit(status)
    print("RESULT done", flush=True)


if __name__ == "__main__":
    run()
