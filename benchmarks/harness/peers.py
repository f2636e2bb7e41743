"""The peers of the harness as one table (`PEERS`: one row a peer, see `Peer`), and their
models: keras-hub's and vit-keras' (`keras_model`), timm's (`build_model`).

keras-hub's peer is `keras_hub.models.ViTBackbone` + the class token + a dense head; vit-keras'
is `vit_keras.vit.build_model` (linear head); both with keras_vit's architecture, no dropout.
timm's peer is the architecture keras_vit builds (`VisionTransformer`, class-token pooling,
no dropout, random weights), eager float32, under bfloat16 autocast (weights float32, as
Keras' mixed policy) or `torch.compile`d; its step is AdamW (1e-4) on cross-entropy, NCHW, on
the GPU where torch sees one (as every peer's data: on the device before the timing).
"""

from __future__ import annotations

import collections
import importlib
import sys

from benchmarks.harness import common
from keras_vit._validation import to_pair

KERAS_FRAMEWORKS = ("keras_vit", "keras_hub", "vit_keras")  # the models `keras_model` builds

TIMM_SETTINGS = ("float32", "bfloat16_autocast", "float32+compile")  # `run`'s default
SETTING_PARTS = {  # timm's setting labels: (policy, compiler)
    "float32": ("float32", "eager"),
    "bfloat16_autocast": ("mixed_bfloat16", "eager"),
    "float32+compile": ("float32", "compile"),
    "bfloat16_autocast+compile": ("mixed_bfloat16", "compile"),
}


def parse_timm_setting(text: str) -> tuple[str, str]:
    """ "bfloat16_autocast" -> ("mixed_bfloat16", "eager"); raises ValueError otherwise."""
    try:
        return SETTING_PARTS[text.strip()]
    except KeyError:
        raise ValueError(f"{text!r} is not one of {sorted(SETTING_PARTS)}") from None


def timm_label(policy: str, compiler: str) -> str:
    """The setting label of (policy, compiler), the inverse of `parse_timm_setting`."""
    return {parts: text for text, parts in SETTING_PARTS.items()}[(policy, compiler)]


def import_problem(*modules):
    """None when every one of `modules` imports here, else why not: the error's type and the
    last line of its message (one line), e.g. vit-keras' "No module named 'cv2'" (it imports
    OpenCV without declaring it; `opencv-python-headless` provides it)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as error:  # a broken optional install is "not available" too
            lines = str(error).strip().splitlines() or [""]
            return f"{type(error).__name__}: {lines[-1]}"
    return None


def keras_hub_model(arch: dict, image_size, num_classes: int = 1000):
    """keras-hub's `ViTBackbone` of `arch` + the class token + a float32 dense head."""
    import keras
    import keras_hub

    backbone = keras_hub.models.ViTBackbone(
        image_shape=(*image_size, 3), patch_size=arch["patch_size"],
        num_layers=arch["num_layers"], num_heads=arch["num_heads"],
        hidden_dim=arch["hidden_dim"], mlp_dim=arch["mlp_dim"], dropout_rate=0.0,
        attention_dropout=0.0, layer_norm_epsilon=1e-6,
    )  # fmt: skip
    images = keras.Input((*image_size, 3), name="images")
    logits = keras.layers.Dense(num_classes, dtype="float32", name="head")(backbone(images)[:, 0])
    return keras.Model(images, logits, name="keras_hub_vit")


def vit_keras_model(arch: dict, image_size, num_classes: int = 1000):
    """vit-keras' `build_model` of `arch` (linear head)."""
    from vit_keras import vit

    return vit.build_model(
        image_size=image_size, patch_size=arch["patch_size"], num_layers=arch["num_layers"],
        hidden_size=arch["hidden_dim"], num_heads=arch["num_heads"], name="vit_keras_vit",
        mlp_dim=arch["mlp_dim"], classes=num_classes, dropout=0.0, activation="linear",
        include_top=True, representation_size=None,
    )  # fmt: skip


def keras_model(framework: str, variant: str, image_size, num_classes: int = 1000):
    """The same ViT (`variant`, `image_size`: int or (height, width)) built with `framework`
    of `KERAS_FRAMEWORKS`: keras_vit's (`common.build_model`, also hybrids) or a Keras peer's
    (`keras_hub_model`, `vit_keras_model`; neither has a hybrid: ValueError). The global dtype
    policy applies; the head is float32 in every case."""
    if framework == "keras_vit":
        return common.build_model(variant, image_size, num_classes)
    if framework not in KERAS_FRAMEWORKS:
        raise ValueError(f"Unknown framework {framework!r}; expected one of {KERAS_FRAMEWORKS}.")
    arch = common.variant_arch(variant)
    if "resnet_stages" in arch:
        raise ValueError(f"{framework} has no hybrid (ResNet + ViT) model like {variant!r}.")
    build = keras_hub_model if framework == "keras_hub" else vit_keras_model
    return build(arch, to_pair("image_size", image_size), num_classes)


def build_model(arch: dict, image_size: int, num_classes: int = 1000):
    """timm's ViT with `arch` (keras_vit.evaluate.benchmarking.variant_arch's fields)."""
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(
        img_size=image_size, patch_size=arch["patch_size"], embed_dim=arch["hidden_dim"],
        depth=arch["num_layers"], num_heads=arch["num_heads"],
        mlp_ratio=arch["mlp_dim"] / arch["hidden_dim"], num_classes=num_classes,
        drop_rate=0.0, attn_drop_rate=0.0, drop_path_rate=0.0, global_pool="token",
    )  # fmt: skip


def make_step(model, mode, batch_size, image_size, policy, compiler, num_classes=1000, seed=0):
    """A no-argument function running one step of `model` (see the module docstring)."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand((batch_size, 3, image_size, image_size), generator=generator) * 2 - 1
    labels = torch.randint(0, num_classes, (batch_size,), generator=generator)
    model, images, labels = (item.to(device) for item in (model, images, labels))
    run = torch.compile(model) if compiler == "compile" else model

    def autocast():  # disabled: float32
        return torch.autocast(device, dtype=torch.bfloat16, enabled=policy == "mixed_bfloat16")

    if mode == "infer":
        model.eval()

        def infer():
            with torch.inference_mode(), autocast():
                return run(images).float().sum().item()

        return infer
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()

    def train():
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            loss = loss_fn(run(images).float(), labels)
        loss.backward()
        optimizer.step()
        return loss.item()

    return train


def gemm_gflops(size: int, dtype: str, repeats: int = 1) -> float:
    """Median GFLOP/s of a `size x size` `torch.matmul` in `dtype` ("float32"/"bfloat16"), on
    the GPU where torch sees one."""
    import torch

    cuda = torch.cuda.is_available()
    a, b = (torch.randn(size, size, device="cuda" if cuda else "cpu").to(getattr(torch, dtype))
            for _ in range(2))  # fmt: skip
    call = lambda: (torch.matmul(a, b), cuda and torch.cuda.synchronize())  # noqa: E731
    call()
    cap, flops = (50, 5e12) if cuda else (20, 2e10)  # steps, FLOPs of a timed repeat
    steps = min(cap, max(1, int(flops // (2 * size**3))))
    times = [common.time_call(call, steps) / steps for _ in range(repeats)]
    return 2.0 * size**3 / common.median(times) / 1e9


def gemm_roof(sizes, repeats: int = 1):
    """(best GFLOP/s, {"torch float32": {size: GFLOP/s}, "torch bfloat16": {...}})."""
    figures = {f"torch {dtype}": {str(n): gemm_gflops(n, dtype, repeats) for n in sizes}
               for dtype in ("float32", "bfloat16")}  # fmt: skip
    return max(value for per_size in figures.values() for value in per_size.values()), figures


def set_threads(threads: int) -> None:
    """torch's intra-op threads (0 keeps torch's default)."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def keras_step(args, framework, mode, policy, compiler):
    """(parameters, step) of a Keras model (`keras_model`) under `policy`, XLA or
    not, on the Keras backend its row names (keras_vit_torch: PyTorch, eager; keras_vit_jax)."""
    import keras

    backend = PEERS[framework].env.get("KERAS_BACKEND", keras.backend.backend())
    if backend != keras.backend.backend():
        raise RuntimeError(f"{framework} needs KERAS_BACKEND={backend}")
    built = "keras_vit" if framework.startswith("keras_vit") else framework
    keras.config.set_dtype_policy(policy)
    model, xla = keras_model(built, args.variant, args.image_size), compiler == "xla"
    step = common.make_step(model, mode, args.batch_size, args.image_size, xla=xla, framework=built)
    return int(model.count_params()), step


def timm_step(args, framework, mode, policy, compiler):
    """(parameters, step) of timm's ViT (`build_model`, seed 0) at one of `TIMM_SETTINGS`."""
    import torch

    torch.manual_seed(0)
    model = build_model(common.variant_arch(args.variant), args.image_size)
    step = make_step(model, mode, args.batch_size, args.image_size, policy, compiler)
    return sum(p.numel() for p in model.parameters()), step


def serve_gemm(args, framework):
    """The GEMM roof of TensorFlow (`gemm`) or torch (`gemm_torch`) at `--gemm-sizes`."""
    roof = gemm_roof if framework == "gemm_torch" else common.gemm_roof
    roof(args.sizes[:1], repeats=1)  # import and warm up before READY

    def handle():
        best, figures = roof(args.sizes, repeats=1)
        return {"gemm_gflops": best, "per_setting": figures}

    common.serve(handle, {"framework": framework})


# modules that must import; workers' interpreter ("main": --python, "torch": --torch-python);
# their environment; settings ("keras": --settings, "eager": their policies without XLA,
# "timm": --timm-settings, None: a GEMM roof); the function giving (parameters, step)
Peer = collections.namedtuple("Peer", "modules python env settings build")
PEERS = {
    "keras_vit": Peer(("keras_vit",), "main", {}, "keras", keras_step),
    "keras_hub": Peer(("keras_hub",), "main", {}, "keras", keras_step),
    "vit_keras": Peer(("vit_keras.vit",), "main", {}, "keras", keras_step),
    "timm": Peer(("torch", "timm"), "torch", {}, "timm", timm_step),
    "keras_vit_torch": Peer(("torch",), "torch", {"KERAS_BACKEND": "torch"}, "eager", keras_step),
    "keras_vit_jax": Peer(("jax",), "main", {"KERAS_BACKEND": "jax"}, "keras", keras_step),
    "gemm": Peer(("tensorflow",), "main", {}, None, None),
    "gemm_torch": Peer(("torch",), "torch", {}, None, None),
}
ROOFS = {"gemm": "TensorFlow", "gemm_torch": "torch"}
KERAS_PEERS = ("keras_hub", "vit_keras")


def serve(args) -> int:
    """The worker process of `args.worker` ("PEER:MODE:POLICY:COMPILER", or a roof name): builds
    the point, warms it up `--warmup` steps, then serves the parent's timing rounds of it."""
    framework, *point = args.worker.split(":")
    try:
        peer = PEERS[framework]
        reason = import_problem(*peer.modules)
        if reason is not None:
            raise ImportError(f"{framework} does not import for {sys.executable}: {reason}")
        if peer.settings is None:
            serve_gemm(args, framework)
            return 0
        params, step = peer.build(args, framework, *point)
        warmup_s, rate = common.time_call(step, args.warmup), args.steps * args.batch_size
        ready = {"framework": framework, "params": params, "warmup_s": warmup_s}
        common.serve(lambda: {"images_per_s": rate / common.time_call(step, args.steps)}, ready)
        return 0
    except Exception as error:  # reported to the parent, which carries on without it
        common.report_error(error)
        return 1


def points(framework, mode, keras_settings, timm_settings) -> list[str]:
    """The worker names of one peer's settings: "keras" `keras_settings` [(policy, xla)],
    "eager" their policies without XLA, "timm" `timm_settings` [(policy, compiler)]."""
    kind = PEERS[framework].settings
    if kind == "timm":
        return [f"{framework}:{mode}:{policy}:{compiler}" for policy, compiler in timm_settings]
    if kind == "eager":  # Keras' torch.compile takes minutes here
        keras_settings = [(policy, False) for policy in dict.fromkeys(p for p, _ in keras_settings)]
    return [f"{framework}:{mode}:{p}:{'xla' if x else 'noxla'}" for p, x in keras_settings]


def label(worker: str) -> str:
    """The setting label of a worker name, as `--settings`/`--timm-settings` spell it."""
    framework, _, policy, compiler = worker.split(":")
    if PEERS[framework].settings == "timm":
        return timm_label(policy, compiler)
    return common.setting_label(policy, compiler == "xla")
