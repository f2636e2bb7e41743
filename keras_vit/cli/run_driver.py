"""The training driver `keras-vit train` and `finetune` share: strategy, run directory,
`keras_vit.train.runs.train`, progress lines and the closing summary."""

from __future__ import annotations

import datetime
import os

from keras_vit.cli import progress
from keras_vit.cli.flags import UsageError, usage_errors


def default_run_dir(task: str) -> str:
    return os.path.join("runs", f"{task}-{datetime.datetime.now():%Y%m%d-%H%M%S}")


def resolve_strategy(name: str):
    """The strategy, or UsageError for an unknown name or one that cannot run here."""
    from keras_vit.runtime import distribute

    try:
        return distribute.resolve_strategy(name)
    except (ValueError, distribute.StrategyUnavailableError) as error:
        raise UsageError(str(error)) from None


def check_run_dir(args) -> None:
    """UsageError, before TensorFlow loads, for a --resume without --run-dir and for a fresh
    run whose --run-dir is a file or a non-empty folder
    (`keras_vit.train.run_directory.check_run_dir` checks again, with the lock, when the run
    starts)."""
    run_dir = args.run_dir
    if args.resume and not run_dir:
        raise UsageError("--resume needs the --run-dir of the run to continue.")
    if args.resume or not run_dir:
        return
    if os.path.isdir(run_dir) and os.listdir(run_dir):
        raise UsageError(
            f"Run directory {run_dir!r} already exists and is not empty; pass --resume to "
            "continue it, or choose a new --run-dir."
        )
    if os.path.exists(run_dir) and not os.path.isdir(run_dir):
        raise UsageError(f"Run directory {run_dir!r} exists and is not a folder.")


def run_training(config, args, task: str) -> int:
    """Shared body of `train` and `finetune`: resolve, train, print the summary."""
    from keras_vit.train import run_directory, runs

    check_run_dir(args)
    run_dir = args.run_dir = args.run_dir or default_run_dir(task)  # main's --resume hint
    mode = progress.output_mode(args)
    if args.resume:
        from keras_vit.cli.resume_flags import resume_refusal

        with usage_errors():
            stored = run_directory.read_run_config(run_dir)
        if refusal := resume_refusal(args, config, stored, task):  # flags it would ignore
            raise UsageError(refusal)
        config = stored
    from keras_vit.kernels import dispatch  # imports Keras: not before the command runs

    dispatch.prefer_memory_schedule(config.remat)  # before the strategy lists JAX's devices
    strategy = resolve_strategy(args.strategy if not args.resume else config.strategy)
    check_jit_compile(args, strategy)
    worker = worker_of(strategy)
    shown = progress_callbacks(mode)

    def announce(record):
        for callback in shown:  # the time estimate's end, now that the plan is known
            if hasattr(callback, "then"):
                callback.then = after_training(record["resolved"], worker)
        if mode != "quiet":
            precision = record["resolved"]["dtype_policy"]
            lines = progress.start_lines(run_dir, record, precision, worker=worker)
            print("\n".join(lines), flush=True)
            if args.resume:
                print(f"Resuming {run_dir} with its stored configuration.", flush=True)

    guard = progress.interrupt_guard()
    with usage_errors():
        try:
            result = runs.train(
                config,
                run_dir,
                strategy=strategy,
                resume=args.resume,
                verbose=progress.keras_verbose(mode),
                extra_callbacks=[guard, *shown],
                on_start=announce,
            )
        finally:
            guard.on_train_end()  # Keras skips it when training stops on an exception
    print_summary(result, run_dir, next_steps=mode != "quiet", worker=worker)
    return 0


def worker_of(strategy) -> int | None:
    """None in the process that writes the run directory (the chief, or the only process);
    in the other processes of a multi-worker job, this worker's index
    (`keras_vit.runtime.distribute.worker_index`, the number of its `.backup-worker-<index>`)."""
    from keras_vit.runtime import distribute

    return None if distribute.is_chief(strategy) else distribute.worker_index(strategy)


def after_training(resolved: dict, worker: int | None) -> str | None:
    """What this process does after the last epoch, for the time estimate: "the test
    evaluation" where it evaluates a test split (the chief alone does), else None."""
    return "the test evaluation" if worker is None and resolved.get("test_split") else None


def progress_callbacks(mode: str) -> list:
    """The progress callbacks of an output mode: a line before the first step's compilation
    and the estimate of the time left after the first epoch (every mode but "quiet"; the
    estimate's `then` attribute names what follows training), and one line per epoch
    ("epoch")."""
    if mode == "quiet":
        return []
    lines = [progress.epoch_lines()] * (mode == "epoch")
    return [progress.compile_notice(), *lines, progress.remaining_time()]


def check_jit_compile(args, strategy) -> None:
    """UsageError for an explicit --jit-compile that the strategy cannot run on this device
    (without the flag, the recipe's XLA default is turned off there instead)."""
    from keras_vit.runtime import precision

    reason = precision.xla_unsupported_reason(strategy)
    if getattr(args, "jit_compile", None) is True and reason:
        raise UsageError(f"--jit-compile cannot run here: {reason}; drop the flag.")


def print_summary(
    result, shown_dir: str | None = None, *, next_steps: bool = False, worker: int | None = None
) -> None:
    """The few lines `train`/`finetune` end with: the test figures of best.keras (the kept
    model, the one `evaluate` and `export` use), which epoch it is and why, where the files
    are, and (`next_steps`) the commands that use the run. `shown_dir`: the run directory as
    the run's first line named it (default: `result.run_dir`). `worker`: this worker's index
    in a multi-worker job when it is not the chief (`worker_summary`); None: the chief, or
    the only process."""
    from keras_vit.train import run_directory

    metrics = result.metrics
    run_dir = result.run_dir
    shown_dir = shown_dir or run_dir
    resolved = (run_directory.read_config(run_dir) or {}).get("resolved", {})
    if worker is not None:
        print("\n".join(worker_summary(metrics, worker, shown_dir, resolved)))
        return
    best = metrics.get("best") or {}
    test = metrics.get("test")
    if test:
        print(
            f"Test accuracy: {100 * test['accuracy']:.2f}% on '{resolved.get('test_split')}' "
            f"(best.keras; test loss {test['loss']:.4f}, {test['loss_name']})"
        )
    elif "validation" in metrics:
        validation = metrics["validation"]
        print(
            f"Validation accuracy: {100 * validation['accuracy']:.2f}% after the last epoch "
            "(no test split; loss with the training label smoothing "
            f"{validation['loss']:.4f})"
        )
    if best:
        print(kept_epoch_line(best, metrics["epochs"], resolved))
    epochs, steps = metrics["epochs"], metrics["steps"]
    print(
        f"Trained {counted(epochs, 'epoch')}, {counted(steps, 'step')} on "
        f"{metrics['num_replicas']} replica(s); run directory: {shown_dir}"
    )
    print(models_line(best))
    if next_steps:
        print("\n".join(next_step_lines(shown_dir)))


def worker_summary(metrics: dict, worker: int, shown_dir: str, resolved: dict) -> list[str]:
    """The closing lines of a multi-worker job's non-chief process, which writes none of the
    run directory and evaluates no test split: the validation figures after the last epoch
    (every worker computes them over the whole validation data), then what it trained and
    which process holds the run's files and figures. No kept-model, models or next-step
    lines: they describe the chief's files, which the chief may still be writing."""
    lines = []
    if "validation" in metrics:
        validation = metrics["validation"]
        lines.append(
            f"Validation accuracy: {100 * validation['accuracy']:.2f}% after the last epoch "
            f"(loss with the training label smoothing {validation['loss']:.4f})"
        )
    test = f", the test figures of '{resolved['test_split']}'" if resolved.get("test_split") else ""
    lines.append(
        f"Trained {counted(metrics['epochs'], 'epoch')}, {counted(metrics['steps'], 'step')} "
        f"on {metrics['num_replicas']} replica(s) as worker {worker}; the chief writes the "
        f"run directory {shown_dir} (models, history{test}) and prints the run's summary"
    )
    return lines


def models_line(best: dict) -> str:
    """Which models the run directory holds, saying what best.keras holds: the kept model,
    which under the default --select last is the last epoch's, the same weights as
    last.keras (the name stays best.keras, the file every command reads from a run
    directory; best.json says which epoch it is)."""
    if best.get("select", "best") == "last":
        kept = "the kept model: the last epoch, --select last"
    elif best:
        kept = f"the kept model: epoch {best['epoch'] + 1}, the best on validation"
    else:
        kept = "the kept model"
    return f"Models: best.keras and best.npz ({kept}), last.keras; best.json names the epoch"


def next_step_lines(run_dir: str) -> list[str]:
    """The commands that use a finished run, `run_dir` as the user named it (on every Keras
    backend: `keras-vit export` runs TensorFlow in a child process where it is not the
    backend)."""
    export = "keras-vit export"
    logs = os.path.dirname(os.path.normpath(run_dir)) or "."
    return [
        "Next:",
        f"  keras-vit evaluate {run_dir}",
        f"  keras-vit predict {run_dir} IMAGE_OR_FOLDER",
        f"  {export} {run_dir} EXPORT_DIR",
        f"  tensorboard --logdir {logs}",
    ]


def counted(number: int, noun: str) -> str:
    """'1 epoch', '3 epochs'."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def kept_epoch_line(best: dict, epochs: int, resolved: dict) -> str:
    """One line on best.keras's epoch from best.json (`{"epoch", "monitor", "value",
    "select"}`; a run without "select" kept its best epoch)."""
    select = best.get("select", "best")
    where = (
        f"on '{resolved.get('validation_split')}' "
        f"({resolved.get('num_validation_examples')} images, not trained on)"
    )
    figure = f"{best['monitor']} {best['value']:.4f}"
    if select == "last":
        kept = f"the last epoch, {best['epoch'] + 1} of {epochs} (--select last)"
        return f"Kept model: {kept}; {figure} {where}"
    return f"Kept model: the best epoch, {best['epoch'] + 1} of {epochs}, by {figure} {where}"
