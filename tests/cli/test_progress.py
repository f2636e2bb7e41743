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


def test_the_first_training_step_is_announced_once_before_it_compiles():
    """The first step compiles for up to tens of seconds: a file would show nothing; one
    short line says so before it starts, and no other batch repeats it."""
    out = io.StringIO()
    callback = progress.compile_notice(out)
    callback.set_params({"epochs": 2, "steps": 3, "verbose": 0})
    callback.on_epoch_begin(0)
    assert out.getvalue() == ""
    callback.on_train_batch_begin(0)
    assert out.getvalue() == progress.COMPILE_LINE + "\n"
    assert len(progress.COMPILE_LINE) <= 120
    for batch in (1, 2):
        callback.on_train_batch_begin(batch)
    callback.on_epoch_begin(1)
    callback.on_train_batch_begin(0)
    assert out.getvalue().count("Compiling") == 1


@pytest.mark.parametrize("mode, notices", [("batch", 1), ("epoch", 1), ("quiet", 0)])
def test_every_mode_but_quiet_announces_the_compilation(mode, notices):
    from keras_vit.cli.run_driver import progress_callbacks

    names = [type(callback).__name__ for callback in progress_callbacks(mode)]
    assert names.count("CompileNotice") == notices
    assert names.count("EpochLines") == (mode == "epoch")


def test_start_lines_of_a_finetune_run_name_the_source_and_the_chosen_precision():
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
    lines = progress.start_lines("runs/digits", record, "mixed_bfloat16")
    assert lines == [
        "Run runs/digits: fine-tuned from runs/mnist/best.npz ViT on digits (100 training "
        "images), mixed_bfloat16 + XLA",
        "  model: fine-tuned from runs/mnist/best.npz (ViT patch 4, hidden_dim 64, layers 4)",
        "  data: digits, 10 classes, 40x40: 100 training images",
        "  precision: mixed_bfloat16, XLA on",
        "  strategy: MirroredStrategy, 2 replica(s)",
    ]


DEFAULT_RECORD = {
    "run": {"task": "train", "model": "default"},
    "resolved": {
        "dataset": "mnist",
        "num_train_examples": 3600,
        "num_validation_examples": 400,
        "train_split": "train[:90%]",
        "validation_split": "train[90%:]",
        "test_split": "test",
        "num_classes": 10,
        "image_size": [28, 28],
        "model_kwargs": {
            "patch_size": 1,
            "hidden_dim": 64,
            "num_layers": 4,
            "num_heads": 4,
            "resnet_stages": [],
            "resnet_width": 32,
        },
        "jit_compile": True,
        "strategy": "_DefaultDistributionStrategy",
        "num_replicas": 1,
        "precision_reason": "CPU AMD EPYC 7B13, 2 cores; measured (probed now, ...): "
        + "float32+xla 4.3 ms, float32 4.9 ms, mixed_bfloat16 4.7 ms; " * 3,
    },
}


def test_the_first_line_of_the_default_run_is_short_and_the_details_follow():
    """The first line was ~600 characters. It keeps to FIRST_LINE_MAX with the
    default run directory; the held-out tenth and the precision's reason follow, each once."""
    lines = progress.start_lines("runs/train-20261205-221500", DEFAULT_RECORD, "float32")
    assert len(lines[0]) <= progress.FIRST_LINE_MAX, lines[0]
    assert lines[0] == (
        "Run runs/train-20261205-221500: default hybrid ViT on mnist (3,600 training images), "
        "float32 + XLA"
    )
    assert all(line.startswith("  ") for line in lines[1:])
    text = "\n".join(lines)
    assert "3,600 training images of 'train[:90%]', 400 validation ('train[90%:]')" in text
    # the precision's long reason stays in config.json (and the --verbose log), not here
    assert "float32+xla 4.3 ms" not in text and text.count("XLA on") == 1
    assert max(len(line) for line in lines) <= 120, lines


def test_a_non_chief_worker_says_what_it_does_and_who_writes():
    chief = progress.start_lines("runs/x", DEFAULT_RECORD, "float32")
    worker = progress.start_lines("runs/x", DEFAULT_RECORD, "float32", worker=2)
    assert worker[:-1] == chief and not any("worker" in line for line in chief)
    assert worker[-1] == (
        "  worker 2: trains its share of every batch; the chief writes the run directory and "
        "evaluates the test split"
    )


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _first_epoch(callback, clock, train_steps, test_steps, compile_s=20.0, step_s=0.5):
    """Drives `callback` through a first epoch: two slow (compiling) batches, then steady
    ones, then a validation pass likewise; returns the epoch's duration."""
    callback.on_epoch_begin(0)
    for phase, steps in (("train", train_steps), ("test", test_steps)):
        if phase == "test":
            callback.on_test_begin()
        for batch in range(steps):
            clock.now += compile_s if batch < 2 else step_s
            getattr(callback, f"on_{phase}_batch_end")(batch)
    clock.now += 0.25  # writing checkpoints: not part of the estimate
    callback.on_epoch_end(0)
    return clock.now


@pytest.mark.parametrize("epochs, train_steps, test_steps", [(30, 56, 7), (2, 10, 4), (5, 3, 1)])
def test_remaining_time_is_printed_once_after_the_first_epoch(epochs, train_steps, test_steps):
    out, clock = io.StringIO(), FakeClock()
    callback = progress.remaining_time(out, clock=clock)
    callback.set_params({"epochs": epochs, "steps": train_steps, "verbose": 0})
    took = _first_epoch(callback, clock, train_steps, test_steps)
    assert out.getvalue() == ""  # the estimate comes with the next epoch, before Keras' bar
    callback.on_epoch_begin(1)
    callback.on_epoch_end(1)
    callback.on_epoch_begin(2)
    line = out.getvalue()
    assert line.count("\n") == 1 and line.startswith("Time left: about ")

    def steady(steps):  # compiled batches at 0.5 s; a pass under 4 batches counts whole
        return steps * 0.5 if steps >= 4 else min(steps, 2) * 20.0 + max(steps - 2, 0) * 0.5

    each = steady(train_steps) + steady(test_steps)
    left = epochs - 1
    assert f" for {left} more epoch{'s' if left > 1 else ''} " in line
    assert f"(~{progress.duration_text(each)} each; the first took " in line
    assert f"about {progress.duration_text(each * left)} for" in line
    assert f"took {progress.duration_text(took)} with compilation" in line
    assert line.endswith("with compilation)\n")  # nothing follows training by default


def test_remaining_time_names_what_follows_training():
    out, clock = io.StringIO(), FakeClock()
    callback = progress.remaining_time(out, clock=clock)
    callback.set_params({"epochs": 3, "steps": 6, "verbose": 0})
    callback.then = "the test evaluation"
    _first_epoch(callback, clock, 6, 2)
    callback.on_epoch_begin(1)
    assert out.getvalue().endswith("with compilation), then the test evaluation\n")


@pytest.mark.parametrize(
    "seconds, text", [(4.4, "4 s"), (89.0, "89 s"), (450.0, "7.5 min"), (7200.0, "2.0 h")]
)
def test_duration_text(seconds, text):
    assert progress.duration_text(seconds) == text


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
