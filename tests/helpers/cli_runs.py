"""A tiny pre-trained run made with `keras-vit train`, shared by the CLI tests.

Trained once per pytest session (per xdist worker) into the session's base temp folder:
the default recipe's model (the hybrid: ResNet root, then the Transformer) at 8x8 pixels,
5 MNIST images per class, one step (40 images train, 10 carved for validation), no XLA.
"""

import contextlib
import io

from keras_vit.cli.main import main
from keras_vit.train import run_directory

TRAIN_ARGS = [
    "train",
    "--image-size", "8",
    "--shots-per-class", "5",
    "--batch-size", "25",
    "--epochs", "1",
    "--no-jit-compile",
]  # fmt: skip


def pretrained_run(tmp_path_factory):
    """The run directory of the shared tiny MNIST run (trained on first use, with seed 3).

    What `keras-vit train` printed is kept in `<run_dir>.stdout.txt`.
    """
    run_dir = tmp_path_factory.getbasetemp() / "cli_pretrained_run"
    if not run_directory.is_complete(run_dir):
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            status = main([*TRAIN_ARGS, "--seed", "3", "--run-dir", str(run_dir)])
        run_dir.with_suffix(".stdout.txt").write_text(output.getvalue())
        assert status == 0, output.getvalue()
    return run_dir
