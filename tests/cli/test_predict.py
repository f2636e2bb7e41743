"""Tests of `keras-vit predict` on real MNIST digits written as PNG files."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import data
from keras_vit.cli.main import main
from keras_vit.cli.predict import read_images
from keras_vit.train import runs
from tests.helpers.cli_runs import pretrained_run
from tests.output_checks import assert_informative, randomize_weights

MNIST = os.path.join(os.path.dirname(keras_vit.__file__), "data_files", "mnist_5k.npz")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return pretrained_run(tmp_path_factory)


@pytest.fixture(scope="module")
def decisive(trained, tmp_path_factory, digits_folder):
    """A copy of the trained run whose best.keras has random weights and a strong head.

    Two training steps leave ~10% per class, so rankings are near ties; here every digit has
    a clear winner (checked), and a wrong image, class name or order changes the output.
    """
    run_dir = tmp_path_factory.mktemp("decisive") / "run"
    shutil.copytree(trained, run_dir)
    model = randomize_weights(runs.load_model(run_dir / "best.keras"), seed=11, scale=0.5)
    head = model.get_layer("head")
    head.kernel.assign(head.kernel * 8.0)
    model.save(run_dir / "best.keras")
    probabilities = tf.nn.softmax(model.predict(reference_batch(digits_folder[2]), verbose=0))
    top2 = np.sort(probabilities.numpy(), axis=-1)[:, -2:] * 100
    assert (top2[:, 1] - top2[:, 0] > 5).all(), top2  # no near ties
    return run_dir


def reference_batch(images):
    """The digits through the data pipeline's evaluation path (predict's reference)."""
    pipeline = data.load(
        (images, np.zeros(len(images), "int32")),
        image_size=8,
        batch_size=len(images),
        training=False,
        channels=1,
    )
    batch, _ = next(iter(pipeline))
    return batch


@pytest.fixture(scope="module")
def digits_folder(tmp_path_factory):
    """Six held-out MNIST digits as PNG files: 4 in the folder, 2 in a sub-folder."""
    folder = tmp_path_factory.mktemp("pngs")
    with np.load(MNIST, allow_pickle=False) as archive:
        images = archive["x_test"][:6]
    (folder / "more").mkdir()
    paths = []
    for index, image in enumerate(images):
        path = folder / ("more" if index >= 4 else "") / f"digit_{index}.png"
        tf.io.write_file(str(path), tf.io.encode_png(image[..., None].astype(np.uint8)))
        paths.append(str(path))
    (folder / "notes.txt").write_text("not an image")
    return folder, paths, images


def parse(out):
    """{path: [(class, percent), ...]} from predict's output lines."""
    result = {}
    for line in out.splitlines():
        if ": " in line and line.endswith("%)"):
            path, ranked = line.rsplit(": ", 1)
            pairs = [item.rstrip(")").split(" (") for item in ranked.split(", ")]
            result[path] = [(name, float(p.rstrip("%"))) for name, p in pairs]
    return result


def test_predict_top_k_above_class_count_warns_and_shows_all(
    trained, digits_folder, capsys, caplog
):
    folder, paths, _ = digits_folder
    assert main(["predict", str(trained), str(paths[0]), "--top-k", "99"]) == 0
    (ranked,) = parse(capsys.readouterr().out).values()
    num_classes = len(ranked)
    assert num_classes < 99
    assert f"--top-k 99 is more than the model's {num_classes} classes" in caplog.text


def test_predict_folder_top_k(decisive, digits_folder, capsys):
    folder, paths, images = digits_folder
    assert main(["predict", str(decisive), str(folder), "--top-k", "3"]) == 0
    predictions = parse(capsys.readouterr().out)
    assert sorted(predictions) == sorted(paths)  # recursive, non-images skipped
    # Reference: the same digits through the data pipeline's evaluation path.
    logits = runs.load_model(decisive / "best.keras").predict(reference_batch(images), verbose=0)
    assert_informative(logits)
    probabilities = tf.nn.softmax(logits).numpy()
    names = json.loads((decisive / "config.json").read_text())["resolved"]["class_names"]
    for index, path in enumerate(paths):
        ranked = predictions[path]
        order = np.argsort(-probabilities[index])[:3]
        assert [name for name, _ in ranked] == [names[i] for i in order], path
        expected = probabilities[index][order] * 100
        np.testing.assert_allclose([p for _, p in ranked], expected, atol=0.051)


def test_predict_single_file_with_keras_model(trained, digits_folder, capsys):
    _, paths, _ = digits_folder
    assert main(["predict", str(trained / "last.keras"), paths[0]]) == 0
    out = capsys.readouterr().out
    predictions = parse(out)
    assert list(predictions) == [paths[0]]
    assert f"Predicted 1 image with {trained / 'last.keras'} (top-5)." in out
    assert len(predictions[paths[0]]) == 5
    assert sum(p for _, p in predictions[paths[0]]) <= 100.5


def expect_usage_error(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_predict_bad_arguments_exit_2(trained, capsys, tmp_path):
    expect_usage_error(capsys, ["predict", str(tmp_path / "none"), "x.png"], "not found")
    missing = tmp_path / "missing.png"
    expect_usage_error(capsys, ["predict", str(trained), str(missing)], "not found")
    empty = tmp_path / "empty"
    empty.mkdir()
    expect_usage_error(capsys, ["predict", str(trained), str(empty)], "No images")
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    expect_usage_error(capsys, ["predict", str(trained), str(broken)], "Cannot read")


def test_predict_reports_a_file_that_is_no_image_once(trained, capsys, caplog, tmp_path):
    """A text file given to predict: the one error line, and no warning log repeating it
    (not "Skipped 1 bad image file(s)" logged before the error); in a folder
    beside a readable image: one "Skipped" line, no log record."""
    note = tmp_path / "note.txt"
    note.write_text("hello")
    with caplog.at_level("WARNING"):
        expect_usage_error(capsys, ["predict", str(trained), str(note)], f"Cannot read {note}")
    assert not [record for record in caplog.records if str(note) in record.getMessage()]
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "note.png").write_text("hello")
    from PIL import Image

    Image.new("L", (8, 8), 128).save(folder / "gray.png")
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert main(["predict", str(trained), str(folder)]) == 0
    err = capsys.readouterr().err
    assert err.count("note.png") == 1 and err.startswith(f"Skipped {folder / 'note.png'}: ")
    assert not [record for record in caplog.records if "note.png" in record.getMessage()]


def test_predict_does_not_run_the_precision_probe(
    trained, digits_folder, capsys, monkeypatch, tmp_path
):
    """--mixed-precision auto on a one-off predict takes a cached probe or the flag rule: no
    probe is measured (nor its cache written) for a few images."""
    from keras_vit.runtime import precision_probe

    monkeypatch.setenv("KERAS_VIT_PRECISION_PROBE", "on")
    monkeypatch.setenv("KERAS_VIT_CACHE_DIR", str(tmp_path / "cache"))
    built = []
    monkeypatch.setattr(precision_probe, "block_step", lambda *a: built.append(a))
    image = digits_folder[1][0]
    assert main(["predict", str(trained), str(image), "--top-k", "1"]) == 0
    assert f"{image}: " in capsys.readouterr().out
    assert built == [] and not os.path.exists(precision_probe.cache_path())


def test_predict_reads_rgb_rgba_and_gif_like_gray(decisive, digits_folder, capsys, tmp_path):
    from PIL import Image

    _, paths, images = digits_folder
    gray = Image.fromarray(images[0].astype(np.uint8), mode="L")
    variants = {
        "rgb.png": gray.convert("RGB"),
        "rgba.png": gray.convert("RGBA"),
        "gray.gif": gray,
        "rgb.bmp": gray.convert("RGB"),
        "gray_alpha.png": gray.convert("LA"),
    }
    for name, image in variants.items():
        image.save(tmp_path / name)
    # Every file decodes to the digit's own pixels (read at 28 x 28: no resize), in [-1, 1];
    # printed percents (0.1% steps) cannot see a small misreading such as a 1-pixel shift.
    files = [str(tmp_path / name) for name in variants]
    pixels = read_images(files, (28, 28), 1)
    expected = images[0].astype(np.float32)[..., None] / 127.5 - 1.0
    for name, read in zip(variants, pixels, strict=True):
        np.testing.assert_allclose(read, expected, atol=1e-3, err_msg=name)  # < 1 gray level
    assert main(["predict", str(decisive), paths[0], str(tmp_path)]) == 0
    predictions = parse(capsys.readouterr().out)
    reference = predictions[paths[0]]
    assert reference[0][1] - reference[1][1] > 5  # the decisive head: a clear winner
    for name in variants:
        ranked = predictions[str(tmp_path / name)]
        assert [c for c, _ in ranked] == [c for c, _ in reference], name
        np.testing.assert_allclose([p for _, p in ranked], [p for _, p in reference], atol=0.11)


def test_a_dynamic_image_size_model_is_fed_at_its_table_size(digits_folder, tmp_path, capsys):
    """A ViT built with dynamic_image_size=True has input (None, None, 1): predict, evaluate
    and fewshot feed it at its position table's size (they used to crash on the None)."""
    model = keras_vit.ViT(
        image_size=28, channels=1, num_classes=10, patch_size=7, hidden_dim=16,
        num_heads=2, mlp_dim=32, num_layers=1, dynamic_image_size=True,
    )  # fmt: skip
    assert tuple(model.input_shape) == (None, None, None, 1)
    randomize_weights(model, seed=3)
    path = tmp_path / "dynamic.keras"
    model.save(path)
    _, paths, _ = digits_folder
    assert main(["predict", str(path), paths[0], "--quiet"]) == 0
    assert "digit_0.png" in capsys.readouterr().out
    common = ["--dataset", "mnist", "--quiet"]
    assert main(["evaluate", str(path), "--split", "test[:40]", *common]) == 0
    assert "accuracy" in capsys.readouterr().out.lower()
    assert main(["fewshot", str(path), "--shots", "1", "--seeds", "1", *common]) == 0
    out = capsys.readouterr().out
    assert "Few-shot linear evaluation" in out and "\n    1 " in out
