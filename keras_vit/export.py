"""SavedModel export for TF Serving, with resizing, scaling and decoding inside the graph.

The export is a plain TensorFlow SavedModel: loading it needs TensorFlow only (no keras_vit,
no Keras custom objects). It is written in the TF Serving layout `export_dir/<version>/`
and carries three signatures (all with a dynamic batch dimension):

- `serving_default`: input `images`, float32 `(batch, height, width, channels)`, pixel
  values in [0, 255], any height and width.
- `serving_bytes`: input `image_bytes`, string `(batch,)`, each an encoded PNG, JPEG, BMP,
  GIF (first frame) or WebP image, decoded by keras_vit's one rule
  (`keras_vit.data.decode.decode_pixels`: gray, palette, CMYK JPEG, 16-bit PNG and alpha
  into 1, 3 or 4 channels; a JPEG's EXIF orientation applied; an image whose header
  declares more than `keras_vit.spec.image_formats.MAX_PIXELS` pixels refused as
  INVALID_ARGUMENT before decoding; other data is refused with TensorFlow's decoding error).
- `features`: input `images` as in `serving_default`; output `features` `(batch, D)`, the
  pooled representation (output of `pre_logits` when the model has one, else of `pool`).

The two serving signatures return `logits` `(batch, num_classes)`, `probabilities`
(softmax), `top_k_indices` (int32) and `top_k_scores` `(batch, k)`, and `top_k_classes`
(strings) when class names are given. Every float output is float32, also for models
built under a mixed-precision policy.

Preprocessing is the evaluation path of `keras_vit.data`: bilinear `tf.image.resize` to
the model's input size, then `(x - 127.5) / 127.5` (`keras_vit.preprocess_inputs`); a model
that records `input_preprocessing="imagenet"` (timm in1k weights) then gets ImageNet's mean/std
(`keras_vit.data.preprocess.from_unit_range`).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from collections.abc import Sequence

import keras
import tensorflow as tf

from keras_vit import _atomic
from keras_vit._validation import check_positive_int
from keras_vit.checkpoints.keras_files.model_io import model_input_preprocessing
from keras_vit.data.decode import decode_pixels
from keras_vit.data.preprocess import from_unit_range, preprocess_inputs
from keras_vit.model.arguments import ONE_CLASS_HINT
from keras_vit.spec import layer_names

logger = logging.getLogger(__name__)

SERVING_SIGNATURE = "serving_default"
BYTES_SIGNATURE = "serving_bytes"
FEATURES_SIGNATURE = "features"
IMAGES_KEY = "images"
BYTES_KEY = "image_bytes"
FEATURE_LAYER_NAMES = layer_names.FEATURE_LAYERS
DECODABLE_CHANNELS = (1, 3, 4)
TINY_PROBABILITY = 1e-37  # floor before log() for softmax heads


def export_saved_model(
    model: keras.Model,
    export_dir: str | os.PathLike,
    version: int | None = None,
    class_names: Sequence[str] | None = None,
    top_k: int = 5,
    overwrite: bool = False,
    jit_compile: bool = False,
) -> str:
    """Writes `model` as a TF Serving SavedModel to `export_dir/<version>/`.

    The version folder is first written to a temporary folder inside `export_dir` (a name TF
    Serving ignores, as it is not an integer) and then renamed into place, so a server
    watching `export_dir` never sees a half-written version. Under Keras' JAX or PyTorch
    backend the export runs in a TensorFlow child process
    (`keras_vit._export_process`), through a temporary `.keras` file.

    Args:
        model: a keras_vit classifier (`ViT`, `HybridViT`, ...): one input
            `(batch, height, width, channels)` scaled to [-1, 1], a `head` layer giving
            logits (linear, or softmax: then `logits` are log-probabilities) and a `pool`
            (or `pre_logits`) layer for the `features` signature.
        export_dir: the model base path TF Serving watches; created if missing.
        version: positive integer version; default (None) is one more than the highest
            existing numeric version folder, or 1.
        class_names: optional sequence of `num_classes` strings; adds the `top_k_classes`
            output.
        top_k: how many best classes the `top_k_*` outputs list (default 5; capped at
            `num_classes`).
        overwrite: if True, an existing `export_dir/<version>` is replaced (the new version
            is renamed into place right after the old one is moved aside); if False
            (default), an existing version raises `FileExistsError` before any work.
        jit_compile: compile the model's forward pass with XLA inside the SavedModel
            (default False: TensorFlow's kernels, which on CPU run bfloat16 products on
            oneDNN). The model's own dtype policy is kept: for a bfloat16 export of a float32
            model, pass `keras_vit.runtime.precision.with_dtype_policy(model, "mixed_bfloat16")`
            (logits stay float32; docs/serving.md gives the measured difference).

    Returns:
        The path of the written version folder, `export_dir/<version>`.

    Raises:
        ValueError: a model without a fixed-size 4-D image input, a `head`, or a `pool`
            layer; a head activation other than linear/softmax; a bad `version`, `top_k` or
            `class_names` (wrong count or not strings).
        FileExistsError: `export_dir/<version>` exists and `overwrite` is False.
        keras_vit._atomic.WriteError: (an `OSError`) the version could not be written (disk
            full, I/O error): no temporary folder is left, an existing version is intact,
            and `export_dir` (with any parent folder the call created) is removed again
            when the call created it.

    Example:

    ```python
    model = keras_vit.ViT_B16(num_classes=37, image_size=384)
    keras_vit.export_saved_model(model, "serving/pets", class_names=names)
    # -> serving/pets/1 ; serve with TF Serving, or in Python:
    served = tf.saved_model.load("serving/pets/1")
    out = served.signatures["serving_default"](images=tf.zeros((2, 500, 400, 3)))
    ```
    """
    check_positive_int("top_k", top_k)
    if version is not None:
        check_positive_int("version", version)
    if keras.backend.backend() != "tensorflow":  # a SavedModel is a TensorFlow graph
        from keras_vit._export_process import export_in_tensorflow_process

        options = dict(version=version, top_k=top_k, overwrite=overwrite, jit_compile=jit_compile)
        names = None if class_names is None else [str(name) for name in class_names]
        return export_in_tensorflow_process(model, export_dir, class_names=names, **options)
    height, width, channels = model_image_shape(model)
    head = find_head(model)
    feature_layer = find_feature_layer(model)
    num_classes = int(head.output.shape[-1])
    class_names = check_class_names(class_names, num_classes)

    export_dir = os.fspath(export_dir)
    created = make_folders(export_dir)
    try:
        return _export_into(
            model,
            export_dir,
            version,
            overwrite,
            archive_kwargs={
                "image_size": (height, width),
                "channels": channels,
                "feature_layer": feature_layer,
                "head_activation": head_activation_name(head),
                "class_names": class_names,
                "top_k": min(top_k, num_classes),
                "jit_compile": jit_compile,
            },
        )
    except BaseException:
        remove_empty_folders(created)  # leave nothing that was not there before
        raise


def _export_into(model, export_dir: str, version, overwrite: bool, archive_kwargs) -> str:
    """`export_saved_model` once its arguments are checked and `export_dir` exists."""
    if version is None:
        version = next_version(export_dir)
    target = os.path.join(export_dir, str(version))
    if os.path.exists(target) and not overwrite:
        raise FileExistsError(
            f"Export version {version} already exists at {target!r}; pass overwrite=True "
            "(CLI: --overwrite) to replace it, or choose another version."
        )

    archive = build_export_archive(model, **archive_kwargs)
    temp_dir = tempfile.mkdtemp(prefix=f".tmp-{version}-", dir=export_dir)
    try:
        try:
            archive.write_out(temp_dir, verbose=False)
        except (OSError, tf.errors.OpError) as error:  # disk full, I/O error
            raise write_error(target, error) from error
        move_into_place(temp_dir, target, overwrite=overwrite)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    logger.debug("Exported SavedModel version %d to %s", version, target)
    return target


def make_folders(path: str) -> list[str]:
    """Creates `path` and its missing parents (`os.makedirs`); returns the folders it made,
    deepest first (empty when `path` existed)."""
    missing = []
    folder = os.path.abspath(path)
    while not os.path.exists(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    os.makedirs(path, exist_ok=True)
    return missing


def remove_empty_folders(folders: list[str]) -> None:
    """Removes `folders` (deepest first) while they are empty; stops at the first that is
    not (another writer's files are never touched)."""
    for folder in folders:
        try:
            os.rmdir(folder)
        except OSError:
            return


def write_error(target: str, error: Exception) -> _atomic.WriteError:
    """`WriteError` naming the version folder, with the cause from an OSError or from a
    TensorFlow error such as "...index.tempstate123; No space left on device [Op:SaveV2]"."""
    if isinstance(error, OSError):
        return _atomic.WriteError(target, error)
    text = " ".join(str(getattr(error, "message", error)).split())
    text = re.sub(r"\s*\[Op:[^\]]*\]\s*$", "", text)
    cause = text.rsplit("; ", 1)[-1] if "; " in text else text
    return _atomic.WriteError(target, OSError(None, cause))


def model_image_shape(model: keras.Model) -> tuple[int, int, int]:
    """The `(height, width, channels)` of the model's single 4-D image input."""
    inputs = model.inputs
    if len(inputs) != 1 or len(inputs[0].shape) != 4 or None in tuple(inputs[0].shape)[1:]:
        raise ValueError(
            "export_saved_model needs a model with one image input of fixed size "
            "(batch, height, width, channels). Received inputs: "
            f"{[tuple(x.shape) for x in inputs]}"
        )
    height, width, channels = (int(d) for d in inputs[0].shape[1:])
    return height, width, channels


def find_head(model: keras.Model) -> keras.layers.Layer:
    """The classifier layer whose output is the model's: `head`, or for a distilled model
    (DeiT) `head_mean` (the mean of `head` and `head_dist`) or the `head_activation` after
    it; raises ValueError for a headless model or a one-output head (its softmax is 1.0
    for every image; `arguments.ONE_CLASS_HINT`)."""
    present = {layer.name for layer in model.layers}
    found = [name for name in layer_names.CLASSIFIER_OUTPUTS if name in present]
    try:
        head = model.get_layer(found[0] if found else layer_names.HEAD)
    except ValueError:
        raise ValueError(
            "export_saved_model needs a classifier with a `head` layer (include_top=True). "
            f"Received model {model.name!r} with layers {[x.name for x in model.layers][-4:]}"
        ) from None
    if head.output.shape[-1] == 1:
        raise ValueError(f"{ONE_CLASS_HINT} Received: a head of 1 output in {model.name!r}")
    return head


def find_feature_layer(model: keras.Model) -> keras.layers.Layer:
    """The layer whose output is the pooled representation the head reads: `pre_logits`,
    else `fc_norm` (final_norm="pooled"), else the pooling (`pool` or the MAP head)."""
    names = {layer.name for layer in model.layers}
    for name in FEATURE_LAYER_NAMES:
        if name in names:
            return model.get_layer(name)
    raise ValueError(
        f"export_saved_model needs a `pool` or `pre_logits` layer for the `features` "
        f"signature. Received model {model.name!r} without either."
    )


def head_activation_name(head: keras.layers.Layer) -> str:
    """ "linear" or "softmax"; any other head activation raises ValueError."""
    activation = getattr(head, "activation", keras.activations.linear)
    name = keras.activations.serialize(activation)
    name = name if isinstance(name, str) else name.get("config", name)
    if name not in ("linear", "softmax"):
        raise ValueError(
            "export_saved_model needs a head with activation None/'linear' (logits) or "
            f"'softmax'. Received: head activation={name!r}"
        )
    return name


def check_class_names(class_names, num_classes: int) -> list[str] | None:
    """Returns `class_names` as a list of `num_classes` strings (or None); raises ValueError."""
    if class_names is None:
        return None
    names = list(class_names)
    if len(names) != num_classes or not all(isinstance(n, str) for n in names):
        raise ValueError(
            f"`class_names` must be {num_classes} strings, one per class of the head. "
            f"Received {len(names)} names: {names[:5]}{'...' if len(names) > 5 else ''}"
        )
    return names


def next_version(export_dir: str) -> int:
    """One more than the highest integer-named folder in `export_dir`, or 1."""
    versions = [
        int(name)
        for name in os.listdir(export_dir)
        if name.isdigit() and os.path.isdir(os.path.join(export_dir, name))
    ]
    return max(versions, default=0) + 1


def move_into_place(source: str, target: str, *, overwrite: bool) -> None:
    """Renames the finished `source` folder to `target`, replacing it only if `overwrite`.

    The folder gets the permissions of a folder made with `os.makedirs` under the current
    umask (`tempfile.mkdtemp` makes it 0o700, unreadable to a server running as another
    user). An existing `target` is swapped with `source` in one `renameat2(RENAME_EXCHANGE)`
    call (Linux 3.15+), so `target` always names a complete version, and a reader that opened
    the old files keeps reading them; the old version is then deleted. Where that call is
    missing, the old version is moved aside first (two renames).
    """
    _atomic.set_default_permissions(source)
    if not os.path.exists(target):
        os.rename(source, target)
        return
    if not overwrite:
        raise FileExistsError(f"Export version folder appeared while exporting: {target!r}")
    if _exchange(source, target):
        shutil.rmtree(source, ignore_errors=True)  # now the old version
        return
    retired = tempfile.mkdtemp(prefix=".old-", dir=os.path.dirname(target))
    retired_version = os.path.join(retired, os.path.basename(target))
    os.rename(target, retired_version)
    try:
        os.rename(source, target)
    except OSError:
        os.rename(retired_version, target)
        raise
    finally:
        shutil.rmtree(retired, ignore_errors=True)


RENAME_EXCHANGE = 2  # linux/fs.h
AT_FDCWD = -100


def _exchange(first: str, second: str) -> bool:
    """Atomically swaps two paths with Linux's renameat2; False where it is unavailable."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    result = renameat2(AT_FDCWD, os.fsencode(first), AT_FDCWD, os.fsencode(second), RENAME_EXCHANGE)
    if result == 0:
        return True
    errno = ctypes.get_errno()
    if errno in (38, 22, 95):  # ENOSYS, EINVAL (file system without it), EOPNOTSUPP
        return False
    raise OSError(errno, os.strerror(errno), second)


def resize_and_scale(images: tf.Tensor, image_size: tuple[int, int]) -> tf.Tensor:
    """`(batch, h, w, c)` pixels in [0, 255] -> `(batch, *image_size, c)` float32 in [-1, 1].

    Bilinear `tf.image.resize` (no antialiasing), then `(x - 127.5) / 127.5`, as the
    evaluation pipeline of `keras_vit.data` does.
    """
    images = tf.image.resize(tf.cast(images, tf.float32), image_size, method="bilinear")
    return preprocess_inputs(images)


def decode_images(image_bytes: tf.Tensor, image_size: tuple[int, int], channels: int):
    """Decodes a `(batch,)` string tensor of encoded images to `(batch, *image_size, c)`.

    Each image is decoded by `keras_vit.data.decode.decode_pixels` (the rule of folder
    datasets, `predict` and `explain`) and resized on its own (sizes may differ within a
    batch). Undecodable bytes raise `tf.errors.InvalidArgumentError`.
    """
    if channels not in DECODABLE_CHANNELS:
        raise ValueError(
            f"serving_bytes decodes 1, 3 or 4 channels. Received: model channels={channels}"
        )

    def decode_one(data):
        image = decode_pixels(data, channels)
        return tf.image.resize(tf.cast(image, tf.float32), image_size, method="bilinear")

    return tf.map_fn(
        decode_one,
        image_bytes,
        fn_output_signature=tf.TensorSpec((*image_size, channels), tf.float32),
    )


def build_export_archive(
    model,
    *,
    image_size,
    channels,
    feature_layer,
    head_activation,
    class_names,
    top_k,
    jit_compile=False,
):
    """The `keras.export.ExportArchive` holding the three signatures (see module doc)."""
    feature_model = keras.Model(model.inputs, feature_layer.output, name="features")
    forward = tf.function(lambda x: model(x, training=False), jit_compile=bool(jit_compile))
    preprocessing = model_input_preprocessing(model)

    def classify(scaled_images):
        scaled_images = from_unit_range(scaled_images, preprocessing)
        outputs = tf.cast(forward(scaled_images), tf.float32)
        if head_activation == "softmax":
            probabilities = outputs
            logits = tf.math.log(tf.maximum(outputs, TINY_PROBABILITY))
        else:
            logits = outputs
            probabilities = tf.nn.softmax(logits, axis=-1)
        scores, indices = tf.math.top_k(probabilities, k=top_k)
        result = {
            "logits": logits,
            "probabilities": probabilities,
            "top_k_indices": indices,
            "top_k_scores": scores,
        }
        if class_names is not None:
            result["top_k_classes"] = tf.gather(tf.constant(class_names, tf.string), indices)
        return result

    def serving_default(images):
        return classify(resize_and_scale(images, image_size))

    def serving_bytes(image_bytes):
        pixels = decode_images(image_bytes, image_size, channels)
        return classify(preprocess_inputs(pixels))

    def features(images):
        scaled = from_unit_range(resize_and_scale(images, image_size), preprocessing)
        pooled = feature_model(scaled, training=False)
        return {"features": tf.cast(pooled, tf.float32)}

    image_spec = tf.TensorSpec((None, None, None, channels), tf.float32, name=IMAGES_KEY)
    bytes_spec = tf.TensorSpec((None,), tf.string, name=BYTES_KEY)
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(SERVING_SIGNATURE, serving_default, input_signature=[image_spec])
    archive.add_endpoint(BYTES_SIGNATURE, serving_bytes, input_signature=[bytes_spec])
    archive.add_endpoint(FEATURES_SIGNATURE, features, input_signature=[image_spec])
    return archive


if __name__ == "__main__":  # the TensorFlow child process of an export from another backend
    import sys

    from keras_vit._export_process import child_main

    sys.exit(child_main(sys.argv[1], export_saved_model))
