"""Benchmark internals of `keras-vit benchmark`: the analytic FLOP count, the GEMM peak,
keras_vit's model and its timed steps.

The harness in `benchmarks/` (not installed) reuses them through `benchmarks/harness/common.py`
and builds the peer models (keras-hub, vit-keras, timm) itself (`benchmarks/harness/peers.py`).
The FLOP count covers matrix products only (paper section 3.1; FLOPs = 2 x MACs, a training
step ~3x the forward pass).
"""

from __future__ import annotations

import logging
import resource
import statistics
import time

from keras_vit._validation import to_pair

logger = logging.getLogger(__name__)

MODES = ("infer", "train")
TRAINING_FLOPS_FACTOR = 3.0  # forward + backward (two matrix products per forward one)
ARCH_FIELDS = ("patch_size", "hidden_dim", "mlp_dim", "num_heads", "num_layers")


def hybrid_config(variant):
    """The `keras_vit.spec.configs.HybridConfig` of a hybrid named in any spelling
    `keras_vit.spec.configs.resolve_model` takes ("R50+B/16", "R50_B16", "r50b16"), else None
    (a plain variant, a custom spec or an unknown name)."""
    from keras_vit.spec import configs

    if "," in variant:
        return None
    try:
        named = configs.resolve_model(variant)
    except ValueError:
        return None
    return named.config if named.is_hybrid else None


def variant_arch(variant):
    """The architecture (`patch_size`, `hidden_dim`, `mlp_dim`, `num_heads`, `num_layers`) of
    a named variant from `keras_vit.spec.configs.VIT_CONFIGS`, or of a custom spec
    "patch,hidden,mlp,heads,layers" (e.g. "8,32,64,4,2"). A hybrid of
    `keras_vit.spec.configs.HYBRID_CONFIGS` ("R50+B/16", any spelling) adds `resnet_stages`,
    and its `patch_size` is the patch on the ResNet feature map (`keras_vit.HybridViT`).

    Raises:
        ValueError: unknown variant name or a malformed spec.
    """
    from keras_vit.spec import configs

    if "," in variant:
        try:
            values = [int(part) for part in variant.split(",")]
        except ValueError:
            values = []
        if len(values) != len(ARCH_FIELDS) or min(values) < 1 or values[1] % values[3]:
            raise ValueError(
                "A custom variant is 5 positive integers 'patch,hidden,mlp,heads,layers' with "
                f"hidden divisible by heads. Received: {variant!r}"
            )
        return dict(zip(ARCH_FIELDS, values, strict=True))
    hybrid = hybrid_config(variant)
    if hybrid is not None:
        kwargs = hybrid.as_kwargs()
        return {
            **{field: kwargs[field] for field in ARCH_FIELDS},
            "resnet_stages": kwargs["resnet_stages"],
        }
    config = configs.get_config(variant)
    return {field: getattr(config, field) for field in ARCH_FIELDS}


def _same(size, stride):
    """Output side of a "same"-padded (TF "SAME") convolution or pooling: ceil(size / stride)."""
    return -(-size // stride)


def stem_convolutions(resnet_stages, image_size, channels=3, width=64):
    """The convolutions of the release's BiT ResNet stem (`keras_vit.HybridViT`'s
    `resnet_stages`) on one image, in order, and its feature map.

    Root: conv 7x7/2 (`width` filters) then a 3x3/2 max-pool (no MACs); stage s (1-based) of
    `resnet_stages[s - 1]` bottleneck units of width `f = width * 2**(s - 1)`: conv1 1x1 to f,
    conv2 3x3 (stride 2 in the first unit of stages 2+) to f, conv3 1x1 to 4f, and in the
    first unit (width or stride change) the projection conv_proj 1x1/stride to 4f. Every side
    is "same"-padded: out = ceil(in / stride). (Kolesnikov et al. 2020, BiT; the ViT release's
    models_resnet.py.)

    Args:
        resnet_stages: units per stage, e.g. (3, 4, 9); () for the root only.
        image_size: int (square) or (height, width) in pixels.
        channels: image channels. width: root width (64 in the release).

    Returns:
        (convs, feature_map): convs a list of `(kh, kw, in_channels, out_channels, out_height,
        out_width)`, feature_map `(height, width, channels)`.
    """
    height, width_px = to_pair("image_size", image_size)
    height, width_px = _same(height, 2), _same(width_px, 2)
    convs = [(7, 7, channels, width, height, width_px)]
    height, width_px = _same(height, 2), _same(width_px, 2)  # the max-pool
    in_channels = width
    for s, units in enumerate(resnet_stages, start=1):
        features = width * 2 ** (s - 1)
        for u in range(1, units + 1):
            stride = 2 if (s > 1 and u == 1) else 1
            out_h, out_w = _same(height, stride), _same(width_px, stride)
            convs.append((1, 1, in_channels, features, height, width_px))
            convs.append((3, 3, features, features, out_h, out_w))
            convs.append((1, 1, features, 4 * features, out_h, out_w))
            if in_channels != 4 * features or stride != 1:
                convs.append((1, 1, in_channels, 4 * features, out_h, out_w))
            height, width_px, in_channels = out_h, out_w, 4 * features
    return convs, (height, width_px, in_channels)


def _conv_macs(conv):
    kh, kw, cin, cout, out_h, out_w = conv
    return kh * kw * cin * cout * out_h * out_w


def token_grid(arch, image_size, channels=3, resnet_width=64):
    """The patch grid `(rows, columns)` of `arch` (`variant_arch`) at `image_size`: whole
    patches of the image for a ViT, of the ResNet feature map for a hybrid.

    Raises:
        ValueError: for a hybrid, a feature-map side not a multiple of the patch (the model
            refuses it too), naming both.
    """
    patch = arch["patch_size"]
    if arch.get("resnet_stages") is None:  # whole patches, as the count has always taken
        height, width = to_pair("image_size", image_size)
        return height // patch, width // patch
    stages = arch["resnet_stages"]
    _, (height, width, _) = stem_convolutions(stages, image_size, channels, resnet_width)
    if height % patch or width % patch:
        raise ValueError(
            f"the ResNet feature map is {height}x{width}; each side must be a multiple of the "
            f"patch ({patch})"
        )
    return height // patch, width // patch


def analytic_macs(
    *,
    patch_size,
    hidden_dim,
    mlp_dim,
    num_layers,
    image_size=224,
    channels=3,
    num_classes=1000,
    class_token=True,
    resnet_stages=None,
    resnet_width=64,
    **_ignored,
):
    """Multiply-accumulates of one forward pass of one image (matrix products only).

    Patch embedding, then per block the q/k/v/out projections (4 N D^2), q k^T and the
    weighted sum of values (2 N^2 D over all heads) and the MLP (2 N D M), then the head.
    Layer norms, softmax, GELU and biases are left out, as in the published counts
    (torchvision's ViT table, whose "GFLOPS" are multiply-adds: B/16 17.56 G, B/32 4.41 G at
    224). A hybrid (`resnet_stages` given) adds every convolution of its BiT ResNet stem
    (`stem_convolutions`: kh kw C_in C_out per output position; GroupNorm, ReLU, max-pool and
    the weight standardisation left out likewise), and its patches are cut from the stem's
    feature map (paper section 3.1).

    Args:
        patch_size, hidden_dim, mlp_dim, num_layers: the architecture (paper table 1).
        image_size: int (square) or (height, width) in pixels, each a multiple of
            `patch_size` (of the feature map's sides for a hybrid).
        channels: image channels. num_classes: head outputs (0 for no head).
        class_token: whether a class token is prepended (token pooling).
        resnet_stages: None for a ViT; a hybrid's units per ResNet stage ((3, 4, 9) for
            R50+B/16, () for the root only).
        resnet_width: a hybrid's root width (64 in the release and the named hybrids).

    Returns:
        The MAC count (int); FLOPs are twice this.

    Raises:
        ValueError: a side not a multiple of the patch (`token_grid`).
    """
    arch = {"patch_size": patch_size, "resnet_stages": resnet_stages}
    rows, columns = token_grid(arch, image_size, channels, resnet_width)
    patches = rows * columns
    tokens = patches + int(class_token)
    d = hidden_dim
    stem = 0
    if resnet_stages is not None:
        convs, (_, _, channels) = stem_convolutions(
            resnet_stages, image_size, channels, resnet_width
        )
        stem = sum(_conv_macs(conv) for conv in convs)
    embed = patches * patch_size * patch_size * channels * d
    return stem + embed + num_layers * _block_macs(tokens, d, mlp_dim) + d * num_classes


def _block_macs(tokens, d, mlp_dim, queries=None):
    """MACs of one encoder block over `tokens` tokens that computes `queries` of them (all by
    default): keys and values of every token, the query, output projection, attention
    (q k^T and the weighted sum of values) and MLP of each query."""
    queries = tokens if queries is None else queries
    keys_values = 2 * tokens * d * d
    return keys_values + 2 * queries * d * d + 2 * queries * tokens * d + 2 * queries * d * mlp_dim


def model_gflops(variant, image_size, mode, num_classes=1000):
    """Analytic GFLOPs per image of `mode` ("infer" or "train") for a named variant."""
    macs = analytic_macs(**variant_arch(variant), image_size=image_size, num_classes=num_classes)
    return 2.0 * macs * (TRAINING_FLOPS_FACTOR if mode == "train" else 1.0) / 1e9


def keras_vit_step_gflops(variant, image_size, mode, num_classes=1000):
    """Analytic GFLOPs per image of the matrix products keras_vit runs in one step, which
    are fewer than `model_gflops`'s: its last block computes the class token alone (the
    keys and values of every token, the query, attention output and MLP of the class
    token), and a training step takes no gradient with respect to the image (the patch
    embedding's weight gradient only).

    Raises:
        ValueError: unknown variant name or a malformed spec (`variant_arch`), or a mode
            other than "infer" and "train".
    """
    if mode not in ("infer", "train"):
        raise ValueError(f"mode must be 'infer' or 'train'. Received: {mode!r}")
    arch = variant_arch(variant)
    full = analytic_macs(**arch, image_size=image_size, num_classes=num_classes)
    rows, columns = token_grid(arch, image_size)
    tokens, d, mlp = rows * columns + 1, arch["hidden_dim"], arch["mlp_dim"]
    macs = full - _block_macs(tokens, d, mlp) + _block_macs(tokens, d, mlp, queries=1)
    if mode == "train":
        return 2.0 * (TRAINING_FLOPS_FACTOR * macs - _first_layer_macs(arch, image_size)) / 1e9
    return 2.0 * macs / 1e9


def _first_layer_macs(arch, image_size):
    """MACs of the layer that reads the image (the patch embedding, or a hybrid's root
    conv): a training step skips its input gradient, which costs as much as its forward."""
    if arch.get("resnet_stages") is not None:
        convs, _ = stem_convolutions(arch["resnet_stages"], image_size)
        return _conv_macs(convs[0])
    rows, columns = token_grid(arch, image_size)
    return rows * columns * arch["patch_size"] ** 2 * 3 * arch["hidden_dim"]


def peak_rss_mb():
    """Peak resident memory of this process so far, MiB (Linux `ru_maxrss` is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def gemm_gflops(size, repeats=3, xla=True, dtype="float32"):
    """Median GFLOP/s of a `size x size` matrix product in TensorFlow (2 n^3 FLOPs), in
    `dtype` ("float32" or "bfloat16"), with or without XLA."""
    import tensorflow as tf

    a = tf.cast(tf.random.normal((size, size)), dtype)
    b = tf.cast(tf.random.normal((size, size)), dtype)
    matmul = tf.function(lambda x, y: tf.matmul(x, y)[:1, :1], jit_compile=xla)
    matmul(a, b).numpy()  # compile, warm up
    steps = min(20, max(1, int(2e10 // (2 * size**3))))  # ~10 GFLOP per repeat, <= 20 calls
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            matmul(a, b).numpy()
        times.append((time.perf_counter() - start) / steps)
    return 2.0 * size**3 / statistics.median(times) / 1e9


def gemm_peak(sizes=(1024, 2048, 4096), repeats=3, xla=True, dtype="float32"):
    """The best GEMM GFLOP/s over `sizes` and the figure of each size."""
    per_size = {str(n): gemm_gflops(n, repeats, xla, dtype) for n in sizes}
    return max(per_size.values()), per_size


GEMM_SETTINGS = (("float32", True), ("float32", False), ("bfloat16", True), ("bfloat16", False))


def gemm_roof(sizes=(1024, 2048, 4096), repeats=3):
    """The machine's roof: the best GEMM GFLOP/s over `sizes` in float32 and bfloat16, each
    with and without XLA. Returns (best, {"bfloat16 noxla": {size: GFLOP/s}, ...})."""
    figures = {
        f"{dtype} {'xla' if xla else 'noxla'}": gemm_peak(sizes, repeats, xla, dtype)[1]
        for dtype, xla in GEMM_SETTINGS
    }
    best = max(value for per_size in figures.values() for value in per_size.values())
    return best, figures


def build_model(variant, image_size, num_classes=1000):
    """keras_vit's model of `variant` (`variant_arch`: a table name, a hybrid such as
    "R50+B/16", or "patch,hidden,mlp,heads,layers") at `image_size` (int or (height, width)),
    no dropout: `keras_vit.ViT`, or `keras_vit.HybridViT` for a hybrid. The global dtype policy
    applies; the head is float32. ValueError for an unknown variant or a bad image size."""
    arch = variant_arch(variant)
    image_size = to_pair("image_size", image_size)
    if "resnet_stages" in arch:
        from keras_vit.model.hybrid import HybridViT

        return HybridViT(**arch, image_size=image_size, num_classes=num_classes, dropout_rate=0.0)
    from keras_vit.model.vit import ViT

    return ViT(**arch, image_size=image_size, num_classes=num_classes, dropout_rate=0.0)


def step_optimizer(framework=None):
    """AdamW at learning rate 1e-4: keras_vit's own `ViTAdamW` for "keras_vit" (its update
    is one XLA program on TensorFlow), Keras' `AdamW` for the other Keras frameworks."""
    import keras

    if framework == "keras_vit":
        from keras_vit.runtime.optimizers import ViTAdamW

        return ViTAdamW(learning_rate=1e-4)
    return keras.optimizers.AdamW(learning_rate=1e-4)


def make_step(
    model, mode, batch_size, image_size, xla=True, num_classes=1000, seed=0, framework=None
):
    """A no-argument function running one inference or training step on a fixed batch.

    Training: `step_optimizer(framework)` (AdamW, learning rate 1e-4) on sparse categorical
    cross-entropy from logits through `model.train_on_batch`; inference:
    `model.predict_on_batch`. Both run the step Keras compiles (`jit_compile=xla`) on a batch
    already on the backend's device, and block until the result is on the host.
    """
    import keras
    import numpy as np

    rng = np.random.default_rng(seed)
    shape = (batch_size, *to_pair("image_size", image_size), 3)
    images = keras.ops.convert_to_tensor(rng.uniform(-1.0, 1.0, shape).astype("float32"))
    labels = keras.ops.convert_to_tensor(rng.integers(0, num_classes, (batch_size,)), "int32")
    model.compile(
        optimizer=step_optimizer(framework),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=bool(xla),
    )
    if mode == "train":
        return lambda: model.train_on_batch(images, labels)
    if mode == "infer":
        return lambda: model.predict_on_batch(images)
    raise ValueError(f"Unknown mode {mode!r}; expected one of {MODES}.")


def time_steps(step, steps):
    """Seconds for `steps` consecutive calls of `step`."""
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return time.perf_counter() - start


def measure(variant, image_size, batch_size, mode, *, xla, steps, repeats, warmup):
    """Builds, warms up and times keras_vit's `variant` in this process; returns a result dict
    (`result_record`, framework "keras_vit")."""
    framework = "keras_vit"
    model = build_model(variant, image_size)
    step = make_step(model, mode, batch_size, image_size, xla=xla, framework=framework)
    start = time.perf_counter()
    for _ in range(warmup):
        step()
    warmup_s = time.perf_counter() - start
    rates = [steps * batch_size / time_steps(step, steps) for _ in range(repeats)]
    record = result_record(framework, mode, rates, model.count_params(), warmup_s)
    record["xla"] = bool(xla)
    return record


def result_record(framework, mode, rates, params, warmup_s):
    """One framework's figures: median and range of images/s, params, peak RSS."""
    return {
        "framework": framework,
        "mode": mode,
        "images_per_s": statistics.median(rates),
        "images_per_s_all": rates,
        "params": int(params),
        "peak_rss_mb": peak_rss_mb(),
        "warmup_s": warmup_s,
    }


def add_derived(results, variant, image_size, gemm_peak_gflops):
    """Adds model GFLOP/s, utilisation of the GEMM peak and ours/peer ratios in place."""
    for record in results:
        flops = model_gflops(variant, image_size, record["mode"]) * record["images_per_s"]
        record["model_gflops_per_s"] = flops
        record["utilisation"] = flops / gemm_peak_gflops if gemm_peak_gflops else None
    ours = {(r["mode"], r.get("xla")): r for r in results if r["framework"] == "keras_vit"}
    for record in results:
        base = ours.get((record["mode"], record.get("xla")))
        usable = base is not None and record["images_per_s"] > 0
        record["ours_over_this"] = base["images_per_s"] / record["images_per_s"] if usable else None
        best = max(
            (r["images_per_s"] for (mode, _), r in ours.items() if mode == record["mode"]),
            default=None,
        )
        record["best_ours_over_this"] = (
            best / record["images_per_s"] if best and record["images_per_s"] > 0 else None
        )
    return results


def format_results(results, header_note=""):
    """The table printed by the benchmark commands (Markdown)."""
    header = [
        "mode",
        "framework",
        "img/s (median)",
        "range",
        "peak RSS MiB",
        "model GFLOP/s",
        "util. of GEMM roof",
        "ours/this (same XLA)",
        "best ours/this",
    ]
    rows = []
    for r in results:
        rates = r["images_per_s_all"]
        ratio = r.get("ours_over_this")
        best = r.get("best_ours_over_this")
        util = r.get("utilisation")
        xla = r.get("xla")
        rows.append(
            [
                r["mode"],
                r["framework"] + ("" if xla is None else " (XLA)" if xla else " (no XLA)"),
                f"{r['images_per_s']:.2f}",
                f"{min(rates):.2f}-{max(rates):.2f}",
                f"{r['peak_rss_mb']:.0f}",
                f"{r.get('model_gflops_per_s', 0):.1f}",
                "-" if util is None else f"{100 * util:.0f}%",
                "-" if ratio is None else f"{ratio:.2f}x",
                "-" if best is None else f"{best:.2f}x",
            ]
        )
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    table = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    table += [line(r) for r in rows]
    return (header_note + "\n" if header_note else "") + "\n".join(table)
