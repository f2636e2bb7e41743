"""`import keras_vit` asks TensorFlow for its pooling (BFC) CPU allocator, so an XLA step's
large temporary buffer is reused instead of being mapped afresh (and page-faulted) every
call; a value the user set is kept."""

import os
import subprocess
import sys

import pytest

from keras_vit.kernels import tf_allocator as _allocator

# One XLA call with a 64 MiB temporary (a 4096 x 4096 float32 product reduced to a scalar),
# repeated; prints the minor page faults per call (the kernel's own count, getrusage).
FAULTS_PER_CALL = """
import resource, sys
import keras_vit
import tensorflow as tf

x = tf.random.stateless_normal((4096, 4096), seed=(0, 0))
step = tf.function(lambda x: tf.reduce_sum(tf.tanh(tf.matmul(x, x))), jit_compile=True)
step(x).numpy(); step(x).numpy()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    step(x).numpy()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 4)
"""


def faults_per_call(**env):
    environ = {k: v for k, v in os.environ.items() if k != _allocator.ENV}
    result = subprocess.run(
        [sys.executable, "-c", FAULTS_PER_CALL],
        env={**environ, "TF_CPP_MIN_LOG_LEVEL": "2", **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return int(result.stdout.strip().splitlines()[-1])


@pytest.mark.large  # ~45 s: two child processes time an XLA step's page faults (.ci/run_large)
def test_the_pooling_allocator_stops_an_xla_step_from_faulting_its_buffers_afresh():
    """64 MiB of fresh pages is 16,384 faults a call: the C library's allocator maps the
    temporary anew every call; with `import keras_vit`'s default the pages are reused."""
    pooled = faults_per_call()  # import keras_vit sets the variable
    assert pooled < 1_000, pooled
    mapped_afresh = faults_per_call(**{_allocator.ENV: "false"})  # the user's choice kept
    if mapped_afresh <= 8_000:  # the control: without the pool, pages mapped anew each call
        pytest.skip(
            f"this host's C allocator already reuses the temporary ({mapped_afresh} faults a "
            "call without the pooling allocator): nothing here for the pool to save"
        )


@pytest.mark.parametrize("given", [None, "false", "true", "0"])
def test_a_value_the_user_set_is_kept(given):
    environ = {} if given is None else {_allocator.ENV: given}
    changed = _allocator.prefer_bfc_cpu_allocator(environ)
    assert changed is (given is None)
    assert environ[_allocator.ENV] == ("true" if given is None else given)
