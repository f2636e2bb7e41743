"""`KERAS_BACKEND=jax keras-vit train/finetune --strategy multi_worker`: two JAX processes x 2
host devices on 127.0.0.1, a TF_CONFIG each (tests/helpers/jax_multi_process_cli.py), train and
fine-tune as one process over 4 devices does (the per-epoch losses of history.csv), write one
run directory, resume after a process killed between epochs with the uninterrupted run's
result, and refuse a global batch that does not split over the 4 devices before the first step.
The non-chief process's output names its role and claims no test figures or files.

Each `keras-vit train` process here costs about 25-30 s of CPU on the 2-core AMD EPYC host:
TensorFlow's and Keras' import about a quarter, the training fit with its XLA compilations
over a third, the evaluations, the data pipeline, the model's build, the plots and the saved
models the rest. So the default run checks the chain that needs the fewest processes: one
process over 4 devices, two processes of which one is killed after epoch 1, both restarted
with --resume; the resumed run's every epoch (the first from before the kill, the second
after it) must equal the one process's. The `large` lane adds the uninterrupted two-process
run (equal to both) and the fine-tuning.

At batch 16 the two runs differ by float32 rounding alone (the gradient's all-reduce adds
the devices' shares in another order across processes): 2.4e-7 in the losses after two
epochs. At batch 8 and the recipe's learning rate this tiny model, still at chance, is
chaotic enough under AdamW that such roundings grow to 1e-4 by the second epoch, in one
process too when the reduction order changes, so the comparison would test the optimiser's
sensitivity rather than the distribution."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys

import pytest

from tests.backends.subset import ROOT
from tests.process_helpers import finish, free_ports, kill_all

pytestmark = [pytest.mark.jax]

RUN = [
    "train", "--model", "tiny", "--stem", "patch", "--dataset", "digits",
    "--shots-per-class", "20", "--image-size", "16", "--batch-size", "16", "--epochs", "2",
    "--mixed-precision", "float32", "--jit-compile", "true", "--quiet",
]  # fmt: skip
STEPS = 22  # 2 epochs of 11 global batches of 16 (180 training images, the last 4 dropped)
TIMEOUT = 540
CACHE = {}  # "dir": this module's keras_vit cache folder (`compile_cache`)


@pytest.fixture(scope="module", autouse=True)
def compile_cache(tmp_path_factory):
    """One keras_vit cache folder for this module's processes, with JAX's persistent
    compilation cache on, as a user's commands have it (the test session turns it off): the
    restarted processes read the programs the first ones compiled (~15% of the module's CPU
    time) and the cache is exercised across processes."""
    CACHE["dir"] = str(tmp_path_factory.mktemp("keras_vit_cache"))
    yield
    CACHE.clear()


def start(args, devices, tf_config=None, kill_after_epoch=None):
    """A `keras-vit ARGS` process on JAX with `devices` host devices."""
    env = {
        **os.environ,
        "KERAS_VIT_CACHE_DIR": CACHE["dir"],
        "KERAS_VIT_JAX_COMPILE_CACHE": "on",
        "KERAS_BACKEND": "jax",
        "JAX_PLATFORMS": "cpu",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
        "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    if kill_after_epoch is not None:
        env["KILL_AFTER_EPOCH"] = str(kill_after_epoch)
    command = [sys.executable, "-m", "tests.helpers.jax_multi_process_cli", *map(str, args)]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def start_pair(args, kill_after_epoch=None):
    """Both processes of a two-process job (worker 0 the coordinator); process 1 SIGKILLs
    itself after epoch `kill_after_epoch` when given."""
    port, other = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{port}", f"127.0.0.1:{other}"]}
    return [
        start(
            args,
            2,
            {"cluster": cluster, "task": {"type": "worker", "index": index}},
            kill_after_epoch if index == 1 else None,
        )
        for index in (0, 1)
    ]


def history(run_dir):
    with open(os.path.join(run_dir, "history.csv")) as file:
        return [{key: float(value) for key, value in row.items()} for row in csv.DictReader(file)]


def losses(run_dir):
    return [row[key] for row in history(run_dir) for key in ("loss", "val_loss")]


def metrics_of(run_dir):
    with open(os.path.join(run_dir, "metrics.json")) as file:
        return json.load(file)


def succeeded(outcomes):
    for code, _, err in outcomes:
        assert code == 0, err[-3000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The run directories: "one" (one process over 4 devices), "resumed" (two processes,
    process 1 killed after epoch 1, both restarted with --resume)."""
    pytest.importorskip("jax")
    root = tmp_path_factory.mktemp("jax_multi_process_cli")
    dirs = {name: str(root / name) for name in ("one", "resumed")}
    processes = [
        start([*RUN, "--strategy", "mirrored", "--run-dir", dirs["one"]], 4),
        *start_pair(
            [*RUN, "--strategy", "multi_worker", "--run-dir", dirs["resumed"]], kill_after_epoch=1
        ),
    ]
    try:
        killed = processes[2]
        assert killed.wait(timeout=TIMEOUT) == -signal.SIGKILL, killed.communicate()[1][-3000:]
        processes[1].kill()  # the chief, waiting for its peer in the next step
        processes[1].wait()
        succeeded(finish(processes[:1], timeout=TIMEOUT))
    finally:
        kill_all(processes)
    resume = ["train", "--run-dir", dirs["resumed"], "--resume", "--strategy", "multi_worker"]
    succeeded(finish(start_pair([*resume, "--quiet"]), timeout=TIMEOUT))
    return dirs


def test_two_processes_killed_and_resumed_train_as_one_process_over_four_devices(runs):
    """Epoch 1 was trained before the kill, epoch 2 after both processes resumed."""
    resumed, one = losses(runs["resumed"]), losses(runs["one"])
    assert len(resumed) == 4 and all(value == value for value in resumed)  # 2 epochs, no NaN
    assert resumed == pytest.approx(one, abs=1e-5)
    assert metrics_of(runs["resumed"])["steps"] == metrics_of(runs["one"])["steps"] == STEPS


def test_the_chief_writes_one_run_directory_with_the_one_process_test_figures(runs):
    names = set(os.listdir(runs["resumed"]))
    assert {"config.json", "history.csv", "metrics.json", "best.keras", "last.keras"} <= names
    assert not [name for name in names if "worker" in name]  # no backup or scratch left
    metrics, one = metrics_of(runs["resumed"]), metrics_of(runs["one"])
    assert metrics["num_replicas"] == 4 and metrics["epochs"] == 2
    assert metrics["test"]["accuracy"] == one["test"]["accuracy"]
    assert metrics["test"]["loss"] == pytest.approx(one["test"]["loss"], abs=1e-5)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The run directory of the same two-process run, never killed."""
    pytest.importorskip("jax")
    run_dir = str(tmp_path_factory.mktemp("jax_multi_process_cli_uninterrupted") / "two")
    succeeded(finish(start_pair([*RUN, "--strategy", "multi_worker", "--run-dir", run_dir])))
    return run_dir


@pytest.mark.large
def test_the_uninterrupted_two_process_run_equals_both(runs, uninterrupted):
    two = losses(uninterrupted)
    assert two == pytest.approx(losses(runs["one"]), abs=1e-5)
    assert losses(runs["resumed"]) == pytest.approx(two, abs=1e-5)
    metrics, resumed = metrics_of(uninterrupted), metrics_of(runs["resumed"])
    assert resumed["steps"] == metrics["steps"] == STEPS
    assert resumed["test"]["accuracy"] == metrics["test"]["accuracy"]
    assert resumed["test"]["loss"] == pytest.approx(metrics["test"]["loss"])


def test_a_batch_that_does_not_split_over_the_devices_is_refused_before_training(tmp_path):
    pytest.importorskip("jax")
    run_dir = tmp_path / "run"
    args = [*RUN, "--strategy", "multi_worker", "--batch-size", "6", "--run-dir", run_dir]
    for code, _, err in finish(start_pair(args), timeout=TIMEOUT):
        assert code == 2, err[-3000:]
        assert "(4 with DataParallel)" in err and "batch_size=6" in err
        assert "Traceback" not in err
    assert not run_dir.exists()


FINETUNE = [
    "finetune", "--dataset", "digits", "--shots-per-class", "20", "--image-size", "16",
    "--batch-size", "8", "--steps", "6", "--mixed-precision", "float32", "--jit-compile", "true",
]  # fmt: skip


def pretrained_file(folder) -> str:
    """A tiny ViT at 12 px (patch 4) with random weights, head included, saved as .keras:
    the fine-tuning source (resized to 16 px, new zero head)."""
    import keras

    import keras_vit

    keras.utils.set_random_seed(5)
    model = keras_vit.ViT(
        image_size=12, patch_size=4, hidden_dim=32, num_heads=2, mlp_dim=64, num_layers=2,
        num_classes=3,
    )  # fmt: skip
    for weight in model.weights:  # the head is zero-initialised: randomise every weight
        weight.assign(keras.random.normal(weight.shape, stddev=0.1, seed=len(weight.path)))
    path = os.path.join(folder, "source.keras")
    model.save(path)
    return path


@pytest.fixture(scope="module")
def finetunes(tmp_path_factory):
    """{"two": (run directory, [(code, stdout, stderr)] of both processes), "one": (run
    directory, the one process's)} of the same fine-tuning, two processes x 2 devices and
    one process x 4 devices."""
    pytest.importorskip("jax")
    root = tmp_path_factory.mktemp("jax_multi_process_finetune")
    args = [*FINETUNE, "--weights", pretrained_file(str(root))]
    dirs = {name: str(root / name) for name in ("two", "one")}
    processes = [
        *start_pair([*args, "--strategy", "multi_worker", "--run-dir", dirs["two"]]),
        start([*args, "--strategy", "mirrored", "--run-dir", dirs["one"]], 4),
    ]
    outcomes = finish(processes, timeout=TIMEOUT)
    succeeded(outcomes)
    return {"two": (dirs["two"], outcomes[:2]), "one": (dirs["one"], outcomes[2:])}


@pytest.mark.large
def test_two_processes_finetune_as_one_process_over_four_devices(finetunes):
    two, one = finetunes["two"][0], finetunes["one"][0]
    assert len(history(two)) >= 2  # the step budget over several epochs
    for got, want in zip(history(two), history(one), strict=True):
        assert got == pytest.approx(want, abs=1e-5)
    assert set(os.listdir(two)) >= {"config.json", "history.csv", "metrics.json", "best.keras"}
    assert not [name for name in os.listdir(two) if "worker" in name]
    with open(os.path.join(two, "metrics.json")) as file:
        metrics = json.load(file)
    with open(os.path.join(one, "metrics.json")) as file:
        assert metrics["test"]["loss"] == pytest.approx(json.load(file)["test"]["loss"], 1e-5)


@pytest.mark.large
def test_only_the_chief_reports_test_figures_and_files(finetunes):
    (_, chief_out, _), (_, worker_out, _) = finetunes["two"][1]
    assert "Test accuracy: " in chief_out and "Next:" in chief_out
    assert "worker" not in chief_out.split("Test accuracy")[0].lower()
    role = "  worker 1: trains its share of every batch; the chief writes the run directory"
    assert f"{role} and evaluates the test split\n" in worker_out
    summary = worker_out[worker_out.index("Validation accuracy: ") :]
    assert "as worker 1; the chief writes the run directory" in summary
    for claim in ("no test split", "Test accuracy", "Kept model", "Models:", "Next:"):
        assert claim not in worker_out
    time_left = [line for line in worker_out.splitlines() if line.startswith("Time left")]
    assert time_left and "test evaluation" not in time_left[0]
