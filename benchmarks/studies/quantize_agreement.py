"""Study: does post-training quantization change the answers? float32 against int8/int4/float8.

A trained run's kept model (`best.keras`) evaluated on the run's test split in float32 and
after `keras.Model.quantize(mode)` of a copy: accuracy of each and top-1 agreement with
float32. The default model is the one `keras-vit train` keeps:

    keras-vit train --run-dir /tmp/default_run --log-every epoch
    python -m benchmarks.studies.quantize_agreement /tmp/default_run --json quantize.json
"""

from __future__ import annotations

import os
import time
import warnings

from benchmarks.harness.common import markdown
from benchmarks.studies import report

MODES = ("int8", "int4", "float8")


def parse_args(argv=None):
    parser = report.parser(__doc__)
    parser.add_argument("run_dir", help="a run directory of keras-vit train or finetune")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    return parser.parse_args(argv)


def test_images(run_dir):
    """(images, labels) of the run's test split, as its evaluation reads them."""
    import numpy as np

    from keras_vit import data
    from keras_vit.train.run_directory import read_config

    config = read_config(run_dir)
    resolved = config["resolved"]
    split = data.load(
        config["run"]["recipe"]["dataset"], resolved.get("test_split") or "test",
        image_size=tuple(resolved["image_size"]), batch_size=256, training=False,
        channels=resolved.get("channels", 1), shots_per_class=config["run"]["shots_per_class"],
    )  # fmt: skip
    parts = list(split.as_numpy_iterator())
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def quantized_copy(path, mode):
    """The run's kept model loaded again and quantized in `mode`."""
    from keras_vit.train.run_plan import load_model

    model = load_model(path)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Layer .* does not have a `quantize` method")
        model.quantize(mode)
    return model


def main(argv=None):
    import numpy as np

    from keras_vit.train.run_plan import load_model

    args = parse_args(argv)
    path = os.path.join(args.run_dir, "best.keras")
    images, labels = test_images(args.run_dir)
    reference = load_model(path).predict(images, batch_size=256, verbose=0)
    top = reference.argmax(-1)
    rows, figures = [], {"float32": {"accuracy": float((top == labels).mean())}}
    rows.append(["float32", f"{figures['float32']['accuracy']:.2%}", "-", "-"])
    for mode in args.modes:
        start = time.perf_counter()
        logits = quantized_copy(path, mode).predict(images, batch_size=256, verbose=0)
        figures[mode] = {
            "accuracy": float((logits.argmax(-1) == labels).mean()),
            "top1_agreement": float((logits.argmax(-1) == top).mean()),
            "max_abs_logit_difference": float(np.abs(logits - reference).max()),
            "predict_s": time.perf_counter() - start,
        }
        row = figures[mode]
        rows.append([mode, f"{row['accuracy']:.2%}", f"{row['top1_agreement']:.2%}",
                     f"{row['max_abs_logit_difference']:.3f}"])  # fmt: skip
    print(f"{path}: {len(labels)} test images (max |logit| {np.abs(reference).max():.2f})")
    print(markdown(["model", "accuracy", "top-1 agreement with float32", "max |Δ logit|"], rows))
    report.save_json(args.json, {"run_dir": args.run_dir, "images": len(labels), **figures})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
