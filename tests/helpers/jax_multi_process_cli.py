"""One JAX process of `keras-vit ARGS` (`python -m tests.helpers.jax_multi_process_cli ARGS`,
started by tests/runtime/test_jax_multi_process_cli.py under KERAS_BACKEND=jax with a
TF_CONFIG each). With KILL_AFTER_EPOCH=E the process SIGKILLs itself at the end of epoch E
(counted from 1), right after its backup of that epoch is written: a process killed between
epochs."""

from __future__ import annotations

import os
import signal
import sys


def add_kill(epoch: int) -> None:
    """Makes the backup callback of `keras_vit.train.runs` (the last of the run's callbacks)
    SIGKILL this process once it has saved epoch `epoch` (from 1)."""
    from keras_vit.train import runs

    make = runs._run_callbacks

    def run_callbacks(*args, **kwargs):
        history, callback_list = make(*args, **kwargs)
        backup = callback_list[-1]
        save = backup.on_epoch_end

        def on_epoch_end(index, logs=None):
            save(index, logs)
            if index + 1 == epoch:
                os.kill(os.getpid(), signal.SIGKILL)

        backup.on_epoch_end = on_epoch_end
        return history, callback_list

    runs._run_callbacks = run_callbacks


if __name__ == "__main__":
    if os.environ.get("KILL_AFTER_EPOCH"):
        add_kill(int(os.environ["KILL_AFTER_EPOCH"]))
    from keras_vit.cli.main import main

    sys.exit(main(sys.argv[1:]))
