"""Study: does post-training quantization change the answers? float32 against int8/int4/float8.

A trained run's kept model (`best.keras`) evaluated on the run's test split in float32 and
after `keras.Model.quantize(mode)` of a copy: accuracy of each and top-1 agreement with
float32. `openvino_int8` is what `keras-vit export --format openvino --quantize int8` writes
(NNCF's int8 weight compression of the float artifact), run on OpenVINO's CPU plugin over the
same test images as pixels in [0, 255]. The default model is the one `keras-vit train` keeps:

    keras-vit train --run-dir /tmp/default_run --log-every epoch
    python -m benchmarks.studies.quantize_agreement /tmp/default_run --json quantize.json \
        --results benchmarks/results/quantize_agreement.json
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
import warnings

from benchmarks.harness.common import markdown
from benchmarks.studies import report

logger = logging.getLogger(__name__)

ABOUT = (
    "Post-training quantization of the default `keras-vit train` model (the hybrid recipe, 30 "
    "epochs, --select last): accuracy of float32, of each keras.Model.quantize mode and of "
    "the OpenVINO int8 export (NNCF's int8 weights, OpenVINO's CPU plugin) on the MNIST test "
    "images, and top-1 agreement with float32"
)
MODES = ("int8", "int4", "float8", "openvino_int8")
KERAS_MODES = ("int8", "int4", "float8")
"""The modes of `keras.Model.quantize`; the others are an export format's own scheme."""


def parse_args(argv=None):
    parser = report.parser(__doc__, "quantize_agreement.json")
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


def openvino_int8_logits(path, images):
    """Logits of the run's kept model exported as `keras-vit export --format openvino
    --quantize int8` writes it, on OpenVINO's CPU plugin, for `images` in the model's input
    scale (given to the artifact as the pixels in [0, 255] they were scaled from)."""
    import numpy as np

    from keras_vit import export_formats
    from keras_vit.checkpoints.keras_files.model_io import model_input_preprocessing
    from keras_vit.train.run_plan import load_model

    model = load_model(path)
    scale, offset = export_formats.input_affine(model_input_preprocessing(model), images.shape[-1])
    pixels = ((images - np.float32(offset)) / np.float32(scale)).astype(np.float32)
    with tempfile.TemporaryDirectory() as folder:
        made = export_formats.export_model(model, folder, "openvino", quantize="int8")
        logger.info("exported %s", made)
        return np.concatenate([export_formats.run_openvino(made.path, pixels[start:start + 256])
                               for start in range(0, len(pixels), 256)])  # fmt: skip


def mode_logits(path, mode, images):
    """The test images' logits of the kept model in quantize `mode`."""
    if mode not in KERAS_MODES:
        return openvino_int8_logits(path, images)
    return quantized_copy(path, mode).predict(images, batch_size=256, verbose=0)


def figure_values(figures: dict, images: int) -> dict:
    """The documents' figures: `MODE_accuracy`, `MODE_top1_agreement`,
    `MODE_max_abs_logit_difference` and the number of test `images`."""
    forms = {"accuracy": "{:.2%}", "top1_agreement": "{:.2%}", "max_abs_logit_difference": "{:.3f}"}
    values = {"images": images}
    for mode, row in figures.items():
        for key, form in forms.items():
            if key in row:
                values[f"{mode}_{key}"] = report.fig(round(row[key], 4), form)
    return values


def training_notes(run_dir) -> str:
    """How the run's model was trained (from its config.json and metrics.json)."""
    with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as handle:
        resolved = json.load(handle)["resolved"]
    with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as handle:
        metrics = json.load(handle)
    xla = " + XLA" if resolved.get("jit_compile") else ""
    return (f"training: {resolved['mixed_precision']}{xla}, {resolved['epochs']} epochs, fit "
            f"{metrics['fit_wall_time_s']:.1f} s wall under load, test accuracy "
            f"{metrics['test']['accuracy']:.2%}")  # fmt: skip


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
        logits = mode_logits(path, mode, images)
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
    notes = f"{training_notes(args.run_dir)}; quantized and evaluated in one run of this study"
    report.write_figures(args.results, figure_values(figures, len(labels)), __file__, ABOUT,
                         argv, notes)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
