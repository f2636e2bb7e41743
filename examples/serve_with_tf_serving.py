"""Export a ViT for TensorFlow Serving and query it the way TF Serving's REST API does.

What it shows: `keras_vit.export_saved_model` writes `<export-dir>/<version>/`, the layout
TF Serving watches, with resizing, [-1, 1] scaling and JPEG/PNG decoding inside the graph.
Then the script builds real REST `predict` requests -

- `serving_bytes`: `{"signature_name": "serving_bytes", "instances":
  [{"image_bytes": {"b64": "<base64 PNG>"}}, ...]}`,
- `serving_default`: `{"instances": [{"images": <height x width x channels pixel list>}]}` -

and answers them as TF Serving would, with TensorFlow only (no keras_vit, no Keras objects):
`tf.saved_model.load`, JSON instances converted to the signature's input tensors (base64
`{"b64": ...}` values decoded to bytes, numbers cast to the input dtype), the signature
called, and the outputs returned as `{"predictions": [...]}` (one entry per instance). It
checks that both signatures give the same classes, prints the response, the accuracy on the
labelled images, and the `docker run` command that serves the export for real. With
`--server-url` it also sends the request to a running TF Serving.

Quick try (a tiny ViT trained briefly on the embedded MNIST images, 8 test digits as PNG;
~40 s on 2 CPU cores):

    python examples/serve_with_tf_serving.py --quick

Full size (a trained `.keras` model or a `keras-vit train` run directory holding best.keras,
your own image files, and a running server):

    python examples/serve_with_tf_serving.py --model runs/pets/best.keras \
        --images cat.jpg dog.png --export-dir serving/pets \
        --server-url http://localhost:8501/v1/models/pets:predict

Writes `request.json` and `response.json` next to the export; prints
`serving_bytes accuracy: <value>` when the images have labels.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import sys
import tempfile
import urllib.request

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TINY = dict(patch_size=7, hidden_dim=32, num_heads=2, mlp_dim=64, num_layers=2)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Export a ViT as a SavedModel and query it like TF Serving's REST API."
    )
    parser.add_argument(
        "--quick", action="store_true", help="train a tiny model briefly, serve 8 test digits"
    )
    parser.add_argument("--model", default=None, help="a .keras file or a run directory")
    parser.add_argument(
        "--images", nargs="*", default=None, help="image files to send (JPEG/PNG/GIF/BMP)"
    )
    parser.add_argument(
        "--dataset", default="mnist", help="labelled test images to send when --images is absent"
    )
    parser.add_argument("--num-images", type=int, default=8)
    parser.add_argument("--export-dir", default=None, help="default: <out>/serving/vit")
    parser.add_argument("--version", type=int, default=None, help="default: next free version")
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--server-url", default=None, help="also POST the request here")
    parser.add_argument("--out", default=None, help="output folder (default: a temp folder)")
    return parser


# --- the model --------------------------------------------------------------------------------


def train_tiny_model(seed: int = 0):
    """A tiny ViT trained for three short epochs on embedded MNIST (28x28, 1 channel)."""
    import keras

    import keras_vit
    from keras_vit import data, train

    keras.utils.set_random_seed(seed)
    train_ds = data.load(
        "mnist", "train", image_size=28, batch_size=64, training=True, augment="none"
    )
    model = keras_vit.ViT(**TINY, num_classes=10, image_size=28, channels=1, name="vit_tiny")
    model.compile(
        optimizer=train.pretrain_optimizer(3e-3, total_steps=186, warmup_steps=18),
        loss=train.loss(),
        metrics=["accuracy"],
    )
    model.fit(train_ds, epochs=3, shuffle=False, verbose=2)
    return model


def load_trained_model(path: str):
    """A `.keras` file, or a run directory holding best.keras (`keras-vit train`'s layout)."""
    import keras

    import keras_vit  # noqa: F401  (registers keras_vit's layers for loading)

    if os.path.isdir(path):
        path = os.path.join(path, "best.keras")
    return keras.saving.load_model(path, compile=False)


# --- the client side --------------------------------------------------------------------------


def test_images(dataset: str, count: int):
    """`count` labelled test images of `dataset` as uint8 pixels, at their own size."""
    import numpy as np

    from keras_vit import data

    ds = data.load(
        dataset,
        "test",
        image_size=data.describe(dataset).image_size,
        batch_size=count,
        training=False,
    )
    images, labels = next(iter(ds))
    # The pipeline yields model inputs in [-1, 1]; a client holds 0-255 pixels.
    pixels = np.clip(np.round(images.numpy() * 127.5 + 127.5), 0, 255).astype("uint8")
    return pixels, labels.numpy().tolist()


def encode_png(pixels) -> bytes:
    """PNG bytes of one uint8 image `(height, width, channels)` (gray or RGB)."""
    from PIL import Image

    array = pixels[..., 0] if pixels.shape[-1] == 1 else pixels
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def bytes_request(encoded_images) -> dict:
    """TF Serving's REST body for the `serving_bytes` signature (base64 in {"b64": ...})."""
    return {
        "signature_name": "serving_bytes",
        "instances": [
            {"image_bytes": {"b64": base64.b64encode(data).decode("ascii")}}
            for data in encoded_images
        ],
    }


def pixels_request(pixels) -> dict:
    """TF Serving's REST body for `serving_default` (row format, pixel values 0-255)."""
    return {"instances": [{"images": image.tolist()} for image in pixels]}


# --- what TF Serving does with a REST predict request -----------------------------------------


def _json_value(value):
    """A JSON instance value as TF Serving reads it: {"b64": ...} -> bytes, else as is."""
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"])
    return value


def _to_json(value):
    """An output value as TF Serving writes it (strings decoded, floats as numbers)."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, list):
        return [_to_json(item) for item in value]
    return value


def predict_like_tf_serving(served, request: dict) -> dict:
    """Answers a REST `predict` body (row format) with a SavedModel loaded by TensorFlow.

    As TF Serving: the signature named by `signature_name` (default `serving_default`);
    each instance is a dict of input name -> value, or a bare value when the signature has
    one input; the instances are stacked into one batch per input and cast to the input's
    dtype; the response has one prediction per instance (a dict of outputs, or the bare value
    when the signature has one output).
    """
    import tensorflow as tf

    signature = served.signatures[request.get("signature_name", "serving_default")]
    specs = signature.structured_input_signature[1]
    columns = {name: [] for name in specs}
    for instance in request["instances"]:
        if not (isinstance(instance, dict) and set(instance) <= set(specs)):
            if len(specs) != 1:
                raise ValueError("a bare instance needs a signature with exactly one input")
            instance = {next(iter(specs)): instance}
        for name, value in instance.items():
            columns[name].append(_json_value(value))
    inputs = {
        name: tf.constant(values, dtype=specs[name].dtype) for name, values in columns.items()
    }
    outputs = {name: tensor.numpy().tolist() for name, tensor in signature(**inputs).items()}
    names = sorted(outputs)
    count = len(request["instances"])
    if len(names) == 1:
        return {"predictions": [_to_json(outputs[names[0]][i]) for i in range(count)]}
    return {
        "predictions": [{name: _to_json(outputs[name][i]) for name in names} for i in range(count)]
    }


def post(url: str, body: dict) -> dict:
    """Sends a REST predict request to a running TF Serving."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


def docker_command(export_dir: str, model_name: str) -> str:
    return (
        "docker run --rm -p 8501:8501 -p 8500:8500 "
        f'--mount type=bind,source="{os.path.abspath(export_dir)}",target=/models/{model_name} '
        f"-e MODEL_NAME={model_name} -t tensorflow/serving"
    )


def write_json(path: str, payload: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as stream:
        json.dump(payload, stream, indent=1)
    os.replace(tmp, path)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="serve_with_tf_serving_")
    export_dir = args.export_dir or os.path.join(out, "serving", "vit")
    if not args.quick and args.model is None:
        raise SystemExit("give --model (a .keras file or run directory), or use --quick")

    import keras_vit
    from keras_vit import data

    model = train_tiny_model() if args.quick else load_trained_model(args.model)
    num_classes = int(model.outputs[0].shape[-1])
    class_names = None
    labels = None
    if args.images:
        encoded = [open(path, "rb").read() for path in args.images]
        pixels = None
    else:
        pixels, labels = test_images(args.dataset, args.num_images)
        encoded = [encode_png(image) for image in pixels]
        info = data.describe(args.dataset)
        if info.num_classes == num_classes:
            class_names = list(info.class_names)

    version_dir = keras_vit.export_saved_model(
        model, export_dir, version=args.version, class_names=class_names, top_k=args.top_k
    )
    print(f"exported {version_dir}")

    import tensorflow as tf

    served = tf.saved_model.load(version_dir)  # TensorFlow only, as TF Serving
    request = bytes_request(encoded)
    response = predict_like_tf_serving(served, request)
    write_json(os.path.join(out, "request.json"), request)
    write_json(os.path.join(out, "response.json"), response)
    first = response["predictions"][0]
    print("serving_bytes response, first instance:")
    print(json.dumps({k: first[k] for k in sorted(first) if k.startswith("top_k")}))
    predicted = [p["top_k_indices"][0] for p in response["predictions"]]

    if pixels is not None:
        by_pixels = predict_like_tf_serving(served, pixels_request(pixels))
        same = predicted == [p["top_k_indices"][0] for p in by_pixels["predictions"]]
        print(f"serving_default (pixel lists) gives the same classes: {same}")
    if args.server_url:
        remote = [p["top_k_indices"][0] for p in post(args.server_url, request)["predictions"]]
        print(f"TF Serving at {args.server_url}: {remote}")

    print("serve it with:")
    print("  " + docker_command(export_dir, os.path.basename(os.path.normpath(export_dir))))
    if labels is not None:
        accuracy = sum(int(p == y) for p, y in zip(predicted, labels, strict=True)) / len(labels)
        print(f"labels {labels}")
        print(f"served  {predicted}")
        print(f"serving_bytes accuracy: {accuracy:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
