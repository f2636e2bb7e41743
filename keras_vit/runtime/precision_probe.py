"""Measuring which precision-and-compiler setting trains a ViT fastest on this CPU, cached.

CPUs differ in ways their flags do not tell: on one AMD EPYC with `avx512_bf16` TensorFlow's
bfloat16 products run at ~1.4x float32, on an Intel Xeon reporting the same flag at half of
float32 (docs/performance_log.md). So `runtime.precision_auto.choose_precision` measures: the probe
builds one encoder block of the model's own shape (pre-norm attention + MLP, paper eq. 2-3:
its `hidden_dim` D, `mlp_dim`, `num_heads` and tokens per image, `model_shape` or
`shape_from_kwargs`; a batch sized to ~10 GFLOP per step) from keras_vit's own
`TransformerBlock`, and times its training step as a run takes it (Keras' `train_on_batch`:
forward, backward and the run's AdamW update) in each setting of `CANDIDATES`, a unit of
each in turn (one step, or back-to-back steps lasting `MIN_UNIT_S`), rotated, for about
`BUDGET_S` seconds after warm-up (XLA compiles first); each setting's figure is its median
call relative to the other settings of the same round (`paired_figures`). The figures are
cached per (CPU model, core count, TensorFlow version, D, mlp_dim, num_heads, tokens) in one
JSON file, so the probe runs once per host and model shape.

Cache: `$KERAS_VIT_CACHE_DIR/precision_probe.json`, else
`$XDG_CACHE_HOME/keras_vit/precision_probe.json`, else `~/.cache/keras_vit/...`. Delete the
file to measure again (or set `KERAS_VIT_PRECISION_PROBE=refresh` for one run); a file that
cannot be read or parsed is ignored with a warning and rewritten. `KERAS_VIT_PRECISION_PROBE=
off` (or 0/false) never probes: the flag rule decides.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import platform
import statistics
import time

from keras_vit import _atomic

logger = logging.getLogger(__name__)

CANDIDATES = (("float32", True), ("float32", False), ("mixed_bfloat16", False))
"""(policy, XLA) settings the probe times. XLA's CPU bfloat16 products do not use the
bfloat16 units (measured slower than both float32 settings), so bfloat16 + XLA is left out."""
PROBE_ENV = "KERAS_VIT_PRECISION_PROBE"
CACHE_ENV = "KERAS_VIT_CACHE_DIR"
CACHE_FILE = "precision_probe.json"
CACHE_VERSION = 6
"""6: the block is stepped as a run steps its model: Keras' `train_on_batch` with the run's
AdamW (5: a bare forward and backward in a `tf.function`). 5: steps shorter than
`MIN_UNIT_S` are timed in units of several calls (4: one call each), and tied figures are
measured again (`MAX_PASSES`). 4: a setting's figure is its median call relative to the
other settings of each round (`paired_figures`; 3: its fastest call). 3: the block is
keras_vit's own `TransformerBlock` in training (2: a plain-TensorFlow block, whose kernels
the model does not all run). 2: the key holds the model's mlp_dim, num_heads and exact token
count (1: D and a token power-of-two bucket, MLP 4D and heads D/64 assumed)."""
DEFAULT_TOKENS = 197
"""Tokens per image when the caller does not say (224 / 16 = 14 x 14 patches and the class
token)."""
BUDGET_S = 3.0
"""Seconds of timed rounds (after the warm-up) of one probe."""
MIN_ROUNDS, MAX_ROUNDS = 7, 24
"""Timed rounds of one probe: at least 7 (a median over an odd count), at most 24."""
MIN_UNIT_S = 0.04
"""Shortest timed unit: a setting whose step takes less runs that many steps back to back in
each round (as a training run does), timed together. Single steps of a few milliseconds
(the default `keras-vit train` model's D 64 block: ~5 ms) carry the clock's and the
scheduler's jitter and the cache misses of switching settings: probing that block in
single steps, 1 probe of 8 ranked float32 + XLA 1.01x float32 where the others said
1.08-1.14x and the model's step 1.2x, and the tie picked the slower setting for a whole
run (218 s against 154-168 s, docs/performance_log.md). 24 rounds of three ~40 ms units fill
the 3 s budget."""
TIE = 0.05
"""Settings within 5% of the fastest measured one tie (the probe's own noise on a shared
machine): `keras_vit.runtime.precision_auto.tie_winner` keeps one without XLA, then the
flag rule's."""
MAX_PASSES = 2
"""Passes of `measure_rounds` a probe pools at most while its figures tie."""
STEP_GFLOP = 10.0
"""Target size of one probe step; the batch is chosen to reach it (1 to 16 images). 10
GFLOP gives Ti/16 a batch of 16 as a training run's: at 5 images (3 GFLOP) the AMX bfloat16
products of an Intel Xeon tied float32 + XLA in the probe while the batch-16 model ran
1.2-1.7x faster in bfloat16 (docs/performance_log.md)."""
OFF_WORDS = ("off", "0", "false", "no")
CACHED = "cached"
"""`probe=` value of the one-off commands (`keras-vit predict`, ...): cached figures when
this host and model shape have some, else the flag rule; never a measurement."""
ANNOUNCEMENT = "Timing one block in float32, float32+XLA, bfloat16 (~10-30 s, then cached)"
"""Logged (INFO) before a probe measures, so that its seconds are not a silent wait."""
clock = time.perf_counter
"""The probe's clock (seconds); tests replace it with a fake one."""


def setting_label(policy: str, xla: bool) -> str:
    return f"{policy}+xla" if xla else policy


def probe_mode(probe: bool | str | None = None) -> str:
    """ "off", "on", "refresh" or "cached": the `probe` argument (True, False, or "cached":
    use figures already cached, never measure), else `KERAS_VIT_PRECISION_PROBE`. A
    "cached" argument under `KERAS_VIT_PRECISION_PROBE=off` is "off"."""
    value = os.environ.get(PROBE_ENV, "on").strip().lower()
    if probe == CACHED:
        return "off" if value in OFF_WORDS else CACHED
    if probe is not None:
        return "on" if probe else "off"
    if value in OFF_WORDS:
        return "off"
    return "refresh" if value == "refresh" else "on"


def cache_folder() -> str:
    """keras_vit's per-user cache folder: `$KERAS_VIT_CACHE_DIR`, else
    `$XDG_CACHE_HOME/keras_vit`, else `~/.cache/keras_vit` (not created here)."""
    folder = os.environ.get(CACHE_ENV)
    if not folder:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        folder = os.path.join(base, "keras_vit")
    return folder


def cache_path() -> str:
    """Where the probe's figures live (see the module docstring for the order)."""
    return os.path.join(cache_folder(), CACHE_FILE)


def cpu_model(path: str = "/proc/cpuinfo") -> str:
    """The CPU's model name (/proc/cpuinfo `model name`), else `platform.processor()`."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def core_count() -> int:
    """CPUs this process may run on (its affinity mask where the system has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def model_shape(model) -> dict | None:
    """{"hidden_dim", "mlp_dim", "num_heads", "tokens"} of a built keras_vit model: the width
    of its `embedding` layer, the first encoder block's `mlp_dim` and `num_heads`, and the
    tokens that block receives (None when the input size is dynamic). None when the model
    has no such layers."""
    try:
        hidden_dim = int(model.get_layer("embedding").hidden_dim)
        block = model.get_layer("encoderblock_0")
        mlp_dim, num_heads = int(block.mlp_dim), int(block.num_heads)
    except (ValueError, AttributeError, TypeError):
        return None
    try:
        tokens = block.input.shape[1]
    except (AttributeError, ValueError, IndexError):
        tokens = None
    return {
        "hidden_dim": hidden_dim,
        "mlp_dim": mlp_dim,
        "num_heads": num_heads,
        "tokens": int(tokens) if tokens else None,
    }


def tokens_per_image(image_size, patch_size, *, class_token=False, stem_stride=1, extra=0):
    """Tokens an encoder block sees: (H / (stem_stride * patch)) * (W / ...), plus one for
    the class token and `extra` (register tokens). `image_size`/`patch_size`: int or (h, w)."""
    size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    patch = (patch_size, patch_size) if isinstance(patch_size, int) else tuple(patch_size)
    grid = [int(s) // (int(p) * int(stem_stride)) for s, p in zip(size, patch, strict=True)]
    return grid[0] * grid[1] + int(bool(class_token)) + int(extra)


def shape_from_kwargs(kwargs: dict, image_size=None) -> dict:
    """The probe shape fields of a model from its builder keyword arguments (`keras_vit.ViT`
    or `keras_vit.HybridViT`: `hidden_dim`, `mlp_dim`, `num_heads`, `patch_size`, `pooling`,
    `resnet_stages` for a hybrid, `num_registers` where given), at `image_size` (default
    `kwargs["image_size"]`)."""
    from keras_vit.spec.configs import has_class_token, resnet_total_stride

    image_size = kwargs.get("image_size") if image_size is None else image_size
    stride = 1
    if "resnet_stages" in kwargs:  # a hybrid; None: HybridViT's default R50 stages
        stages = kwargs["resnet_stages"]
        stride = resnet_total_stride((3, 4, 9) if stages is None else stages)
    tokens = None
    if image_size is not None:
        tokens = tokens_per_image(
            image_size,
            kwargs.get("patch_size", 16),
            class_token=has_class_token(kwargs.get("pooling", "token")),
            stem_stride=stride,
            extra=kwargs.get("num_registers") or 0,
        )
    return {
        "hidden_dim": int(kwargs["hidden_dim"]),
        "mlp_dim": int(kwargs.get("mlp_dim") or 4 * int(kwargs["hidden_dim"])),
        "num_heads": int(kwargs.get("num_heads") or max(1, int(kwargs["hidden_dim"]) // 64)),
        "tokens": tokens,
    }


def host_key(shape: dict, *, tf_version: str | None = None) -> dict:
    """What the cached figures depend on: CPU model, cores, Keras' backend (the probe times
    the block on it: a TensorFlow figure does not rank JAX's steps), TensorFlow, and the probe
    `shape`'s hidden_dim, mlp_dim, heads and tokens (`probe_shape`)."""
    import keras

    if tf_version is None:
        import tensorflow as tf

        tf_version = tf.__version__
    return {
        "cpu": cpu_model(),
        "cores": core_count(),
        "backend": keras.backend.backend(),
        "tensorflow": tf_version,
        "hidden_dim": int(shape["hidden_dim"]),
        "mlp_dim": int(shape["mlp_dim"]),
        "num_heads": int(shape["heads"]),
        "tokens": int(shape["tokens"]),
    }


def key_text(key: dict) -> str:
    return "|".join(f"{name}={key[name]}" for name in sorted(key))


def read_cache(path: str) -> dict:
    """{key text: entry} from the cache file; {} when it is missing, corrupt or of another
    version (logged, never raised)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        logger.warning("Ignoring the precision probe cache %s (%s); probing again.", path, error)
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        logger.warning(
            "Ignoring the precision probe cache %s (not version %d).", path, CACHE_VERSION
        )
        return {}
    entries = data.get("entries")
    return (
        {k: v for k, v in entries.items() if _valid_entry(v)} if isinstance(entries, dict) else {}
    )


def _valid_entry(entry) -> bool:
    figures = entry.get("figures") if isinstance(entry, dict) else None
    return isinstance(figures, dict) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in figures.values()
    )


def write_cache(path: str, entries: dict) -> None:
    """Writes `entries` atomically; a failed write is logged (the run goes on)."""
    try:
        _atomic.write_json(path, {"version": CACHE_VERSION, "entries": entries})
    except OSError as error:
        logger.warning("Could not write the precision probe cache %s: %s", path, error)


def probe_shape(hidden_dim: int, tokens: int | None = None, mlp_dim=None, num_heads=None) -> dict:
    """The probe block's shape: the model's D, `mlp_dim` (default 4D), `num_heads` (default
    D/64, at least 1, dividing D) and `tokens` (default `DEFAULT_TOKENS`), and a batch of
    1-16 images that makes one training step ~`STEP_GFLOP`."""
    d = int(hidden_dim)
    n = int(tokens or DEFAULT_TOKENS)
    m = int(mlp_dim or 4 * d)
    if num_heads:
        heads = int(num_heads)
    else:
        heads = max(1, d // 64)
        while d % heads:
            heads -= 1
    macs = 4 * n * d * d + 2 * n * n * d + 2 * n * d * m
    per_image_gflop = 3 * 2 * macs / 1e9  # forward + backward
    batch = int(min(16, max(1, round(STEP_GFLOP / per_image_gflop))))
    return {"hidden_dim": d, "mlp_dim": m, "heads": heads, "tokens": n, "batch": batch}


def block_step(shape: dict, policy: str, xla: bool):
    """A no-argument function running one training step of one encoder block in `policy`,
    blocking until done. Shapes as `probe_shape` gives them.

    The block is keras_vit's own `TransformerBlock` (pre-norm attention + MLP, paper eq. 2-3)
    in a `keras.Model` on token input, compiled as a run compiles its model
    (`keras_vit.runtime.optimizers.ViTAdamW`, `jit_compile=xla`) and stepped with
    `train_on_batch`: the probe times the kernels the model trains with (its attention
    form, its LayerNorm and GELU, `keras_vit.kernels.tensorflow` in training) and what each step
    costs around them in Keras
    (the optimizer update, the loss, the step's own overhead).

    Both were needed to rank like the model: a plain-TensorFlow block ranked float32 + XLA
    1.16x ahead of float32 on an Ice Lake Xeon where the Ti/16 model's float32 step was the
    faster one, and a bare forward/backward of the block (no optimizer, no Keras step) tied
    the three settings within 5% on an AMD EPYC (Zen 3, AVX2) where the Ti/16 and S/16
    models trained 1.2-1.4x faster with float32 + XLA (docs/performance_log.md).
    """
    import keras
    import numpy as np

    from keras_vit.layers import TransformerBlock
    from keras_vit.runtime.optimizers import ViTAdamW

    d, m, h, n, b = (shape[k] for k in ("hidden_dim", "mlp_dim", "heads", "tokens", "batch"))
    tokens = keras.Input((n, d), name="tokens")
    block = TransformerBlock(num_heads=h, mlp_dim=m, dtype=policy, name="probe_block")
    out = keras.layers.Activation("linear", dtype="float32", name="probe_out")(block(tokens))
    model = keras.Model(tokens, out, name="precision_probe")
    model.compile(optimizer=ViTAdamW(learning_rate=1e-4), loss="mse", jit_compile=bool(xla))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((b, n, d)).astype("float32")
    target = rng.standard_normal((b, n, d)).astype("float32")
    return lambda: float(model.train_on_batch(x, target))


def measure(steps: dict, *, timer=None, budget_s: float = BUDGET_S) -> dict:
    """The typical seconds per call of each of `steps` ({label: no-argument function}):
    `paired_figures` of `measure_rounds`."""
    return paired_figures(measure_rounds(steps, timer=timer, budget_s=budget_s))


def measure_rounds(steps: dict, *, timer=None, budget_s: float = BUDGET_S) -> dict:
    """{label: seconds per call of each timed round} of each of `steps` ({label: no-argument
    function}).

    Each is called once untimed (tracing, XLA compilation) and once timed, which sets its
    unit: `unit_calls` back-to-back calls, at least `MIN_UNIT_S` long. Then rounds time one
    unit of each, in an order rotated every round, until `budget_s` of timed rounds (at least
    `MIN_ROUNDS`, at most `MAX_ROUNDS`), so that the load of a shared machine hits every
    setting alike. `paired_figures` judges each unit against the other settings' units of
    its own round, so load that comes and goes between rounds (up to 1.5x minute to minute
    on a shared 2-core host) cancels out, and its median over rounds drops one lucky or
    unlucky unit. `timer` is a clock in seconds (default: the module's `clock`).
    """
    timer = timer or clock
    labels = list(steps)
    for label in labels:
        steps[label]()
    calls = {label: unit_calls(_timed(steps[label], 1, timer)) for label in labels}
    times = {label: [] for label in labels}
    start = timer()
    for index in range(MAX_ROUNDS):
        shift = index % len(labels)
        for label in labels[shift:] + labels[:shift]:
            times[label].append(_timed(steps[label], calls[label], timer) / calls[label])
        if index + 1 >= MIN_ROUNDS and timer() - start >= budget_s:
            break
    return times


def tied(figures: dict) -> list:
    """The labels of `figures` ({label: time}) within `TIE` of the fastest, in their order."""
    fastest = min(figures.values())
    return [label for label, value in figures.items() if value <= (1 + TIE) * fastest]


def undecided(figures: dict) -> bool:
    """Whether another setting is within `TIE` of the fastest of `figures` ({label: time})."""
    return len(tied(figures)) > 1


def measure_until_decided(steps: dict, *, timer=None) -> dict:
    """`measure`, with up to `MAX_PASSES` passes of rounds pooled while the figures tie
    (`undecided`): more rounds where the choice hangs on the probe's noise. The D 64 block
    of the default `keras-vit train` model, ~1.1x faster with XLA, fell inside the tie in 1
    probe of 6 with one pass (docs/performance_log.md)."""
    times = measure_rounds(steps, timer=timer)
    for _ in range(MAX_PASSES - 1):
        if not undecided(paired_figures(times)):
            break
        more = measure_rounds(steps, timer=timer)
        times = {label: times[label] + more[label] for label in times}
    return paired_figures(times)


def unit_calls(seconds_per_call: float) -> int:
    """Calls of a step that make one timed unit: enough to last `MIN_UNIT_S`, at least 1."""
    return max(1, math.ceil(MIN_UNIT_S / max(seconds_per_call, 1e-6)))


def _timed(step, calls: int, timer) -> float:
    before = timer()
    for _ in range(calls):
        step()
    return timer() - before


def paired_figures(times: dict) -> dict:
    """{label: typical seconds per call} from `times` ({label: seconds of each round's call},
    every list one entry per round, all of one length).

    A round's level is the geometric mean of its calls; a setting's figure is the median over
    rounds of its call divided by its round's level, times the median level. So the ratio of
    two figures is, up to the medians, the median of their ratio within a round: the
    comparison the model's own steps make over a run (benchmarks report the median step).

    The fastest call of each setting (this probe's figure before) let one lucky call decide:
    on an Ice Lake Xeon the Ti/16 probe's fastest calls put float32 1.29x ahead of float32 +
    XLA where the medians of its calls, and of the full model's steps in the same process,
    said 1.07-1.08x (docs/performance_log.md). A setting that is slower on most calls (more
    sensitive to the other processes of a shared host, say) is judged by those calls, as a
    training run would feel them.
    """
    labels = list(times)
    rounds = range(len(times[labels[0]]))
    logs = {label: [math.log(max(t, 1e-9)) for t in times[label]] for label in labels}
    levels = [statistics.fmean(logs[label][index] for label in labels) for index in rounds]
    level = statistics.median(levels)
    relative = {
        label: statistics.median(x - lv for x, lv in zip(logs[label], levels, strict=True))
        for label in labels
    }
    return {label: math.exp(level + relative[label]) for label in labels}


def probe_figures(
    hidden_dim,
    tokens=None,
    *,
    mlp_dim=None,
    num_heads=None,
    refresh=False,
    make_step=None,
    timer=None,
    measure=True,
):
    """(milliseconds per probe step by setting label, the cache entry's date, cached?).

    The probe block has the model's shape (`probe_shape(hidden_dim, tokens, mlp_dim,
    num_heads)`). Reads the cache; on a miss (or `refresh`) measures `CANDIDATES` with
    `make_step(shape, policy, xla)` (default `block_step`) and stores the figures with their
    key and date. With `measure=False`, a cache miss returns None instead of measuring.
    """
    make_step = make_step or block_step
    shape = probe_shape(hidden_dim, tokens, mlp_dim, num_heads)
    key = host_key(shape)
    path = cache_path()
    entries = read_cache(path)
    entry = entries.get(key_text(key))
    if entry is not None and not refresh:
        return entry["figures"], entry.get("date"), True
    if not measure:
        return None
    logger.info(ANNOUNCEMENT)
    steps = {setting_label(p, x): make_step(shape, p, x) for p, x in CANDIDATES}
    seconds = measure_until_decided(steps, timer=timer)
    figures = {label: round(1000.0 * value, 3) for label, value in seconds.items()}
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    entries[key_text(key)] = {"key": key, "shape": shape, "figures": figures, "date": date}
    write_cache(path, entries)
    logger.debug("Precision probe (%s): %s ms per step; cached in %s", key_text(key), figures, path)
    return figures, date, False
