"""What a long command prints while it works: the Keras progress bar on a terminal, one line
per epoch in a file or pipe (or with `--log-every epoch`), nothing with `--quiet`."""

from __future__ import annotations

import sys
import time

MODES = ("batch", "epoch")


def add_output_arguments(parser, *, log_every: bool = True) -> None:
    """`--log-every` (train/finetune) and `--quiet`, the same in every subcommand."""
    if log_every:
        parser.add_argument(
            "--log-every",
            choices=MODES,
            help="'batch': the Keras progress bar; 'epoch': one line per epoch (default: "
            "batch on a terminal, epoch when the output goes to a file or pipe)",
        )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress output; print only the result (warnings and errors still show)",
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


def start_line(run_dir: str, record: dict, precision: str) -> str:
    """The first line of a run: run directory, model, data, precision and compiler."""
    run, resolved = record.get("run", {}), record.get("resolved", {})
    height, width = resolved.get("image_size", ("?", "?"))
    data = (
        f"{resolved.get('dataset')} ({resolved.get('num_train_examples')} training images, "
        f"{resolved.get('num_classes')} classes, {height}x{width})"
    )
    replicas = resolved.get("num_replicas", 1)
    strategy = resolved.get("strategy") or "default"
    strategy = "default strategy" if strategy.startswith("_Default") else strategy
    why = f" ({resolved['precision_reason']})" if resolved.get("precision_reason") else ""
    return (
        f"Run {run_dir}: model {describe_model(run, resolved.get('model_kwargs', {}))}; "
        f"data {data}; precision {precision}, jit_compile {resolved.get('jit_compile')}{why}; "
        f"{strategy}, {replicas} replica(s)"
    )


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
