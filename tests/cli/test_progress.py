"""Output modes of the long commands: a bar on a terminal, lines in a file, --quiet."""

from __future__ import annotations

import argparse
import io

import pytest

from keras_vit.cli import progress


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def _args(argv):
    parser = argparse.ArgumentParser()
    progress.add_output_arguments(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    "argv, stream, mode",
    [
        ([], _Terminal(), "batch"),
        ([], io.StringIO(), "epoch"),  # a file or a pipe
        (["--log-every", "epoch"], _Terminal(), "epoch"),
        (["--log-every", "batch"], io.StringIO(), "batch"),
        (["--quiet"], _Terminal(), "quiet"),
        (["--quiet", "--log-every", "batch"], _Terminal(), "quiet"),
    ],
)
def test_output_mode(argv, stream, mode):
    assert progress.output_mode(_args(argv), stream) == mode
    assert progress.keras_verbose(mode) == (1 if mode == "batch" else 0)


def test_epoch_line_has_number_time_and_every_log():
    out = io.StringIO()
    callback = progress.epoch_lines(out)
    callback.set_params({"epochs": 15, "steps": 3, "verbose": 0})
    callback.on_epoch_begin(2)
    callback.on_epoch_end(2, {"loss": 0.81234, "accuracy": 0.741})
    line = out.getvalue()
    assert line.endswith("\n") and line.count("\n") == 1
    assert line.startswith("epoch 3/15  ")
    assert line.rstrip().endswith(" s  loss 0.8123  accuracy 0.7410")


def test_start_line_of_a_finetune_run_names_the_source_and_the_chosen_precision():
    record = {
        "run": {"task": "finetune", "weights": "runs/mnist/best.npz", "model": "default"},
        "resolved": {
            "dataset": "digits",
            "num_train_examples": 100,
            "num_classes": 10,
            "image_size": [40, 40],
            "model_kwargs": {"patch_size": 4, "hidden_dim": 64, "num_layers": 4},
            "jit_compile": True,
            "strategy": "MirroredStrategy",
            "num_replicas": 2,
        },
    }
    line = progress.start_line("runs/digits", record, "mixed_bfloat16")
    assert line == (
        "Run runs/digits: model fine-tuned from runs/mnist/best.npz (ViT patch 4, hidden_dim 64, "
        "layers 4); data digits (100 training images, 10 classes, 40x40); precision "
        "mixed_bfloat16, jit_compile True; MirroredStrategy, 2 replica(s)"
    )


def test_interrupt_guard_raises_again_when_the_first_interrupt_was_lost():
    """A KeyboardInterrupt raised inside a `__del__` is dropped by Python; the guard still
    stops training at the next batch end, and gives SIGINT its handler back at the end."""
    import signal

    from keras_vit.cli import progress

    before = signal.getsignal(signal.SIGINT)
    guard = progress.interrupt_guard()
    guard.on_train_begin()
    assert signal.getsignal(signal.SIGINT) == guard._handle
    guard.on_train_batch_end(0)  # no interrupt yet: nothing happens
    try:
        signal.raise_signal(signal.SIGINT)  # the handler raises ...
    except KeyboardInterrupt:
        pass  # ... and, as in a __del__, the exception is lost
    with pytest.raises(KeyboardInterrupt):
        guard.on_train_batch_end(1)
    guard.on_train_end()
    assert signal.getsignal(signal.SIGINT) == before


def test_an_interrupt_lost_in_a_finaliser_prints_no_traceback(capfd):
    """The case CI met: SIGINT arrives while a `__del__` runs, so Python hands the
    KeyboardInterrupt to `sys.unraisablehook` ("Exception ignored ... Traceback" on
    stderr). The guard records it silently, raises it at the next batch end, passes any
    other unraisable exception on, and gives the hook back at the end of training."""
    import gc
    import signal
    import sys

    from keras_vit.cli import progress

    class SignalsWhenDeleted:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)  # the handler runs inside __del__

    class FailsWhenDeleted:
        def __del__(self):
            raise ValueError("not an interrupt")

    hook_before, seen = sys.unraisablehook, []
    sys.unraisablehook = seen.append  # the hook in place when training starts
    guard = progress.interrupt_guard()
    guard.on_train_begin()
    try:
        SignalsWhenDeleted()  # deleted at once: the interrupt is lost in __del__
        gc.collect()
        assert guard.interrupted and seen == []
        assert "Traceback" not in capfd.readouterr().err
        with pytest.raises(KeyboardInterrupt):
            guard.on_train_batch_end(0)
        FailsWhenDeleted()
        assert [item.exc_type for item in seen] == [ValueError]
        guard.on_train_end()
        assert sys.unraisablehook == seen.append
    finally:
        guard.on_train_end()
        sys.unraisablehook = hook_before


def test_a_named_hybrid_is_described_by_its_stages_not_a_missing_width():
    from keras_vit.cli.progress import describe_model

    kwargs = dict(resnet_stages=[3, 4, 9], patch_size=1, hidden_dim=768, num_layers=12)
    text = describe_model({"model": "R50+B/16"}, kwargs)
    assert text.startswith("R50+B/16 (hybrid: BiT ResNet (3, 4, 9), + ViT patch 1")
    assert "None" not in text
    default = describe_model({}, dict(kwargs, resnet_stages=[], resnet_width=32))
    assert "BiT ResNet root, 32 channels" in default
