"""`keras-vit explain`: a real photo (scikit-image's chelsea) and a tiny saved model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import skimage.data
from PIL import Image

import keras_vit
from keras_vit.cli.main import main
from keras_vit.visualize import overlay_figure
from tests.output_checks import assert_informative, assert_outputs_close, randomize_weights
from tests.test_export import preprocess_reference

NAMES = [f"name_{i}" for i in range(10)]


@pytest.fixture(scope="module")
def photo(tmp_path_factory):
    """chelsea (300 x 451 RGB) saved as JPEG."""
    path = tmp_path_factory.mktemp("photo") / "chelsea.jpg"
    Image.fromarray(skimage.data.chelsea()).save(path, quality=90)
    return path


@pytest.fixture(scope="module")
def photo_png(tmp_path_factory):
    """chelsea saved losslessly, so the test's decoder (PIL) and the CLI's see the same pixels."""
    path = tmp_path_factory.mktemp("photo") / "chelsea.png"
    Image.fromarray(skimage.data.chelsea()).save(path)
    return path


def tiny_model():
    """A tiny non-square ViT with random weights (head included: the ranking follows the image)."""
    model = keras_vit.ViT(
        image_size=(32, 48),
        patch_size=8,
        hidden_dim=32,
        num_heads=4,
        mlp_dim=64,
        num_layers=2,
        num_classes=10,
    )
    return randomize_weights(model, seed=5)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny.keras"
    tiny_model().save(path)
    return path


@pytest.fixture(scope="module")
def expected(photo_png, model_file):
    """Probabilities and rollout of the saved model on the photo, preprocessed in NumPy."""
    import keras

    with Image.open(photo_png) as image:
        pixels = np.asarray(image.convert("RGB"))
    batch = preprocess_reference(pixels[None], (32, 48))
    model = keras.saving.load_model(model_file)
    logits = model.predict(batch, verbose=0)[0]
    rollout = keras_vit.attention_rollout(keras_vit.attention_maps(model, batch), model)[0]
    assert_informative(rollout[None], "rollout")
    return {"probabilities": np.exp(logits) / np.exp(logits).sum(), "rollout": rollout}


def png_size(path):
    with Image.open(path) as image:
        assert image.format == "PNG"
        return image.size  # (width, height)


def test_explain_writes_png_with_the_image_aspect_ratio(
    photo_png, model_file, expected, tmp_path, capsys, monkeypatch
):
    import keras_vit.visualize

    drawn = []

    def recording_overlay(image, heatmap, *args, **kwargs):
        drawn.append(np.asarray(heatmap))
        return overlay_figure(image, heatmap, *args, **kwargs)

    monkeypatch.setattr(keras_vit.visualize, "overlay_figure", recording_overlay)
    out = tmp_path / "maps" / "map.png"
    code = main(["explain", str(model_file), str(photo_png), "--out", str(out)])
    assert code == 0
    width, height = png_size(out)
    image_height, image_width = skimage.data.chelsea().shape[:2]
    assert width >= image_width
    assert abs(height - width * image_height / image_width) <= 1.0  # one pixel of rounding
    assert not (tmp_path / "maps" / "map_layers.png").exists()
    assert [p.name for p in out.parent.iterdir()] == ["map.png"]  # no temporary left
    # The heat map drawn is the attention rollout of this model on this image.
    (heatmap,) = drawn
    assert_outputs_close(heatmap, expected["rollout"], atol=1e-4, what="explain heat map")
    printed = capsys.readouterr().out.splitlines()
    probabilities = expected["probabilities"]
    order = np.argsort(-probabilities)[:5]
    assert [line.split()[-1] for line in printed[:5]] == [str(i) for i in order]
    percents = [float(line.split()[0].rstrip("%")) for line in printed[:5]]
    np.testing.assert_allclose(percents, probabilities[order] * 100, atol=0.006)


@pytest.mark.parametrize("section", ["resolved", "data"])  # "resolved": what `train` writes
def test_explain_run_directory_with_class_names_and_grid(
    photo_png, model_file, expected, tmp_path, capsys, section
):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "best.keras").write_bytes(model_file.read_bytes())
    (run_dir / "config.json").write_text(json.dumps({section: {"class_names": NAMES}}))
    out = tmp_path / "map.png"
    code = main(["explain", str(run_dir), str(photo_png), "--out", str(out), "--grid"])
    assert code == 0
    assert out.is_file()
    grid_width, grid_height = png_size(tmp_path / "map_layers.png")
    assert grid_width > grid_height  # two blocks side by side
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].endswith(NAMES[int(np.argmax(expected["probabilities"]))])


def test_explain_run_directory_without_config(photo, model_file, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "best.keras").write_bytes(model_file.read_bytes())
    assert main(["explain", str(run_dir), str(photo), "--out", str(tmp_path / "m.png")]) == 0


def test_missing_image_exits_2_before_loading_the_model(tmp_path, capsys):
    broken_model = tmp_path / "broken.keras"
    broken_model.write_bytes(b"not a zip file")  # loading it would fail differently
    missing = tmp_path / "nope.jpg"
    out = tmp_path / "x.png"
    code = main(["explain", str(broken_model), str(missing), "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert "image file not found" in err and "nope.jpg" in err
    assert not out.exists()


def test_undecodable_image_and_missing_model_exit_2(photo, model_file, tmp_path, capsys):
    text = tmp_path / "notes.jpg"
    text.write_text("hello")
    out = str(tmp_path / "m.png")
    assert main(["explain", str(model_file), str(text), "--out", out]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()  # one line, no TF op framing
    assert f"Cannot read {text} as an image: not image data" in line and "[Op:" not in line
    assert main(["explain", str(tmp_path / "none"), str(photo), "--out", out]) == 2
    assert "RUN_OR_MODEL" in capsys.readouterr().err


def test_model_without_a_head_is_a_usage_error(photo, tmp_path, capsys):
    model = keras_vit.ViT(
        image_size=32,
        patch_size=8,
        hidden_dim=32,
        num_heads=4,
        mlp_dim=64,
        num_layers=1,
        include_top=False,
        return_sequence=True,
    )
    path = tmp_path / "seq.keras"
    model.save(path)
    out = str(tmp_path / "m.png")
    assert main(["explain", str(path), str(photo), "--out", out]) == 2
    assert "class scores" in capsys.readouterr().err


def test_the_model_comes_first_and_has_no_flag(photo, model_file, tmp_path, capsys):
    out = str(tmp_path / "m.png")
    with pytest.raises(SystemExit) as raised:
        main(["explain", str(photo), "--model", str(model_file), "--out", out])
    assert raised.value.code == 2
    assert "unrecognized arguments: --model" in capsys.readouterr().err
    assert not (tmp_path / "m.png").exists()


def test_explain_takes_the_model_first_and_the_shared_flags(photo, model_file, tmp_path, capsys):
    out = str(tmp_path / "m.png")
    argv = ["explain", str(model_file), str(photo), "--out", out, "--quiet"]
    assert main([*argv, "--mixed-precision", "float32", "--no-jit-compile"]) == 0
    printed = capsys.readouterr().out
    assert "Wrote" not in printed and len(printed.splitlines()) == 5  # the top-5 classes only
    assert main(["explain", str(model_file), "--out", out]) == 2  # no IMAGE
    assert "explain takes RUN_OR_MODEL IMAGE" in capsys.readouterr().err


def test_a_tiff_image_is_named_as_such(model_file, tmp_path, capsys):
    tiff = tmp_path / "photo.tiff"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tiff)
    assert main(["explain", str(model_file), str(tiff), "--out", str(tmp_path / "m.png")]) == 2
    assert "TIFF data; keras_vit decodes PNG, JPEG, BMP, GIF or WebP" in capsys.readouterr().err


@pytest.mark.parametrize("distillation_head", [True, False])
def test_explain_a_distilled_model_with_registers(
    photo_png, tmp_path, monkeypatch, distillation_head
):
    """The map of a DeiT-style model with registers covers the patch grid only
    (4 x 6 here: no distillation or register cells) and is the rollout of the saved model;
    also with the distillation token's head left out (HF DeiTForImageClassification)."""
    import keras

    import keras_vit.visualize

    model = randomize_weights(
        keras_vit.ViT(
            image_size=(32, 48),
            patch_size=8,
            hidden_dim=16,
            num_heads=2,
            mlp_dim=32,
            num_layers=2,
            num_classes=10,
            distilled=True,
            distillation_head=distillation_head,
            num_register_tokens=2,
        ),
        seed=5,
    )
    path = tmp_path / "deit.keras"
    model.save(path)
    drawn = []

    def recording_overlay(image, heatmap, *args, **kwargs):
        drawn.append(np.asarray(heatmap))
        return overlay_figure(image, heatmap, *args, **kwargs)

    monkeypatch.setattr(keras_vit.visualize, "overlay_figure", recording_overlay)
    out = tmp_path / "map.png"
    assert main(["explain", str(path), str(photo_png), "--out", str(out)]) == 0
    with Image.open(photo_png) as image:
        batch = preprocess_reference(np.asarray(image.convert("RGB"))[None], (32, 48))
    loaded = keras.saving.load_model(path)
    maps = keras_vit.attention_maps(loaded, batch)
    assert maps[0].shape[-1] == 1 + 1 + 2 + 24
    (heatmap,) = drawn
    assert heatmap.shape == (4, 6)
    rollout = keras_vit.attention_rollout(maps, loaded)[0]
    assert_outputs_close(heatmap, rollout, atol=1e-4, what="explain heat map")


def test_a_folder_given_as_the_image_is_named_as_a_folder(model_file, tmp_path, capsys):
    """It said "image file not found" of a folder that exists."""
    out = tmp_path / "m.png"
    assert main(["explain", str(model_file), str(tmp_path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"IMAGE is a folder, not an image file: {str(tmp_path)!r}" in err, err
    assert not out.exists()


def test_an_out_path_that_is_no_file_is_refused_and_left_alone(photo, model_file, tmp_path, capsys):
    import os
    import stat

    fifo = tmp_path / "map.png"  # stands for /dev/null: the atomic write would replace it
    os.mkfifo(fifo)
    assert main(["explain", str(model_file), str(photo), "--out", str(fifo)]) == 2
    assert "neither a file nor a folder" in capsys.readouterr().err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert main(["explain", str(model_file), str(photo), "--out", str(tmp_path)]) == 2
    assert "is a folder; give a file name" in capsys.readouterr().err
    grid_fifo = tmp_path / "grid_layers.png"  # what --grid writes beside --out grid.png
    os.mkfifo(grid_fifo)
    out = tmp_path / "grid.png"
    assert main(["explain", str(model_file), str(photo), "--out", str(out), "--grid"]) == 2
    assert f"--out (with --grid) '{grid_fifo}' exists and is neither" in capsys.readouterr().err
    assert stat.S_ISFIFO(os.lstat(grid_fifo).st_mode) and not out.exists()  # refused before work
