"""Study: per-device parameter and optimizer memory of keras_vit's `ModelParallel` on JAX.

For B/16 and L/16 on 1, 2 and 4 host devices (XLA_FLAGS=--xla_force_host_platform_device_count
=4, CPU): meshes batch x model of 1x1, 1x2, 1x4 and the FSDP mesh 2x2, with
`keras_vit.runtime.model_parallel.vit_model_parallel`. Nothing is allocated: the model and
AdamW are built under `keras.StatelessScope` (variables without values), their shardings
come from the layout map, and XLA compiles from abstract arrays (`jax.ShapeDtypeStruct`).
XLA's memory analysis (`jit(...).lower(...).compile().memory_analysis()`, bytes per device)
of the parameters alone and AdamW's state alone; and for B/16 (`--step-variants`) the whole
jitted training step (forward, cross-entropy, gradients, AdamW; parameters and state donated)
at `--batch-per-replica` images per replica of the `batch` axis (the global batch is that
times the batch axis), under float32 and mixed_bfloat16: XLA's argument, output, aliased
(donated) and temporary bytes per device. Each step compiles in its own process, killed after
`--step-timeout` seconds of compiling (and a start allowance): such a point is recorded as not
measured, with the reason. Also the per-device shapes and bytes of the sharded kernels for
H/14 and a ViT-22B-sized config (hidden 6144, MLP 24576, 48 heads, 48 layers, patch 14), from
`NamedSharding.shard_shape` on an abstract mesh.

    python -m benchmarks.bench model-parallel [--out benchmarks/results/model_parallel_memory.json]

`--merge --step-variants L/16` measures only L/16's steps and merges them into `--out`'s
figures (each merged point stamped with its date, compile limit and load; the others kept).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time

from benchmarks.studies import report

RESULTS = "model_parallel_memory.json"
MESHES = ((1, 1), (1, 2), (1, 4), (2, 2))  # (batch, model)
MEMORY_VARIANTS = ("B/16", "L/16")
STEP_VARIANTS = ("B/16",)
STEP_PRECISIONS = ("float32", "mixed_bfloat16")
START_ALLOWANCE_S = 120  # a step child's imports and abstract model before it compiles
STEP_FIELDS = ("arguments", "outputs", "aliased", "temp", "total")
VIT_22B = dict(patch_size=14, hidden_dim=6144, mlp_dim=24576, num_heads=48, num_layers=48)
SHAPE_CONFIGS = {"H/14": ((1, 4), (1, 16)), "22B": ((1, 8), (4, 8), (16, 16))}
KERNELS = {  # a row per sharded kernel: its path in block 0 (or the embedding)
    "patch embedding": "embedding/conv/kernel",
    "query/key/value": "encoderblock_0/MultiHeadDotProductAttention_1/query/kernel",
    "attention out": "encoderblock_0/MultiHeadDotProductAttention_1/out/kernel",
    "MLP in": "encoderblock_0/MlpBlock_3/Dense_0/kernel",
    "MLP out": "encoderblock_0/MlpBlock_3/Dense_1/kernel",
}
MIB = 2**20


def named_kwargs(name) -> dict:
    """`keras_vit.ViT` arguments of a table name, without dropout (a step with no RNG state)."""
    from keras_vit.spec import configs

    return {**configs.get_config(name).as_kwargs(), "dropout_rate": 0.0}


@contextlib.contextmanager
def lazy_model(kwargs, image_size, precision="float32"):
    """The ViT of `kwargs` and its AdamW, built without allocating a value: variables made
    under `keras.StatelessScope` have none, and with `initialize_variables=False` they get
    none when it ends either; everything that reads them (lowering included) runs inside.
    `precision`: the Keras dtype policy the model is built under (float32 variables either
    way)."""
    import keras

    import keras_vit

    optimizer = keras.optimizers.AdamW(1e-4)  # its step counter and rate: two scalars
    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        with keras.StatelessScope(initialize_variables=False):
            model = keras_vit.ViT(image_size=image_size, num_classes=1000, **kwargs)
            optimizer.build(model.trainable_variables)
            yield model, optimizer
    finally:
        keras.config.set_dtype_policy(policy)


def shardings(model, optimizer, layout_of):
    """(parameter layouts, optimizer-state layouts): `layout_of(path)` of each variable; a
    slot takes its variable's layout (Keras' `add_variable_from_reference`)."""
    by_slot_name = {v.path.replace("/", "_"): layout_of(v.path) for v in model.trainable_variables}
    slot_layouts = []
    for variable in optimizer.variables:
        name = variable.path.split("/", 1)[-1]
        for suffix in ("_momentum", "_velocity"):
            name = name.removesuffix(suffix)
        slot_layouts.append(by_slot_name.get(name, layout_of(None)))
    return [layout_of(v.path) for v in model.trainable_variables], slot_layouts


def memory_point(variant, mesh_shape, image_size, batch_per_replica=0, precision="float32"):
    """XLA's per-device bytes of one B/16- or L/16-sized point (KERAS_BACKEND=jax, 4 devices);
    with `batch_per_replica` also of the training step at that many images per replica of
    the batch axis."""
    import keras

    from keras_vit.runtime import model_parallel

    batch, model_axis = mesh_shape
    devices = keras.distribution.list_devices()[: batch * model_axis]
    distribution = model_parallel.vit_model_parallel(
        variant, devices=devices, model_axis=model_axis
    )
    kwargs = named_kwargs(variant)
    with lazy_model(kwargs, image_size, precision) as (model, optimizer):
        point = point_analysis(
            model, optimizer, distribution, image_size, batch_per_replica * batch
        )
    return {"model": variant, **point}


def point_analysis(model, optimizer, distribution, image_size, batch_size) -> dict:
    """`memory_point`'s compilations, inside the stateless scope of `lazy_model`; the step's
    at a global `batch_size` (0: no step)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from keras_vit.runtime import model_parallel

    batch, model_axis = distribution.device_mesh.shape
    mesh = distribution.device_mesh.backend_mesh
    layout_map = model_parallel.vit_layout_map(distribution.device_mesh)

    def layout_of(path):
        layout = layout_map[path] if path else None
        return NamedSharding(mesh, P(*layout.axes) if layout is not None else P())

    parameter_layouts, slot_layouts = shardings(model, optimizer, layout_of)
    trainable = model.trainable_variables
    assert not model.non_trainable_variables, "a ViT without dropout has no frozen state"

    def abstract(variables, layouts):
        return [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype, sharding=s)
                for v, s in zip(variables, layouts, strict=True)]  # fmt: skip

    parameters = abstract(trainable, parameter_layouts)
    state = abstract(optimizer.variables, slot_layouts)

    def analysis(function, *arguments, **jit):
        return jax.jit(function, **jit).lower(*arguments).compile().memory_analysis()

    count = sum(math.prod(v.shape) for v in trainable)
    out = {
        "batch_axis": batch, "model_axis": model_axis,
        "devices": batch * model_axis, "parameters": count,
        "parameters_mib": round(analysis(lambda p: p, parameters).argument_size_in_bytes / MIB, 1),
        "optimizer_mib": round(analysis(lambda s: s, state).argument_size_in_bytes / MIB, 1),
        "replicated_parameters_mib": round(4 * count / MIB, 1),
    }  # fmt: skip
    if batch_size:
        images = jax.ShapeDtypeStruct((batch_size, image_size, image_size, 3), "float32",
                                      sharding=NamedSharding(mesh, P("batch")))  # fmt: skip
        labels = jax.ShapeDtypeStruct((batch_size,), "int32",
                                      sharding=NamedSharding(mesh, P("batch")))  # fmt: skip
        start = time.perf_counter()
        stepped = analysis(training_step(model, optimizer), parameters, state, images, labels,
                           donate_argnums=(0, 1))  # fmt: skip
        out["global_batch"] = batch_size
        out["step_compile_s"] = round(time.perf_counter() - start, 1)
        out.update(step_bytes(stepped))
    return out


def step_bytes(analysis) -> dict:
    """XLA's per-device MiB of a compiled step (`CompiledMemoryStats`): its arguments, its
    outputs, the outputs that reuse a donated argument's buffer (aliased), the temporaries,
    and the total held at once at most, arguments + outputs - aliased + temporaries."""
    sizes = {
        "arguments": analysis.argument_size_in_bytes,
        "outputs": analysis.output_size_in_bytes,
        "aliased": analysis.alias_size_in_bytes,
        "temp": analysis.temp_size_in_bytes,
    }
    sizes["total"] = sizes["arguments"] + sizes["outputs"] - sizes["aliased"] + sizes["temp"]
    return {f"step_{key}_mib": round(value / MIB, 1) for key, value in sizes.items()}


def training_step(model, optimizer):
    """One stateless step: forward, cross-entropy, gradients, AdamW (as Keras' JAX trainer)."""
    import jax
    import keras

    def loss_fn(parameters, images, labels):
        logits, _ = model.stateless_call(parameters, [], images, training=True)
        losses = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        return keras.ops.mean(losses)

    def step(parameters, state, images, labels):
        loss, grads = jax.value_and_grad(loss_fn)(parameters, images, labels)
        parameters, state = optimizer.stateless_apply(state, grads, parameters)
        return loss, parameters, state

    return step


def kernel_shapes(name, mesh_shapes, image_size=224) -> dict:
    """Per-device shape and MiB of each sharded kernel, and the per-device parameter and
    AdamW MiB of the whole model, on abstract meshes: nothing allocated."""
    from keras_vit.runtime import model_parallel

    kwargs = VIT_22B if name == "22B" else named_kwargs(name)
    with lazy_model(kwargs, image_size) as (model, _):
        shapes = {v.path: tuple(v.shape) for v in model.variables}
    fields = ("patch_size", "hidden_dim", "mlp_dim", "num_heads", "num_layers")
    out = {"config": {key: kwargs[key] for key in fields}, "meshes": {}}
    out["parameters"] = sum(math.prod(shape) for shape in shapes.values())
    for batch, model_axis in mesh_shapes:
        model_parallel.check_mesh(model_parallel.architecture_sizes(kwargs), batch, model_axis)
        per_device = per_device_shapes(shapes, batch, model_axis)
        kernels = {
            label: {
                "shape": list(shapes[path]),
                "per_device": list(per_device[path]),
                "per_device_mib": round(4 * math.prod(per_device[path]) / MIB, 2),
            }
            for label, path in KERNELS.items()
        }
        total = sum(4 * math.prod(shape) for shape in per_device.values())
        out["meshes"][f"{batch}x{model_axis}"] = {
            "kernels": kernels,
            "parameters_per_device_gib": round(total / 2**30, 2),
            "with_adamw_per_device_gib": round(3 * total / 2**30, 2),
        }
    return out


def per_device_shapes(shapes, batch, model_axis) -> dict:
    """{path: the shape on each device} of variables of global `shapes` under keras_vit's
    layout map on a batch x model mesh (`NamedSharding.shard_shape` of an abstract mesh)."""
    import keras
    from jax.sharding import AbstractMesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from keras_vit.runtime import model_parallel

    devices = [f"cpu:{i}" for i in range(batch * model_axis)]  # names only: never used
    mesh = keras.distribution.DeviceMesh((batch, model_axis), ("batch", "model"), devices)
    layout_map = model_parallel.vit_layout_map(mesh)
    abstract = AbstractMesh((batch, model_axis), ("batch", "model"))
    out = {}
    for path, shape in shapes.items():
        layout = layout_map[path]
        spec = P(*layout.axes) if layout is not None else P()
        out[path] = NamedSharding(abstract, spec).shard_shape(shape)
    return out


def child(args) -> dict:
    points = [
        memory_point(variant, mesh, args.image_size) for variant in args.variants for mesh in MESHES
    ]
    for point in points:
        print(json.dumps(point), file=sys.stderr, flush=True)
    shapes = {name: kernel_shapes(name, meshes) for name, meshes in SHAPE_CONFIGS.items()}
    return {"points": points, "shapes": shapes}


def step_child(args) -> dict:
    """One training step's memory (`--step-child VARIANT BxM PRECISION`)."""
    variant, mesh, precision = args.step_child
    batch, model_axis = (int(size) for size in mesh.split("x"))
    point = memory_point(
        variant, (batch, model_axis), args.image_size, args.batch_per_replica, precision
    )
    return {**point, "precision": precision}


def step_points(args, env) -> list[dict]:
    """Every step point (`--step-variants` x MESHES x `--step-precisions`), each compiled in
    its own child; a child killed at `--step-timeout` (+ START_ALLOWANCE_S) or failing gives
    a point with "not_measured" (the reason) instead of bytes."""
    command = report.common.module_argv(sys.executable, "benchmarks.studies.model_parallel_memory")
    points = []
    for variant in args.step_variants:
        for precision in args.step_precisions:
            for batch, model_axis in MESHES:
                mesh = f"{batch}x{model_axis}"
                forwarded = ["--image-size", str(args.image_size)]
                forwarded += ["--batch-per-replica", str(args.batch_per_replica)]
                argv = [*command, *forwarded, "--step-child", variant, mesh, precision]
                point = {"model": variant, "batch_axis": batch, "model_axis": model_axis,
                         "devices": batch * model_axis, "precision": precision,
                         "global_batch": args.batch_per_replica * batch}  # fmt: skip
                try:
                    point.update(report.common.child_result(
                        argv, env=env, timeout=args.step_timeout + START_ALLOWANCE_S
                    ))  # fmt: skip
                except RuntimeError as error:
                    point["not_measured"] = (
                        f"the step's compile did not finish ({error}; limit "
                        f"{args.step_timeout} s of compiling after a {START_ALLOWANCE_S} s start)"
                    )
                print(json.dumps(point), file=sys.stderr, flush=True)
                points.append(point)
    return points


def step_key(point) -> tuple:
    """(model, batch axis, model axis, precision) of a step point."""
    return point["model"], point["batch_axis"], point["model_axis"], point["precision"]


def merged_steps(kept, measured) -> list[dict]:
    """`kept`'s step points without those `measured` again, then `measured`'s, ordered by
    model (MEMORY_VARIANTS' order), precision (STEP_PRECISIONS') and mesh (MESHES')."""
    by_key = {step_key(point): point for point in kept}
    by_key.update({step_key(point): point for point in measured})

    def rank(name, names):
        return (names.index(name) if name in names else len(names), name)

    def order(key):
        model, batch, model_axis, precision = key
        return rank(model, MEMORY_VARIANTS), rank(precision, STEP_PRECISIONS), (batch, model_axis)

    return [by_key[key] for key in sorted(by_key, key=order)]


def merge_record(args, env) -> tuple[dict, str]:
    """(`--out`'s record with the step points of `--step-variants` measured now in place of
    any it had, the commands that made it): `--merge`, its parameter, AdamW and shape
    figures and its other step points kept as they are."""
    if not os.path.exists(args.out):
        raise SystemExit(f"--merge needs an existing results file; {args.out} does not exist")
    with open(args.out, encoding="utf-8") as file:
        previous = json.load(file)
    for key in ("image_size", "batch_per_replica"):
        if previous.get(key) != getattr(args, key):
            raise SystemExit(
                f"--merge: {args.out} was measured at {key}={previous.get(key)}; this run "
                f"asks for {getattr(args, key)} (the figures of one file share it)"
            )
    record = {key: previous[key] for key in ("points", "shapes", "step_timeout_s")}
    measured = step_points(args, env)
    stamp = {"date": time.strftime("%Y-%m-%d"), "step_timeout_s": args.step_timeout,
             "load_average": report.common.load_average()}  # fmt: skip
    for point in measured:
        point["measured"] = stamp
    record["step_points"] = merged_steps(previous.get("step_points", []), measured)
    variants = " ".join(args.step_variants)
    command = (f"{previous['command']}; then python -m benchmarks.bench model-parallel --merge "
               f"--step-variants {variants} --step-timeout {args.step_timeout}")  # fmt: skip
    return record, command


def point_slug(point) -> str:
    """'b16_1x2' of a point."""
    slug = point["model"].replace("/", "").lower()
    return f"{slug}_{point['batch_axis']}x{point['model_axis']}"


def values_of(record) -> dict:
    """The figures the documents quote: `VARIANT_MESH_KEY` (e.g. `b16_1x2_parameters_mib`);
    a step's `VARIANT_MESH_PRECISION_step_FIELD_mib` (e.g. `b16_1x2_bf16_step_temp_mib`,
    "f32" or "bf16"; "not measured" where its compile did not finish)."""
    values = {}
    for point in record["points"]:
        slug = point_slug(point)
        for key in ("parameters_mib", "optimizer_mib"):
            if key in point:
                values[f"{slug}_{key}"] = {"value": point[key], "format": "{:.1f}"}
    for point in record.get("step_points", []):
        slug = point_slug(point) + ("_bf16" if "bfloat16" in point["precision"] else "_f32")
        for field in STEP_FIELDS:
            key, value = f"step_{field}_mib", "not measured"
            if "not_measured" not in point:
                value = f"{point[key]:.1f}"
            values[f"{slug}_{key}"] = {"value": value, "format": "{}"}
    for name, shapes in record["shapes"].items():
        slug = name.replace("/", "").lower()
        for mesh, entry in shapes["meshes"].items():
            for key in ("parameters_per_device_gib", "with_adamw_per_device_gib"):
                values[f"{slug}_{mesh}_{key}"] = {"value": entry[key], "format": "{:.2f}"}
            for label, kernel in entry["kernels"].items():
                kernel_slug = f"{slug}_{mesh}_" + "_".join(label.replace("/", " ").split())
                shape = " x ".join(map(str, kernel["per_device"]))
                values[kernel_slug] = {"value": shape, "format": "{}"}
                values[kernel_slug + "_mib"] = {"value": kernel["per_device_mib"], "format": "{}"}
        for label, kernel in next(iter(shapes["meshes"].values()))["kernels"].items():
            kernel_slug = f"{slug}_" + "_".join(label.replace("/", " ").split())
            values[kernel_slug] = {"value": " x ".join(map(str, kernel["shape"])), "format": "{}"}
    return values


def parse_args(argv=None):
    parser = report.parser(__doc__, json_help=None)
    parser.add_argument("--variants", nargs="+", default=list(MEMORY_VARIANTS),
                        help="named variants measured (B/16 L/16)")  # fmt: skip
    parser.add_argument("--image-size", type=int, default=224, help="(224)")
    parser.add_argument("--batch-per-replica", type=int, default=8,
                        help="the step's images per replica of the batch axis (8)")  # fmt: skip
    parser.add_argument("--step-variants", nargs="+", default=list(STEP_VARIANTS),
                        help="variants whose training step is compiled (B/16)")  # fmt: skip
    parser.add_argument("--step-precisions", nargs="+", default=list(STEP_PRECISIONS),
                        help="dtype policies of the step (float32 mixed_bfloat16)")  # fmt: skip
    parser.add_argument("--step-timeout", type=int, default=180,
                        help="seconds of compiling a step may take (180)")  # fmt: skip
    default = os.path.join(report.ROOT, "benchmarks", "results", RESULTS)
    parser.add_argument("--out", default=default, help=f"(benchmarks/results/{RESULTS})")
    parser.add_argument("--no-step", action="store_true",
                        help="parameters and AdamW only: no training step compiled")  # fmt: skip
    parser.add_argument("--merge", action="store_true",
                        help="measure only the steps of --step-variants and merge them into "
                        "--out's figures (its other points kept)")  # fmt: skip
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--step-child", nargs=3, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def measure_record(args, env) -> tuple[dict, str]:
    """(every figure measured now, the command): the parameter, AdamW and shape figures in
    one child, then each step point in its own."""
    command = report.common.module_argv(sys.executable, "benchmarks.studies.model_parallel_memory")
    forwarded = ["--variants", *args.variants, "--image-size", str(args.image_size)]
    record = report.child_json([*command, *forwarded, "--child"], env=env)
    if not args.no_step:
        record["step_points"] = step_points(args, env)
    return record, "python -m benchmarks.bench model-parallel" + " --no-step" * args.no_step


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child or args.step_child:
        result = step_child(args) if args.step_child else child(args)
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}  # fmt: skip
    env = report.common.child_env(env)
    if args.merge and args.no_step:
        raise SystemExit("--merge measures training steps; --no-step asks for none")
    if args.merge:
        record, command = merge_record(args, env)
    else:
        record, command = measure_record(args, env)
    stepped = sorted({point["model"] for point in record.get("step_points", [])},
                     key=lambda name: (name not in MEMORY_VARIANTS, name))  # fmt: skip
    host = report.common.host_record()
    report.write_results(
        args.out,
        values_of(record),
        command=command,
        about="keras_vit's ModelParallel on JAX: XLA's per-device bytes of the parameters, "
        f"AdamW's state and the whole training step of {' and '.join(stepped) or 'none'} "
        "(float32 and mixed_bfloat16; batch x model meshes on 1, 2 and 4 host devices), and "
        "the per-device kernel shapes of H/14 and a 22B-sized ViT (abstract meshes)",
        notes=f"host {host['cpu']}, {host['cores']} cores shared with other jobs, no GPU; "
        "4 XLA host devices",
        extra={"host": host, "image_size": args.image_size,
               "batch_per_replica": args.batch_per_replica,
               "step_timeout_s": args.step_timeout, **record},  # --merge: the file's own
    )  # fmt: skip
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
