"""What a long command prints while it works: the Keras progress bar on a terminal, one line
per epoch in a file or pipe (or with `--log-every epoch`), nothing with `--quiet`."""

from __future__ import annotations

import logging
import sys
import time

logger = logging.getLogger(__name__)

MODES = ("batch", "epoch")


def add_output_arguments(parser, *, log_every: bool = True) -> None:
    """`--log-every` (train/finetune) and `--quiet`, the same in every subcommand."""
    if log_every:
        parser.add_argument(
            "--log-every",
            choices=MODES,
            help="the Keras bar (batch) or a line per epoch (default: bar on a terminal)",
        )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="print only the result (and warnings and errors)",
    )


def output_mode(args, stream=None) -> str:
    """'quiet', 'batch' or 'epoch' for the parsed `args` (a TTY test decides the default)."""
    if vars(args).get("quiet"):
        return "quiet"
    chosen = getattr(args, "log_every", None)
    if chosen:
        return chosen
    stream = stream or sys.stdout
    return "batch" if stream.isatty() else "epoch"


def keras_verbose(mode: str) -> int:
    """The `verbose` of model.fit / evaluate / predict for an output mode."""
    return 1 if mode == "batch" else 0


def epoch_lines(stream=None):
    """A Keras callback that prints one line per finished epoch: number, wall seconds and
    every log, e.g. `epoch 3/15  12.4 s  accuracy 0.7410  loss 0.8123  val_accuracy ...`.
    (Keras is imported here, not at module level, so `--help` stays light.)"""
    import keras

    class EpochLines(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            seconds = time.perf_counter() - getattr(self, "_start", time.perf_counter())
            values = "  ".join(f"{k} {float(v):.4f}" for k, v in (logs or {}).items())
            epochs = self.params.get("epochs", "?")
            line = f"epoch {epoch + 1}/{epochs}  {seconds:.1f} s  {values}"
            print(line.rstrip(), file=stream or sys.stdout, flush=True)

    return EpochLines()


COMPILE_LINE = "Compiling the training step (first step) ..."
"""What a run prints before its first training step, which compiles (tf.function tracing,
XLA, JAX's jit) for up to tens of seconds with nothing else on the screen."""


def compile_notice(stream=None):
    """A Keras callback that prints `COMPILE_LINE` once, when the first training batch this
    process runs begins (after Keras' "Epoch 1/N" on a terminal, before its bar; in a file,
    before the first epoch line). Nothing when no batch runs (a complete run resumed)."""
    import keras

    class CompileNotice(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.told = False

        def on_train_batch_begin(self, batch, logs=None):
            if not self.told:
                self.told = True
                print(COMPILE_LINE, file=stream or sys.stdout, flush=True)

    return CompileNotice()


def steady_seconds(begin: float, batch_ends: list[float]) -> float:
    """How long a pass of `len(batch_ends)` batches takes once compiled, from one pass's
    clock readings: its `begin` and the end of each batch.

    The first two batches carry the compilation (tf.function tracing, XLA), so it is the
    per-batch time of the later batches times the batch count; with fewer than four batches
    there is nothing to separate: the whole pass (an upper bound).

    >>> steady_seconds(0.0, [30.0, 31.0, 32.0, 33.0, 34.0])
    5.0
    >>> steady_seconds(0.0, [30.0, 31.0])
    31.0
    """
    steps = len(batch_ends)
    if steps < 4:
        return batch_ends[-1] - begin if batch_ends else 0.0
    return (batch_ends[-1] - batch_ends[1]) / (steps - 2) * steps


def duration_text(seconds: float) -> str:
    """'45 s', '7.5 min', '2.1 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def remaining_time(stream=None, clock=time.perf_counter, then: str | None = None):
    """A Keras callback that prints once, when the second epoch this process trains begins
    (before Keras' bar of that epoch), how long the rest of the run should take: the first
    epoch's training and validation passes without their compilation (`steady_seconds`)
    times the epochs left (the Keras bar's ETA covers one epoch only). Nothing for a
    one-epoch run.

    `then`: what this process does after training, named at the end of the line ("the test
    evaluation"), or None (nothing); also the callback's attribute `then`, which the caller
    may set once the run is planned, before the second epoch."""
    import keras

    class RemainingTime(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.then = then
            self._first = self._end = None
            self._told = False
            self._passes = {"train": [None, []], "test": [None, []]}  # begin, batch ends

        def _record(self, phase, begin=False):
            if self._first is not None and self._end is None:
                if begin:
                    self._passes[phase][0] = clock()
                else:
                    self._passes[phase][1].append(clock())

        def on_epoch_begin(self, epoch, logs=None):
            if self._first is None:
                self._first = epoch
                self._start = self._passes["train"][0] = clock()
            elif self._end is not None and not self._told:
                self._told = True
                print(self.line(epoch), file=stream or sys.stdout, flush=True)

        def on_train_batch_end(self, batch, logs=None):
            self._record("train")

        def on_test_begin(self, logs=None):
            self._record("test", begin=True)

        def on_test_batch_end(self, batch, logs=None):
            self._record("test")

        def on_epoch_end(self, epoch, logs=None):
            if epoch == self._first:
                self._end = clock()

        def line(self, epoch: int) -> str:
            left = self.params.get("epochs", epoch) - epoch
            took = self._end - self._start
            steady = sum(
                steady_seconds(begin, ends) for begin, ends in self._passes.values() if ends
            )
            return (
                f"Time left: about {duration_text(steady * left)} for {left} more "
                f"epoch{'s' if left != 1 else ''} (~{duration_text(steady)} each; the first "
                f"took {duration_text(took)} with compilation)"
                + (f", then {self.then}" if self.then else "")
            )

    return RemainingTime()


def describe_model(run: dict, model_kwargs: dict) -> str:
    """'default (ViT patch 4, hidden_dim 64, 4 layers, 4 heads)' from a config record."""
    name = run.get("model") or "default"
    if run.get("task") == "finetune":
        name = f"fine-tuned from {run.get('weights')}"
    parts = [
        f"{label} {model_kwargs[key]}"
        for key, label in (
            ("patch_size", "patch"),
            ("hidden_dim", "hidden_dim"),
            ("num_layers", "layers"),
            ("num_heads", "heads"),
        )
        if key in model_kwargs
    ]
    kind = "ViT"
    if "resnet_stages" in model_kwargs:  # the default recipe's hybrid stem
        width = model_kwargs.get("resnet_width")  # absent: the named hybrid's default
        stages = tuple(model_kwargs["resnet_stages"] or ())
        root = f"BiT ResNet root, {width} channels" if width else f"BiT ResNet {stages}"
        kind = f"hybrid: {root}, + ViT"
    return f"{name} ({kind} {', '.join(parts)})" if parts else name


FIRST_LINE_MAX = 120
"""Characters the first line of a run keeps to (a default run directory's), the details
following on indented lines."""


def start_lines(
    run_dir: str, record: dict, precision: str, *, worker: int | None = None
) -> list[str]:
    """What a run prints first: one short line (run directory, model, data, precision), then
    indented lines with the details (architecture; classes, size and held-out images; why
    this precision and compiler; strategy; in a multi-worker job's other processes, what
    this one does).

    Args:
        run_dir: the run directory. record: the config record (`keras_vit.train.runs.train`'s
            `on_start`: "run" and "resolved"). precision: the dtype policy in effect.
        worker: None in the process that writes the run directory (the chief, or the only
            one); else this worker's index in its multi-worker job.
    """
    run, resolved = record.get("run", {}), record.get("resolved", {})
    model_kwargs = resolved.get("model_kwargs", {})
    name = run.get("model") or "default"
    if run.get("task") == "finetune":
        name = f"fine-tuned from {run.get('weights')}"
    kind = "hybrid ViT" if "resnet_stages" in model_kwargs else "ViT"
    trained = _count(resolved.get("num_train_examples"))
    xla = " + XLA" if resolved.get("jit_compile") is True else ""
    first = (
        f"Run {run_dir}: {name} {kind} on {resolved.get('dataset')} ({trained} training "
        f"images), {precision}{xla}"
    )
    replicas = resolved.get("num_replicas", 1)
    strategy = resolved.get("strategy") or "default"
    strategy = "default strategy" if strategy.startswith("_Default") else strategy
    why = _precision_why(resolved)
    return [
        first,
        f"  model: {describe_model(run, model_kwargs)}",
        f"  data: {describe_data(resolved)}",
        f"  precision: {precision}, XLA {'on' if resolved.get('jit_compile') else 'off'}{why}",
        f"  strategy: {strategy}, {replicas} replica(s)",
        *([f"  {worker_role(worker, resolved)}"] if worker is not None else []),
    ]


def worker_role(worker: int, resolved: dict) -> str:
    """What worker `worker` (not the chief) of a multi-worker job does, in one line:
    'worker 1: trains its share of every batch; the chief writes the run directory and
    evaluates the test split' (the last part only where the run has a test split)."""
    test = " and evaluates the test split" if resolved.get("test_split") else ""
    return (
        f"worker {worker}: trains its share of every batch; the chief writes the run "
        f"directory{test}"
    )


def _precision_why(resolved: dict) -> str:
    """ " (brief reason)" of the run's precision (`keras_vit.runtime.precision.brief_reason`;
    the full reason is in config.json and, with --verbose, in the log), or ""."""
    from keras_vit.runtime.precision import brief_reason, setting_label

    if not resolved.get("precision_reason"):
        return ""
    setting = setting_label(
        resolved.get("mixed_precision") or "float32", resolved.get("jit_compile")
    )
    choice = {**(resolved.get("precision_probe") or {}), "reason": resolved["precision_reason"]}
    logger.debug("Precision: %s", resolved["precision_reason"])
    return f" ({brief_reason(setting, choice)})"


def _count(number) -> str:
    return f"{number:,}" if isinstance(number, int) else str(number)


def describe_data(resolved: dict) -> str:
    """'mnist, 10 classes, 28x28: 3,600 training images of 'train[:90%]', 400 validation
    ('train[90%:]'), test 'test''."""
    height, width = resolved.get("image_size", ("?", "?"))
    text = (
        f"{resolved.get('dataset')}, {resolved.get('num_classes')} classes, {height}x{width}: "
        f"{_count(resolved.get('num_train_examples'))} training images"
    )
    if resolved.get("train_split"):
        text += f" of {resolved['train_split']!r}"
    if resolved.get("validation_split"):
        held = resolved.get("num_validation_examples")
        held = f"{_count(held)} " if held is not None else ""
        text += f", {held}validation ({resolved['validation_split']!r})"
    if resolved.get("test_split"):
        text += f", test {resolved['test_split']!r}"
    return text


def interrupt_guard():
    """A Keras callback that makes Ctrl-C stop training even when Python loses the first
    `KeyboardInterrupt`: one raised while an object's `__del__` or a weakref callback runs
    (TensorFlow's iterators and resources delete themselves during training) is handed to
    `sys.unraisablehook`, which prints "Exception ignored ... Traceback" and drops it.

    While training runs, the callback installs a SIGINT handler that records the interrupt
    before raising, raises again at the next batch end if training goes on, and an
    unraisable hook that stays silent about a `KeyboardInterrupt` it has recorded (any
    other unraisable exception goes to the previous hook). Both come back at the end of
    training."""
    import signal
    import sys

    import keras

    class InterruptGuard(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.interrupted = False
            self._previous = None
            self._previous_unraisable = None

        def _handle(self, signum, frame):
            self.interrupted = True
            raise KeyboardInterrupt

        def _unraisable(self, unraisable):
            if self.interrupted and unraisable.exc_type is KeyboardInterrupt:
                return  # recorded: raised again at the next batch end
            (self._previous_unraisable or sys.__unraisablehook__)(unraisable)

        def on_train_begin(self, logs=None):
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._previous_unraisable = sys.unraisablehook
            sys.unraisablehook = self._unraisable

        def on_train_batch_end(self, batch, logs=None):
            if self.interrupted:
                raise KeyboardInterrupt

        on_test_batch_end = on_train_batch_end

        def on_epoch_end(self, epoch, logs=None):
            self.on_train_batch_end(None)

        def on_train_end(self, logs=None):
            if self._previous is not None:
                signal.signal(signal.SIGINT, self._previous)
            if self._previous_unraisable is not None:
                sys.unraisablehook = self._previous_unraisable

    return InterruptGuard()
