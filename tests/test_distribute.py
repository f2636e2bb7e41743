"""Tests of keras_vit.distribute: strategy names, TF_CONFIG, batch split, precision, and real
multi-device runs (two logical CPUs, two worker processes) started as subprocesses."""

import json
import os
import socket
import subprocess
import sys
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import distribute, runs
from tests.model_helpers import random_images
from tests.output_checks import assert_close_to_float32, randomize_weights

HELPERS = os.path.join(os.path.dirname(__file__), "helpers")


def run_helper(script, *args, env=None, timeout=300):
    """Runs tests/helpers/<script>; returns the parsed JSON of its RESULT line."""
    process = subprocess.run(
        [sys.executable, os.path.join(HELPERS, script), *map(str, args)],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    return parse_result(process.stdout)


def parse_result(stdout):
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, stdout[-3000:]
    payload = lines[-1][len("RESULT ") :]
    return json.loads(payload) if payload.startswith("{") else payload


# --- strategy names ------------------------------------------------------------------------


def test_unknown_strategy_name_lists_choices():
    with pytest.raises(ValueError) as info:
        distribute.resolve_strategy("gpus")
    message = str(info.value)
    assert "'gpus'" in message
    for name in distribute.STRATEGY_NAMES:
        assert name in message


def test_tpu_without_tpu_fails_with_clear_message(monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    with pytest.raises(distribute.StrategyUnavailableError, match="No TPU found"):
        distribute.resolve_strategy("tpu")


def test_auto_on_cpu_machine_is_default_strategy(monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    strategy = distribute.resolve_strategy()
    assert strategy is tf.distribute.get_strategy()
    assert strategy.num_replicas_in_sync == 1
    assert distribute.is_chief(strategy)


def test_one_device_strategy_on_cpu():
    strategy = distribute.resolve_strategy("one_device")
    assert isinstance(strategy, tf.distribute.OneDeviceStrategy)
    assert strategy.num_replicas_in_sync == 1


def test_multi_worker_without_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(distribute.StrategyUnavailableError, match="needs the TF_CONFIG"):
        distribute.resolve_strategy("multi_worker")


@pytest.mark.parametrize(
    "tf_config, message",
    [
        ("{not json", "not valid JSON"),
        ('{"cluster": {}}', "needs a 'cluster' dict and a 'task' dict"),
        (
            '{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 1}}',
            "does not name a member",
        ),
        (
            '{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "chief", "index": 0}}',
            "does not name a member",
        ),
    ],
)
def test_multi_worker_with_invalid_tf_config(monkeypatch, tf_config, message):
    monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(distribute.StrategyUnavailableError, match=message):
        distribute.resolve_strategy("multi_worker")


# --- batch split, precision, XLA -----------------------------------------------------------


def test_per_replica_batch_size_splits_evenly():
    four_replicas = types.SimpleNamespace(num_replicas_in_sync=4)
    assert distribute.per_replica_batch_size(64, four_replicas) == 16
    assert distribute.per_replica_batch_size(5, tf.distribute.get_strategy()) == 5


@pytest.mark.parametrize("batch_size", [30, 0, -4, 8.0])
def test_per_replica_batch_size_rejects_uneven_batches(batch_size):
    four_replicas = types.SimpleNamespace(num_replicas_in_sync=4)
    with pytest.raises(ValueError, match=r"multiple of the number of replicas \(4"):
        distribute.per_replica_batch_size(batch_size, four_replicas)


def test_mixed_precision_switch(tiny_vit_kwargs):
    try:
        assert distribute.set_mixed_precision("mixed_bfloat16") == "mixed_bfloat16"
        model = randomize_weights(keras_vit.ViT(**tiny_vit_kwargs), seed=2)
        assert model.get_layer("encoderblock_0").compute_dtype == "bfloat16"
        assert model.get_layer("encoderblock_0").variable_dtype == "float32"
        x = random_images(np.random.default_rng(1), 2, 32, 32)
        logits = model(x)
        assert logits.dtype == "float32"
        keras.config.set_dtype_policy("float32")
        reference = keras_vit.ViT(**tiny_vit_kwargs)
        reference.set_weights(model.get_weights())
        assert_close_to_float32(logits, reference(x), "mixed_bfloat16")
        assert distribute.set_mixed_precision("mixed_float16") == "mixed_float16"
        assert keras.config.dtype_policy().compute_dtype == "float16"
    finally:
        assert distribute.set_mixed_precision(None) == "float32"
    assert keras.config.dtype_policy().name == "float32"
    with pytest.raises(ValueError, match="mixed_bfloat16"):
        distribute.set_mixed_precision("half")


def test_jit_compile_switch():
    default = tf.distribute.get_strategy()
    assert distribute.resolve_jit_compile(True, default) is True
    assert distribute.resolve_jit_compile(False, default) is False
    assert distribute.resolve_jit_compile(None, default) == "auto"


# --- two logical CPUs under MirroredStrategy (one subprocess for all checks) ---------------


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("mirrored")
    return out_dir, run_helper("mirrored_checks.py", out_dir)


def test_two_replica_loss_matches_one_device(mirrored):
    _, result = mirrored
    assert result["num_replicas"] == 2
    assert result["per_replica_batch"] == 4
    assert "Received: batch_size=7" in result["odd_batch_error"]
    assert len(result["two_replica_loss"]) == 3
    np.testing.assert_allclose(result["two_replica_loss"], result["one_device_loss"], atol=1e-4)
    assert result["two_replica_loss"][-1] < result["two_replica_loss"][0]  # it trains
    assert result["max_weight_diff"] < 1e-4


def test_b39_build_in_scope_mirrors_every_weight(mirrored):
    """B39: build+compile in the scope, fit outside: works, every weight is mirrored."""
    _, result = mirrored
    mirrored_flags = result["b39_mirrored"]
    assert mirrored_flags["cls/cls"] and mirrored_flags["posembed_input/pos_embedding"]
    assert all(mirrored_flags.values()), mirrored_flags
    assert len(mirrored_flags) == 24  # every weight of the 1-block model
    assert result["b39_replicas_equal"]


def test_b39_build_outside_scope_gives_clear_error(mirrored):
    """B39: a model built outside the scope gets a clear error, not Keras' bare assert."""
    _, result = mirrored
    message = result["b39_check_error"]
    assert "not created in the distribution strategy scope of MirroredStrategy" in message
    assert "embedding/conv/kernel" in message
    assert "with strategy.scope()" in message
    # What plain Keras 3.15 does instead (the reason for the check); informative only.
    assert result["b39_keras_error"] in (None, "AssertionError", "ValueError", "RuntimeError")


def test_b40_saved_after_mirrored_training_reloads_in_fresh_process(mirrored, tmp_path):
    """B40: train under MirroredStrategy(2 CPUs), save, load in a fresh process inside and
    outside a strategy scope: predictions equal (atol 1e-6)."""
    out_dir, result = mirrored
    assert result["b40_saved"]
    run_helper("load_and_predict.py", out_dir / "b40.keras", out_dir / "b40_inputs.npy", tmp_path)
    expected = np.load(out_dir / "b40_predictions.npy")
    np.testing.assert_allclose(np.load(tmp_path / "outside.npy"), expected, atol=1e-6)
    np.testing.assert_allclose(np.load(tmp_path / "inside.npy"), expected, atol=1e-6)


# --- two worker processes on 127.0.0.1 -----------------------------------------------------


PORT_ATTEMPTS = 3
PORT_TAKEN = ("Could not start gRPC server", "Address already in use")


def free_ports(count):
    """Ports free a moment ago. TensorFlow's gRPC server binds without SO_REUSEPORT, so the
    port cannot be held for it: another process may take it before the worker binds, and
    `two_workers` then starts again on new ports (see `start_two_workers`)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_two_workers(run_dir):
    """Runs the two workers to the end; returns [(returncode, stdout, stderr)] per worker."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    processes = []
    try:
        for index in range(2):
            tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
            processes.append(
                subprocess.Popen(
                    [sys.executable, os.path.join(HELPERS, "multi_worker_run.py"), str(run_dir)],
                    env={
                        **os.environ,
                        "TF_CPP_MIN_LOG_LEVEL": "2",
                        "TF_CONFIG": json.dumps(tf_config),
                    },
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        outputs = [process.communicate(timeout=300) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return [(p.returncode, out, err) for p, (out, err) in zip(processes, outputs, strict=True)]


def port_was_taken(results):
    return any(code != 0 and any(m in err for m in PORT_TAKEN) for code, _, err in results)


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """Two worker processes on 127.0.0.1; started again on new ports if a port was taken
    between `free_ports` and the workers' bind (at most PORT_ATTEMPTS times)."""
    for attempt in range(PORT_ATTEMPTS):
        root = tmp_path_factory.mktemp(f"multi_worker_{attempt}")
        run_dir = root / "run"
        results = start_two_workers(run_dir)
        if not port_was_taken(results):
            break
    for code, stdout, stderr in results:
        assert code == 0, stdout[-3000:] + stderr[-3000:]
    return root, run_dir, [parse_result(stdout) for _, stdout, _ in results]


def test_two_workers_train_and_chief_model_reloads(two_workers):
    root, run_dir, (chief, worker) = two_workers
    assert chief["strategy"] == worker["strategy"] == "MultiWorkerMirroredStrategy"
    assert chief["num_replicas"] == worker["num_replicas"] == 2
    assert (chief["chief"], worker["chief"]) == (True, False)
    # 32 examples, global batch 8 -> 4 steps per epoch, 2 epochs, identical on both workers.
    assert chief["steps"] == worker["steps"] == 8
    np.testing.assert_allclose(chief["loss"], worker["loss"], rtol=1e-6)
    # Only the chief wrote the run directory; the worker's backup is gone.
    names = sorted(os.listdir(run_dir))
    assert {"config.json", "metrics.json", "history.csv", "last.keras", "best.keras"} <= set(names)
    assert not [name for name in names if "worker" in name or name == "backup"], names
    model = runs.load_model(run_dir / "last.keras")
    predictions = model.predict(np.load(root / "inputs.npy"), verbose=0)
    np.testing.assert_allclose(predictions, np.load(root / "chief_predictions.npy"), atol=1e-6)


def test_multi_worker_shim_still_needed(two_workers):
    """Keras 3.15's `fit` fails under TensorFlow's plain MultiWorkerMirroredStrategy, which
    is why keras_vit.distribute.MultiWorkerMirroredStrategy overrides `reduce`. If this test
    fails, a Keras release fixed the two call sites: drop the shim and this test."""
    _, _, results = two_workers
    known = ("Attempt to convert a value (PerReplica", "Invalid reduction dimension 0")
    for result in results:
        error = result["plain_error"]
        assert error is not None, (
            "Keras now trains under tf.distribute.MultiWorkerMirroredStrategy without "
            "keras_vit's reduce shim: remove keras_vit.distribute.MultiWorkerMirroredStrategy."
        )
        assert any(text in error for text in known), error
