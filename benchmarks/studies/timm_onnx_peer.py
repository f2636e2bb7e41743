"""Study helper: timm's ViT-B/16 written by timm's own ONNX export, the serving study's peer.

Runs in an environment with torch, timm and onnx (not keras_vit's): `timm.create_model(
"vit_base_patch16_224")` (random weights; serving speed does not depend on them) written by
`timm.utils.onnx.onnx_export` (its TorchScript exporter, dynamic batch, the ONNX checker on).

    TORCH_ENV/bin/python -m benchmarks.studies.timm_onnx_peer timm_b16.onnx

`--skip-torchvision-meta-registrations` is for a torch environment whose torchvision wheel
was built for another torch (its import fails registering its C++ operators): the module that
registers them is kept out, the rest of torchvision imports, and the ViT uses none of them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types

MODEL = "vit_base_patch16_224"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", help="the .onnx file to write")
    parser.add_argument("--model", default=MODEL, help=f"a timm model name ({MODEL})")
    parser.add_argument("--opset", type=int, default=17, help="(17)")
    parser.add_argument("--skip-torchvision-meta-registrations", action="store_true")
    args = parser.parse_args(argv)
    if args.skip_torchvision_meta_registrations:
        name = "torchvision._meta_registrations"
        sys.modules[name] = types.ModuleType(name)
    import timm
    import torch
    from timm.utils.onnx import onnx_export

    model = timm.create_model(args.model, pretrained=False).eval()
    size = model.pretrained_cfg["input_size"]
    start = time.perf_counter()
    onnx_export(model, args.output, batch_size=1, input_size=size, opset=args.opset,
                check=True)  # fmt: skip
    record = {"model": args.model, "timm": timm.__version__, "torch": torch.__version__,
              "input_size": list(size), "opset": args.opset,
              "export_s": round(time.perf_counter() - start, 1)}  # fmt: skip
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
