"""keras_vit.kernels.dispatch: every attention kernel a layer can take (fused Keras op,
TensorFlow's CPU forms, explicit probabilities) against the float64 NumPy equations
(tests/numpy_reference.py, appendix A eqs. 5-8) and against each other, across dtype
policies, token counts (square and non-square grids, registers, distillation token),
heads and `num_queries`. The `jax` test runs this same file under KERAS_BACKEND=jax."""

from __future__ import annotations

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_vit.kernels import dispatch
from keras_vit.layers import MultiHeadSelfAttention
from tests.numpy_reference import self_attention
from tests.output_checks import assert_informative, randomize_weights

PREFIX = "a/"
# max |error| allowed, as a fraction of the reference's largest entry
TOLERANCE = {"float32": 2e-5, "mixed_bfloat16": 4e-2, "mixed_float16": 4e-3}
ON_TENSORFLOW = keras.backend.backend() == "tensorflow"


def kernels_for(policy: str) -> list[str]:
    """The kernels a layer may run under `policy` on this backend (float16: explicit only,
    its fused op would compute the logits in float16)."""
    if policy == "mixed_float16":
        return [dispatch.EXPLICIT]
    return [dispatch.EXPLICIT, dispatch.FUSED] + ([dispatch.TENSORFLOW] if ON_TENSORFLOW else [])


def _layer_and_params(policy, num_heads, hidden_dim, num_tokens, seed, **kwargs):
    """A built attention layer with random weights, and the same weights under the official
    names for the NumPy reference."""
    rng = np.random.default_rng(seed)
    head_dim = hidden_dim // num_heads
    layer = MultiHeadSelfAttention(num_heads, dtype=policy, **kwargs)
    layer.build((None, num_tokens, hidden_dim))
    params = {}
    for name in ("query", "key", "value", "out"):
        projection = getattr(layer, name)
        kernel = rng.normal(0, 0.3, tuple(projection.kernel.shape)).astype("float32")
        bias = rng.normal(0, 0.3, tuple(projection.bias.shape)).astype("float32")
        projection.kernel.assign(kernel)
        projection.bias.assign(bias)
        params[f"{PREFIX}{name}/kernel"], params[f"{PREFIX}{name}/bias"] = kernel, bias
    assert head_dim * num_heads == hidden_dim
    return layer, params


def _run(layer, kernel, x, **call):
    layer.attention_kernel = kernel
    out = layer(x, **call)
    return np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(out, "float32")), np.float64)


TOKENS = st.tuples(
    st.integers(1, 4),  # grid rows
    st.integers(1, 4),  # grid columns: square and non-square grids
    st.integers(0, 4),  # register tokens
    st.booleans(),  # distillation token
)


@settings(max_examples=12, deadline=None)
@given(
    policy=st.sampled_from(sorted(TOLERANCE)),
    num_heads=st.sampled_from([1, 2, 8]),
    tokens=TOKENS,
    queries=st.one_of(st.none(), st.integers(1, 3)),
    seed=st.integers(0, 2**16),
)
def test_every_kernel_matches_the_numpy_equations(policy, num_heads, tokens, queries, seed):
    rows, cols, registers, distilled = tokens
    num_tokens = 1 + int(distilled) + registers + rows * cols
    queries = None if queries is None else min(queries, num_tokens)
    hidden_dim = 8 * num_heads
    layer, params = _layer_and_params(policy, num_heads, hidden_dim, num_tokens, seed)
    x = np.random.default_rng(seed + 1).normal(0, 1, (2, num_tokens, hidden_dim))
    x = x.astype("float32")
    expected = self_attention(x.astype(np.float64), params, PREFIX, num_heads)
    expected = expected[:, : queries or num_tokens]
    assert_informative(expected, "NumPy attention")
    scale = np.abs(expected).max()
    outputs = {}
    for kernel in kernels_for(policy):
        outputs[kernel] = _run(layer, kernel, x, num_queries=queries)
        assert outputs[kernel].shape == expected.shape, kernel
        error = np.abs(outputs[kernel] - expected).max() / scale
        assert error < TOLERANCE[policy], (kernel, policy, error)
    for kernel, out in outputs.items():  # the kernels agree with each other too
        error = np.abs(out - outputs[dispatch.EXPLICIT]).max() / scale
        assert error < TOLERANCE[policy], (kernel, policy, error)


@pytest.mark.parametrize("policy", sorted(TOLERANCE))
def test_the_kernel_is_chosen_at_build_from_backend_and_policy(policy):
    layer, _ = _layer_and_params(policy, 2, 16, 5, 0)
    if policy == "mixed_float16":
        expected = dispatch.EXPLICIT  # float16 logits need float32: explicit
    elif ON_TENSORFLOW:
        from keras_vit.kernels import tf_checks

        cpu_only = not tf_checks.gpu_visible()
        expected = dispatch.TENSORFLOW if policy != "float32" or cpu_only else dispatch.FUSED
    else:
        expected = dispatch.FUSED  # JAX, PyTorch: Keras' op, the backend's fused kernel
    assert layer.attention_kernel == expected


def test_an_unknown_kernel_is_refused_in_one_line():
    layer, _ = _layer_and_params("float32", 2, 16, 5, 0)
    layer.attention_kernel = "flash"
    with pytest.raises(ValueError, match="attention_kernel.*'flash'"):
        layer(np.zeros((1, 5, 16), "float32"))


@pytest.mark.parametrize("training, rate, fused", [(True, 0.5, False), (False, 0.5, True)])
def test_attention_dropout_in_training_falls_back_to_explicit(monkeypatch, training, rate, fused):
    """A fused kernel has no dropout on its weights: training with attention dropout takes
    the explicit probabilities; inference with the same layer keeps the fused op."""
    calls = []
    real = dispatch.fused_attention
    monkeypatch.setattr(dispatch, "fused_attention", lambda *a: calls.append(1) or real(*a))
    layer, _ = _layer_and_params("float32", 2, 16, 5, 0, attention_dropout_rate=rate)
    x = np.random.default_rng(0).normal(0, 1, (2, 5, 16)).astype("float32")
    out = _run(layer, dispatch.FUSED, x, training=training)
    assert bool(calls) is fused
    if training:  # dropped weights: not the inference output
        assert not np.allclose(out, _run(layer, dispatch.FUSED, x, training=False), atol=1e-6)


def test_the_fused_kernel_goes_through_keras_op(monkeypatch):
    """Keras' op, but in float32 training on JAX's CPU backend, where the fused kernel is
    `keras_vit.kernels.jax.attention` (a hand-written gradient; the same values)."""
    calls = []
    real = dispatch.fused_attention
    monkeypatch.setattr(dispatch, "fused_attention", lambda *a: calls.append(1) or real(*a))
    layer, _ = _layer_and_params("float32", 2, 16, 5, 0)
    x = np.random.default_rng(0).normal(0, 1, (1, 5, 16)).astype("float32")
    inferred = _run(layer, dispatch.FUSED, x, training=False)
    assert calls == [1]
    trained = _run(layer, dispatch.FUSED, x, training=True)
    assert calls == ([1] if dispatch._on_jax_cpu() else [1, 1])
    np.testing.assert_allclose(trained, inferred, atol=1e-6)


@pytest.mark.skipif(
    keras.backend.backend() not in ("tensorflow", "jax"), reason="no LayerNorm kernel there"
)
def test_training_layer_norm_goes_through_the_backends_kernel(monkeypatch):
    """In training the block's LayerNorm takes the backend's kernel (a hand-written
    gradient), with Keras' layer's values; in inference Keras' layer itself."""
    if ON_TENSORFLOW:
        from keras_vit.kernels import tensorflow as kernels
    else:
        from keras_vit.kernels import jax as kernels
    calls = []
    real = kernels.layer_norm
    monkeypatch.setattr(kernels, "layer_norm", lambda *a: calls.append(1) or real(*a))
    norm = keras.layers.LayerNormalization(epsilon=1e-6)
    norm.build((2, 5, 8))
    randomize_weights(norm, seed=0)
    x = np.random.default_rng(1).normal(1, 3, (2, 5, 8)).astype("float32")
    trained = keras.ops.convert_to_numpy(dispatch.layer_norm(norm, x, training=True))
    assert calls == [1]
    inferred = keras.ops.convert_to_numpy(dispatch.layer_norm(norm, x, training=False))
    assert calls == [1]
    np.testing.assert_allclose(trained, inferred, atol=1e-5)
    assert np.abs(inferred - keras.ops.convert_to_numpy(norm(x))).max() == 0.0


@pytest.mark.parametrize("registers, distilled, image_size", [(0, False, 32), (2, True, (24, 40))])
def test_models_give_the_same_logits_and_maps_on_every_kernel(registers, distilled, image_size):
    """A tiny ViT (registers, distillation token, non-square image, class-token-only last
    block) predicts the same on each kernel; attention maps stay explicit probabilities."""
    import keras_vit

    model = keras_vit.ViT(
        image_size=image_size,
        patch_size=8,
        hidden_dim=32,
        num_heads=4,
        mlp_dim=64,
        num_layers=2,
        num_classes=5,
        num_register_tokens=registers,
        distilled=distilled,
    )
    randomize_weights(model, seed=3)
    size = (image_size, image_size) if isinstance(image_size, int) else image_size
    x = np.random.default_rng(4).uniform(-1, 1, (2, *size, 3)).astype("float32")
    layers = [
        layer
        for layer in model._flatten_layers(include_self=False, recursive=True)
        if isinstance(layer, MultiHeadSelfAttention)
    ]
    assert len(layers) == 2
    outputs = {}
    for kernel in kernels_for("float32"):
        for layer in layers:
            layer.attention_kernel = kernel
        outputs[kernel] = np.asarray(model(x))
    assert_informative(outputs[dispatch.EXPLICIT], "logits")
    for kernel, out in outputs.items():
        np.testing.assert_allclose(out, outputs[dispatch.EXPLICIT], atol=2e-5, err_msg=kernel)
    maps = keras_vit.attention_maps(model, x[:1])
    first = np.asarray(maps[0])
    np.testing.assert_allclose(first.sum(-1), 1.0, atol=1e-5)


@pytest.mark.large  # JAX subprocesses, ~45 s (.ci/run_jax)
@pytest.mark.jax
def test_every_kernel_on_jax():
    """This file's tests under KERAS_BACKEND=jax (JAX's fused op: jax.nn's
    dot_product_attention, cuDNN flash attention where a GPU allows), in a fresh process."""
    pytest.importorskip("jax")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not jax"]
    completed = subprocess.run(
        [*command, os.path.abspath(__file__)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=root,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-2000:]
    assert " passed" in completed.stdout and "failed" not in completed.stdout


def test_prefer_memory_schedule_adds_the_flag_on_jax_alone(monkeypatch):
    """On JAX the flag joins the user's other XLA flags; on other backends XLA_FLAGS stays."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/nowhere")
    added = dispatch.prefer_memory_schedule()
    on_jax = keras.backend.backend() == "jax"
    assert added is on_jax
    expected = "--xla_dump_to=/nowhere" + (" " + dispatch.XLA_CPU_MEMORY_SCHEDULE) * on_jax
    assert os.environ["XLA_FLAGS"] == expected
    assert dispatch.prefer_memory_schedule() is False  # asked twice: the flag is there once
    assert os.environ["XLA_FLAGS"] == expected


def _remat_case(case, tmp_path, xla_flags=""):
    from tests.backends.subset import run_subset

    env = {"JAX_PLATFORMS": "cpu", "REMAT_CASE": case, "XLA_FLAGS": xla_flags}
    return run_subset("jax", "tests.helpers.remat_memory", tmp_path, env=env, timeout=600)


@pytest.fixture(scope="module")
def remat_cases(tmp_path_factory):
    """The three cases of tests/helpers/remat_memory.py; the user's XLA_FLAGS in "plain"
    names XLA:CPU's default scheduler explicitly."""
    pytest.importorskip("jax")
    folder = tmp_path_factory.mktemp("remat")
    user = dispatch.XLA_CPU_MEMORY_SCHEDULE.replace("=false", "=true")
    return {
        "model": _remat_case("model", folder / "model"),
        "plain": _remat_case("plain", folder / "plain", xla_flags=user),
        "cli": _remat_case("cli", folder / "cli"),
    }


@pytest.mark.large  # JAX subprocesses, ~45 s (.ci/run_jax)
@pytest.mark.jax
def test_remat_halves_a_training_steps_memory_on_jax_cpu(remat_cases):
    """XLA's own memory analysis of the compiled step: remat=True keeps at most half the
    temporaries of remat=False (4 blocks, 65 tokens: 16.7 vs 33.1 MB when measured)."""
    model, plain = remat_cases["model"], remat_cases["plain"]
    assert model["model_temp"] <= 0.6 * plain["model_temp"], (model, plain)
    assert dispatch.XLA_CPU_MEMORY_SCHEDULE in model["xla_flags"]


@pytest.mark.large  # JAX subprocesses, ~45 s (.ci/run_jax)
@pytest.mark.jax
def test_remat_leaves_the_users_xla_scheduler_choice(remat_cases):
    """XLA_FLAGS naming the scheduler option stays as it is: remat then saves nothing on CPU,
    as the dispatch's docstring says."""
    plain = remat_cases["plain"]
    assert plain["xla_flags"] == dispatch.XLA_CPU_MEMORY_SCHEDULE.replace("=false", "=true")
    assert plain["remat_model_temp"] >= 0.9 * plain["model_temp"], plain


@pytest.mark.large  # JAX subprocesses, ~45 s (.ci/run_jax)
@pytest.mark.jax
def test_keras_vit_train_remat_asks_before_jax_starts(remat_cases):
    """`keras-vit train --remat` sets the flag before its first JAX computation: a pure-JAX
    checkpointed chain compiled afterwards in the same process gets the memory schedule."""
    cli, plain = remat_cases["cli"], remat_cases["plain"]
    assert cli["code"] == 0
    assert cli["chain_temp"] <= 0.6 * plain["chain_temp"], (cli, plain)
