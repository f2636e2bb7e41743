"""Keras on JAX as a training path of the CLI (tests/helpers/jax_cli.py in a KERAS_BACKEND=jax
process with two host devices): train, --resume, evaluate, predict, finetune and fewshot on
the same tf.data pipeline and run directory; --strategy mirrored as Keras' DataParallel."""

from __future__ import annotations

import numpy as np
import pytest

from tests.backends.subset import run_subset
from tests.helpers.model_parallel_step import check_step

pytestmark = pytest.mark.jax


@pytest.fixture(scope="module")
def jax_cli(tmp_path_factory):
    pytest.importorskip("jax")
    env = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    folder = tmp_path_factory.mktemp("jax_cli")
    return run_subset("jax", "tests.helpers.jax_cli", folder, env=env, timeout=900)


def test_every_subcommand_runs_on_jax(jax_cli):
    assert jax_cli["backend"] == "jax"
    for subcommand in ("train", "resume", "evaluate", "predict", "finetune", "fewshot"):
        assert jax_cli[subcommand] == 0, subcommand
    assert {"best.keras", "last.keras", "metrics.json", "config.json"} <= set(jax_cli["run_files"])


@pytest.mark.parametrize(
    "name, text", [("tpu", "TensorFlow-only"), ("multi_worker", "need TF_CONFIG")]
)
def test_strategies_without_what_they_need_are_refused_in_one_line(jax_cli, name, text):
    """tpu is tf.distribute only; multi_worker on JAX joins the processes TF_CONFIG (or
    Keras' KERAS_DISTRIBUTION_* variables) describes, and there is none here."""
    code, stderr = jax_cli[f"refused_{name}"]
    assert code == 2
    assert text in stderr and "Traceback" not in stderr
    assert len([line for line in stderr.splitlines() if text in line]) == 1


def test_a_batch_that_does_not_divide_by_the_devices_is_refused(jax_cli):
    code, stderr = jax_cli["refused_batch"]
    assert code == 2 and "Traceback" not in stderr
    assert "multiple of the number of replicas (2 with DataParallel)" in stderr
    assert "batch_size=3" in stderr


def test_data_parallel_gives_the_losses_of_one_device(jax_cli):
    losses = jax_cli["losses"]
    assert losses["auto_replicas"] == 1 and losses["mirrored_replicas"] == 2
    assert losses["auto"][1] < losses["auto"][0]  # it trains (one gradient step)
    np.testing.assert_allclose(losses["mirrored"], losses["auto"], rtol=1e-4)


def test_one_step_sharded_over_two_devices_equals_one_device(jax_cli):
    """keras_vit.runtime.model_parallel on a batch 1 x model 2 mesh: the loss and the weights
    after one step within 1e-5 of one device, each kernel and its momentum on its share."""
    result = jax_cli["model_parallel"]
    assert result["devices"] == 2
    check_step(result, "1x2", 1, 2)
