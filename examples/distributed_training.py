"""Train a ViT under a `tf.distribute` strategy: several GPUs, several machines, or a TPU.

What it shows: `keras_vit.runtime.resolve_strategy` (one name for every setup), the model
built and compiled inside `strategy.scope()` (every variable, class token and position table
included, becomes a mirrored variable), the global batch split across replicas
(`per_replica_batch_size`), mixed precision switched on with one flag
(`set_mixed_precision`; the logits stay float32), and `keras_vit.train.fit_run`, which trains in
a run directory that survives being killed (`--resume` continues from the last finished epoch)
and in which only the chief worker writes.

Strategies (`--strategy`):

- `auto` (default): a TPU if one is configured (`--tpu` / TPU_NAME), else multi-worker when
  TF_CONFIG lists several workers, else all local GPUs, else the single default device.
- `mirrored`: every local GPU. On a CPU-only machine `--cpu-replicas 2` splits the CPU into two
  logical devices, so the synchronous data-parallel path can be tried anywhere.
- `multi_worker`: `MultiWorkerMirroredStrategy`; every worker runs the same command, each with
  its own TF_CONFIG (below).
- `tpu`: `TPUStrategy` (`--tpu NAME`, or "local" on a TPU VM); fails at once with a clear
  message where there is no TPU.
- `one_device`: the first GPU, or the CPU.

Quick try (tiny model, one short epoch, MirroredStrategy over the CPU split in two, bfloat16
mixed precision; ~30 s on 2 CPU cores):

    python examples/distributed_training.py --quick --strategy mirrored --mixed-precision

Two workers (here both on this machine; use each machine's address for real clusters). The
TF_CONFIG environment variable tells each process the whole cluster (the same list, in the
same order, everywhere) and which member it is (`task.index`). Worker 0 is the chief: it
writes the run directory; the other workers train in lockstep and keep only their resume
state. Start both (in two terminals; training begins when both are up):

    TF_CONFIG='{"cluster": {"worker": ["localhost:12345", "localhost:12346"]},
                "task": {"type": "worker", "index": 0}}' \
        python examples/distributed_training.py --quick --strategy multi_worker --out runs/mw
    TF_CONFIG='{"cluster": {"worker": ["localhost:12345", "localhost:12346"]},
                "task": {"type": "worker", "index": 1}}' \
        python examples/distributed_training.py --quick --strategy multi_worker --out runs/mw

Full size (ViT-B/16 on all local GPUs with float16 mixed precision, 8 x 64 images per step):

    python examples/distributed_training.py --strategy mirrored --mixed-precision mixed_float16 \
        --dataset imagenet2012 --model B16 --image-size 224 --batch-size 512 --epochs 300 \
        --out runs/b16

or on a Cloud TPU VM: `--strategy tpu --tpu local --mixed-precision mixed_bfloat16`.

Prints `test accuracy: <value>` as its last line.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")
POLICIES = ("auto", "float32", "mixed_float16", "mixed_bfloat16")
# --quick: 28x28 digits, 7x7 patches -> 16 tokens.
TINY = dict(patch_size=7, hidden_dim=32, num_heads=2, mlp_dim=64, num_layers=2)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Train a ViT under a tf.distribute strategy.")
    parser.add_argument("--quick", action="store_true", help="tiny model, one short epoch")
    parser.add_argument("--strategy", choices=STRATEGIES, default="auto")
    parser.add_argument("--tpu", default=None, help='TPU name or address ("local" on a TPU VM)')
    parser.add_argument(
        "--cpu-replicas",
        type=int,
        default=None,
        help="split the CPU into this many logical devices (mirrored on a CPU-only machine; "
        "--quick with --strategy mirrored: 2)",
    )
    parser.add_argument(
        "--mixed-precision",
        nargs="?",
        const="auto",
        default="float32",
        choices=POLICIES,
        help="mixed precision policy; the bare flag picks mixed_float16 on GPUs and "
        "mixed_bfloat16 elsewhere (default float32)",
    )
    parser.add_argument("--dataset", default="mnist", help="embedded name, TFDS name or folder")
    parser.add_argument("--data-dir", default=None, help="TFDS data_dir (never downloads)")
    parser.add_argument("--model", default="tiny", help='"tiny" or Ti16, S16, B16, L16, ...')
    parser.add_argument("--image-size", type=int, default=28)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--out", default=None, help="run directory (default: a temp folder)")
    return parser


def split_cpu(replicas: int) -> None:
    """Splits the physical CPU into `replicas` logical devices (before TensorFlow starts)."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * replicas
    )


def choose_policy(name: str) -> str:
    """The bare `--mixed-precision` flag: float16 where there are GPUs, else bfloat16."""
    import tensorflow as tf

    if name != "auto":
        return name
    return "mixed_float16" if tf.config.list_physical_devices("GPU") else "mixed_bfloat16"


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.dataset, args.model, args.image_size = "mnist", "tiny", 28
        args.epochs, args.batch_size = 1, 64
        if args.strategy == "mirrored" and args.cpu_replicas is None:
            args.cpu_replicas = 2
    run_dir = args.out or os.path.join(tempfile.mkdtemp(prefix="distributed_"), "run")

    if args.cpu_replicas:
        split_cpu(args.cpu_replicas)  # must come before anything touches a device

    import keras

    import keras_vit
    from keras_vit import data, runtime, train

    keras.utils.set_random_seed(args.seed)
    try:
        strategy = runtime.resolve_strategy(args.strategy, tpu=args.tpu)
    except runtime.StrategyUnavailableError as error:  # no TPU, no/bad TF_CONFIG
        print(f"distributed_training.py: {error}", file=sys.stderr)
        return 2
    policy = runtime.set_mixed_precision(choose_policy(args.mixed_precision))
    per_replica = runtime.per_replica_batch_size(args.batch_size, strategy)
    print(
        f"strategy {type(strategy).__name__}: {strategy.num_replicas_in_sync} replicas x "
        f"{per_replica} images per step; precision {policy}"
    )

    info = data.describe(args.dataset, data_dir=args.data_dir)
    load = dict(image_size=args.image_size, batch_size=args.batch_size, data_dir=args.data_dir)
    train_ds = data.load(
        args.dataset, "train", training=True, shuffle_seed=args.seed, augment="none", **load
    )
    test_ds = data.load(args.dataset, "test", training=False, **load)
    total_steps = info.num_examples["train"] // args.batch_size * args.epochs

    def build_model():
        # Called by fit_run inside strategy.scope(): every variable is created by the strategy.
        common = dict(
            num_classes=info.num_classes, image_size=args.image_size, channels=info.channels
        )
        if args.model == "tiny":
            model = keras_vit.ViT(**TINY, **common, name="vit_tiny")
        else:
            model = getattr(keras_vit, f"ViT_{args.model}")(**common)
        model.compile(
            optimizer=train.pretrain_optimizer(
                args.lr, total_steps, total_steps // 10, weight_decay=args.weight_decay
            ),
            loss=train.loss(),
            metrics=["accuracy"],
            jit_compile=runtime.resolve_jit_compile(None, strategy),
        )
        return model

    result = train.fit_run(
        run_dir,
        build_model,
        train_ds,
        epochs=args.epochs,
        validation_data=test_ds,
        config={"example": "distributed_training", **vars(args), "policy": policy},
        strategy=strategy,
        resume=args.resume,
        verbose=2,
    )
    if runtime.is_chief(strategy):
        print(f"run directory: {result.run_dir}")
    print(f"logits dtype: {result.model.outputs[0].dtype}")
    print(f"test accuracy: {result.metrics['held_out']['accuracy']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
