"""keras_vit.runtime.jax_cluster: the cluster read from TF_CONFIG or Keras' variables, and two
JAX processes x 2 host devices on 127.0.0.1 training as one job with the losses of one
process over 4 devices (`large`: the default run checks the same job through
`keras-vit train --strategy multi_worker`, which calls `jax_cluster.start`, in
tests/runtime/test_jax_multi_process_cli.py)."""

import json
import os
import subprocess
import sys

import pytest

from keras_vit.runtime.jax_cluster import ClusterError, cluster_from_environment
from tests.backends.subset import ROOT
from tests.process_helpers import finish, free_ports


def tf_config(cluster, task_type, index):
    return {
        "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})
    }


def test_the_first_worker_is_the_coordinator():
    cluster = {"worker": ["10.0.0.1:1234", "10.0.0.2:1234", "10.0.0.3:1234"]}
    assert cluster_from_environment(tf_config(cluster, "worker", 0)) == ("10.0.0.1:1234", 3, 0)
    assert cluster_from_environment(tf_config(cluster, "worker", 2)) == ("10.0.0.1:1234", 3, 2)


def test_a_chief_job_comes_first():
    cluster = {"chief": ["c:1"], "worker": ["w0:1", "w1:1"]}
    assert cluster_from_environment(tf_config(cluster, "chief", 0)) == ("c:1", 3, 0)
    assert cluster_from_environment(tf_config(cluster, "worker", 1)) == ("c:1", 3, 2)


def test_keras_variables_without_tf_config():
    environ = {
        "KERAS_DISTRIBUTION_JOB_ADDRESSES": "h0:9,h1:9",
        "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
        "KERAS_DISTRIBUTION_PROCESS_ID": "1",
    }
    assert cluster_from_environment(environ) == ("h0:9", 2, 1)


@pytest.mark.parametrize(
    "environ, message",
    [
        ({}, "need TF_CONFIG"),
        (tf_config({"worker": ["a:1"]}, "worker", 1), "not a member"),
        (tf_config({"ps": ["a:1"]}, "ps", 0), "not a member"),
        ({"TF_CONFIG": "{not json"}, "names no task"),
        (
            {
                "KERAS_DISTRIBUTION_JOB_ADDRESSES": "h0:9",
                "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
                "KERAS_DISTRIBUTION_PROCESS_ID": "2",
            },
            "PROCESS_ID must be in",
        ),
    ],
)
def test_an_unusable_description_is_refused(environ, message):
    with pytest.raises(ClusterError, match=message):
        cluster_from_environment(environ)


def start(env):
    environment = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "JAX_PLATFORMS": "cpu",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        **env,
    }
    command = [sys.executable, "-m", "tests.helpers.jax_processes"]
    return subprocess.Popen(
        command, cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def result_of(code, out, err):
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert code == 0 and lines, err[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.mark.large
def test_two_processes_train_as_one_four_device_process():
    pytest.importorskip("jax")
    (port,) = free_ports(1)
    cluster = {"worker": [f"127.0.0.1:{port}", "127.0.0.1:1"]}  # JAX reads the first only
    two_devices = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    route = ({}, {"VIA_STRATEGY": "1"})  # worker 1 joins as --strategy multi_worker does
    workers = [
        start({**two_devices, **route[i], **tf_config(cluster, "worker", i)}) for i in (0, 1)
    ]
    single = start({"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    results = [result_of(*outcome) for outcome in finish([*workers, single], timeout=500)]
    assert [r["devices"] for r in results] == [4, 4, 4]
    assert [r["chief"] for r in results] == [True, False, True]
    assert [r["run_dir_writer"] for r in results] == [True, False, True]
    reference = results[2]["losses"]
    assert len(reference) == 2 and all(loss == loss for loss in reference)
    for result in results[:2]:
        assert result["losses"] == pytest.approx(reference, abs=1e-5)
