"""Shared fixtures: the tiny config of the user reports, and a clean dtype policy per test."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# "auto" precision on CPU measures the host on first use and caches the figures in the
# user's cache folder (keras_vit/runtime/precision_probe.py); tests keep the deterministic flag rule
# (and leave the user's cache alone) unless they switch the probe on themselves.
os.environ.setdefault("KERAS_VIT_PRECISION_PROBE", "off")
# the CLI on JAX keeps compiled programs in the same folder (keras_vit/runtime/
# jax_compile_cache.py): off in tests, which leave the user's cache alone
os.environ.setdefault("KERAS_VIT_JAX_COMPILE_CACHE", "off")

import importlib.util  # noqa: E402

if importlib.util.find_spec("triton") is not None:
    # The PyTorch lane's environments (torch CUDA wheels bring triton): loading triton's LLVM
    # library after TensorFlow's crashes the interpreter (a segmentation fault inside
    # `import triton`, reached through timm -> torchvision -> torch._dynamo; torch 2.14,
    # TF 2.21). Loaded first, both work. Absent in the default environment.
    import triton  # noqa: E402, F401

import keras  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

from tests.tiny_config import TINY_ARCH  # noqa: E402

# Property tests draw a bounded number of examples in the default run (each builds Keras
# models, so no per-example deadline); HYPOTHESIS_PROFILE=long draws more (optional lanes).
settings.register_profile(
    "ci",
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=True,
)
settings.register_profile(
    "long",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

TINY_VIT = {key: value for key, value in TINY_ARCH.items() if key != "channels"}


def pytest_collection_modifyitems(config, items):
    """Tests marked `large` run only when asked for (`-m large`): skipped in the default run."""
    if "large" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="large: run with -m large")
    for item in items:
        if "large" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def tiny_vit_kwargs():
    """The tiny config of ../shared/cases/user_reports.md (a fresh dict per test)."""
    return dict(TINY_VIT)


@pytest.fixture(autouse=True)
def _restore_dtype_policy():
    """Tests that switch to mixed precision must not leak the policy into other tests."""
    policy = keras.config.dtype_policy()
    yield
    keras.config.set_dtype_policy(policy)
