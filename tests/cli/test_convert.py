"""`keras-vit convert`: .npz, .keras, Hugging Face folders and timm files in every direction,
run in-process through the CLI's main()."""

from __future__ import annotations

import dataclasses
import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.cli import convert
from keras_vit.cli.main import UsageError, main
from tests.numpy_reference import random_official_params, vit_forward

ARCH = dict(patch_size=8, hidden_dim=32, num_heads=4, mlp_dim=64, num_layers=2)


@pytest.fixture
def official_file(tmp_path):
    rng = np.random.default_rng(0)
    params = random_official_params(
        rng, image_size=32, channels=3, num_classes=7, representation_size=16, **ARCH
    )
    path = tmp_path / "tiny.npz"
    np.savez(path, **params)
    return path, params


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as info:
        main(["convert", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for option in ("SRC", "DST", "--to", "--model", "--image-size", "--num-classes", "--overwrite"):
        assert option in text


def test_npz_to_keras_and_back(official_file, tmp_path, capsys):
    path, params = official_file
    keras_file = tmp_path / "tiny.keras"
    assert main(["convert", str(path), str(keras_file), "--model", "auto"]) == 0
    assert "Wrote" in capsys.readouterr().out
    model = keras.models.load_model(keras_file)
    x = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    expected = vit_forward(params, x, num_heads=4)
    np.testing.assert_allclose(np.asarray(model(x)), expected, atol=1e-4)
    back = tmp_path / "back.npz"
    assert main(["convert", str(keras_file), str(back)]) == 0
    with np.load(back, allow_pickle=False) as saved:
        assert set(saved.files) == set(params)
        for key in params:
            np.testing.assert_array_equal(saved[key], params[key])


def test_npz_to_keras_at_another_resolution(official_file, tmp_path):
    path, _ = official_file
    keras_file = tmp_path / "big.keras"
    argv = ["convert", str(path), str(keras_file), "--model", "auto", "--image-size", "48", "64"]
    assert main(argv) == 0
    model = keras.models.load_model(keras_file)
    assert tuple(model.get_layer("posembed_input").pos_embedding.shape) == (1, 1 + 6 * 8, 32)


def test_variant_names_map_to_builders():
    import keras_vit

    assert convert.builder_for("B/16") == (keras_vit.ViT_B16, 16)
    assert convert.builder_for("ViT-L_32") == (keras_vit.ViT_L32, 32)
    assert convert.builder_for("ViT_Ti16") == (keras_vit.ViT_Ti16, 16)
    assert convert.builder_for("R50+ViT-B_16") == (keras_vit.R50_B16, 16)
    assert convert.builder_for("R+Ti/16") == (keras_vit.R_Ti16, 32)
    assert convert.builder_for("R26+S/32") == (keras_vit.R26_S32, 32)
    with pytest.raises(UsageError, match="unknown --model"):
        convert.builder_for("X/99")


def test_usage_errors_exit_2(official_file, tmp_path, capsys):
    path, _ = official_file
    cases = [
        ["convert", str(path), str(tmp_path / "out.h5")],  # unknown DST format
        ["convert", str(tmp_path / "absent.npz"), str(tmp_path / "o.npz")],
        ["convert", str(tmp_path / "absent.npz"), str(tmp_path / "o.keras"), "--model", "auto"],
        ["convert", str(path), str(path).replace(".npz", ".keras"), "--model", "nonsense"],
    ]
    for argv in cases:
        assert main(argv) == 2, argv
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 4 and all(e.startswith("keras-vit convert: error:") for e in errors)
    assert "cannot tell the format" in errors[0] and "--to" in errors[0]
    assert "SRC not found" in errors[1]


@pytest.mark.parametrize(
    "name, to, named",
    [("e.npz", "keras", "npz"), ("e.keras", "npz", "keras"), ("e.keras", "hf", "keras")],
)
def test_to_that_contradicts_the_destination_suffix_exits_2(
    official_file, tmp_path, capsys, name, to, named
):
    """It was a Keras traceback (.npz named, --to keras), or npz arrays written under a
    .keras name that nothing loads (.keras named, --to npz)."""
    path, _ = official_file
    assert main(["convert", str(path), str(tmp_path / name), "--to", to]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--to {to} writes " in err and f"({named}); name DST to match" in err, err
    assert not (tmp_path / name).exists()
    assert convert.target_format(str(tmp_path / "e.v2"), to) == to  # an unknown suffix: --to


def test_existing_destination_needs_overwrite(official_file, tmp_path):
    path, _ = official_file
    target = tmp_path / "t.keras"
    target.write_bytes(b"old")
    assert main(["convert", str(path), str(target), "--model", "auto"]) == 2
    assert target.read_bytes() == b"old"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--model", "B/16"], "embedding/kernel"),
        (["--model", "auto", "--image-size", "30"], "not divisible by the patch size"),
    ],
)
def test_wrong_architecture_or_size_is_a_usage_error(
    official_file, tmp_path, capsys, extra, message
):
    """A file of another variant or an impossible size: one line, exit 2, no file written."""
    path, _ = official_file
    target = tmp_path / "out.keras"
    assert main(["convert", str(path), str(target), *extra]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and "Traceback" not in error
    assert not target.exists()


def test_every_direction_and_the_round_trip_is_bit_exact(tmp_path):
    """npz -> hf -> timm -> npz bit-exact; each of them -> .keras equals the NumPy forward."""
    rng = np.random.default_rng(0)
    params = random_official_params(rng, image_size=32, channels=3, num_classes=7, **ARCH)
    path = tmp_path / "tiny.npz"
    np.savez(path, **params)
    hf, timm, back = tmp_path / "hf_out", tmp_path / "t.safetensors", tmp_path / "back.npz"
    assert main(["convert", str(path), str(hf)]) == 0
    assert (hf / "config.json").is_file() and (hf / "model.safetensors").is_file()
    assert main(["convert", str(hf), str(timm)]) == 0
    assert main(["convert", str(timm), str(back)]) == 0
    with np.load(back, allow_pickle=False) as saved:
        assert set(saved.files) == set(params)
        for key in params:
            assert np.array_equal(saved[key], params[key]), key
    x = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    expected = vit_forward(params, x, num_heads=4)
    for source in (hf, timm):
        out = tmp_path / f"{source.name}.keras"
        assert main(["convert", str(source), str(out)]) == 0
        model = keras.models.load_model(out)
        np.testing.assert_allclose(np.asarray(model(x)), expected, atol=1e-4)
    written = tmp_path / "from_keras"
    assert main(["convert", str(tmp_path / "t.safetensors.keras"), str(written), "--to", "hf"]) == 0
    assert (written / "config.json").is_file()


def test_pytorch_pickle_source_is_refused_with_advice(tmp_path, capsys):
    src = tmp_path / "pytorch_model.bin"
    src.write_bytes(b"\x80\x02}q\x00.")
    assert main(["convert", str(src), str(tmp_path / "o.npz")]) == 2
    assert "safetensors" in capsys.readouterr().err
    assert not (tmp_path / "o.npz").exists()


def test_quiet_prints_the_result_line_only(tmp_path, caplog):
    """Without --quiet, writing a Hugging Face folder also logs what it wrote (INFO, on
    stderr from the command); with it, a fresh `keras-vit convert` prints its one result
    line and nothing on stderr."""
    import logging
    import os
    import subprocess
    import sys
    from pathlib import Path

    params = random_official_params(
        np.random.default_rng(0), image_size=32, channels=3, num_classes=7, **ARCH
    )
    path = tmp_path / "tiny.npz"
    np.savez(path, **params)
    with caplog.at_level(logging.INFO, logger="keras_vit"):
        assert main(["convert", str(path), str(tmp_path / "hf_chatty")]) == 0
    assert "Wrote a Hugging Face ViTForImageClassification to " in caplog.text
    root = Path(__file__).resolve().parents[2]
    code = "import sys; from keras_vit.cli.main import main; sys.exit(main())"
    target = tmp_path / "hf_quiet"
    done = subprocess.run(
        [sys.executable, "-c", code, "convert", str(path), str(target), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(root), "KERAS_VIT_VERBOSE": "0"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == ""
    assert done.stdout.splitlines() == [
        f"Wrote {target} (hf): {len(params)} arrays from {path} (npz)"
    ]


@pytest.mark.parametrize("destination", ["m.keras", "m.safetensors"])
def test_a_non_square_npz_converts_with_its_image_size(tmp_path, destination):
    """A release .npz records no grid: a non-square one needs --image-size, which convert
    passes to the file's reading (it used to be refused whatever the flag said)."""
    import keras_vit
    from keras_vit.checkpoints import save_npz
    from tests.output_checks import randomize_weights

    model = randomize_weights(keras_vit.ViT(**ARCH, image_size=(24, 40), num_classes=3))
    save_npz(model, tmp_path / "ns.npz")
    argv = ["convert", str(tmp_path / "ns.npz"), str(tmp_path / destination)]
    assert main([*argv, "--image-size", "24", "40"]) == 0
    back = keras_vit.from_checkpoint(tmp_path / destination)
    x = np.random.default_rng(1).uniform(-1, 1, (2, 24, 40, 3)).astype("float32")
    expected = np.asarray(model(x))
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(np.asarray(back(x)), expected, atol=1e-5)


def test_a_file_that_does_not_fit_the_named_model_names_cli_flags(official_file, tmp_path, capsys):
    """The loader's advice is the Python API's (skip=, strict=); the command line says what
    it offers instead."""
    dst = str(tmp_path / "out.keras")
    assert main(["convert", str(official_file[0]), dst, "--model", "Ti/16"]) == 2
    err = capsys.readouterr().err
    assert "does not fit the model" in err and "--model auto" in err, err
    assert "skip=" not in err and "strict=" not in err, err


def test_a_new_format_is_one_table_row(official_file, tmp_path, monkeypatch, capsys):
    """A row added to FORMAT_TABLE (its own reader and writer) is offered by `--to`, picked
    by its suffix, listed in the help and written by its writer: convert.py is not touched."""
    from keras_vit.checkpoints import format_table
    from keras_vit.checkpoints.release.release_io import write_release_npz

    written = []

    def write_fresh(path, contents):
        written.append(path)
        write_release_npz(path, contents)

    row = dataclasses.replace(
        format_table.FORMAT_TABLE["npz"],
        name="fresh",
        title="a fresh format",
        recognise=lambda probe: False,
        writer=write_fresh,
        suffix=".fresh",
    )
    monkeypatch.setitem(format_table.FORMAT_TABLE, "fresh", row)
    with pytest.raises(SystemExit):
        main(["convert", "--help"])
    assert "fresh (a fresh format)" in capsys.readouterr().out
    assert convert.target_format("out.fresh", None) == "fresh"
    path, params = official_file
    for destination, extra in ((tmp_path / "a.fresh", []), (tmp_path / "b.bin", ["--to", "fresh"])):
        assert main(["convert", str(path), str(destination), *extra]) == 0
        with np.load(destination, allow_pickle=False) as saved:
            assert set(saved.files) == set(params)
    assert written == [str(tmp_path / "a.fresh"), str(tmp_path / "b.bin")]


def test_destination_suffixes_come_from_the_table():
    assert convert.suffixes() == {
        ".npz": "npz",
        "": "hf",
        ".safetensors": "timm",
        ".keras": "keras",
    }
    assert convert.target_format("out/", None) == "hf"
    with pytest.raises(UsageError, match=r"\.npz = npz.*a folder = hf"):
        convert.target_format("out.bin", None)


def test_a_runs_npz_converts_with_the_runs_architecture(tmp_path_factory, tmp_path):
    """The default model is a hybrid with 8 GroupNorm groups, which a .npz does not record:
    converting a run's best.npz read the builder's 32 and gave another model (a trained
    run's 69% became 14%). Now the run's config.json gives the arguments, as in `evaluate`."""
    from tests.helpers.cli_runs import pretrained_run

    run_dir = pretrained_run(tmp_path_factory)
    out = tmp_path / "from_run.keras"
    assert main(["convert", str(run_dir / "best.npz"), str(out)]) == 0
    converted = keras.models.load_model(out)
    reference = keras.models.load_model(run_dir / "best.keras")
    assert converted.get_layer("gn_root").groups == reference.get_layer("gn_root").groups == 8
    images = np.random.default_rng(0).uniform(-1, 1, (4, *reference.input_shape[1:]))
    expected = np.asarray(reference(images.astype("float32")))
    assert np.abs(expected).max() > 0  # a trained head: the comparison bites
    np.testing.assert_allclose(np.asarray(converted(images.astype("float32"))), expected, atol=1e-5)
    # keras_vit.from_checkpoint reads the run's best.npz with the run's groups too
    direct = keras_vit.from_checkpoint(run_dir / "best.npz")
    assert direct.get_layer("gn_root").groups == 8
    np.testing.assert_allclose(np.asarray(direct(images.astype("float32"))), expected, atol=1e-5)
    # ...and no file format but .keras holds its 8 groups: refused, naming the option
    for name in ("to.npz", "to.safetensors"):
        assert main(["convert", str(run_dir / "best.keras"), str(tmp_path / name)]) == 2
        assert not (tmp_path / name).exists()


def test_overwrite_refuses_a_destination_that_is_no_file_or_folder(official_file, tmp_path, capsys):
    """`--overwrite` onto /dev/full replaced the device with a file: a pipe stands in for
    it here (no root needed); it is refused and left as it was."""
    import stat

    path, _ = official_file
    pipe = tmp_path / "pipe.npz"
    os.mkfifo(pipe)
    assert main(["convert", str(path), str(pipe), "--overwrite"]) == 2
    assert "is neither a file nor a folder" in capsys.readouterr().err
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)


def test_dinov3_converts_both_ways(tmp_path):
    """A DINOv3 model (RoPE, storage tokens, LayerScale, q/v biases, no head): .keras ->
    timm -> .keras -> HF DINOv3ViTModel -> .keras, and timm -> keras_vit's .npz (RoPE and
    numerics in its keras_vit/metadata member) -> .keras, each the same features as the
    source (the NumPy forward with the rotary embedding)."""
    from keras_vit.checkpoints.base.naming import official_arrays
    from tests.checkpoints.random_models import randomise
    from tests.numpy_family_reference import family_forward

    source = randomise(
        keras_vit.DINOv3("S/16", include_top=False, image_size=(16, 24), qkv_bias="qv", **ARCH)
    )
    source.save(tmp_path / "dinov3.keras")
    timm, hf = tmp_path / "d.safetensors", tmp_path / "hf_out"
    assert main(["convert", str(tmp_path / "dinov3.keras"), str(timm)]) == 0
    assert main(["convert", str(timm), str(tmp_path / "from_timm.keras")]) == 0
    assert main(["convert", str(tmp_path / "from_timm.keras"), str(hf)]) == 0
    assert main(["convert", str(hf), str(tmp_path / "from_hf.keras")]) == 0
    x = np.random.default_rng(1).uniform(-1, 1, (2, 16, 24, 3)).astype("float32")
    expected = family_forward(
        official_arrays(source),
        x,
        num_heads=4,
        gelu_approximate=False,
        layer_norm_epsilon=1e-5,
        rope=True,
    )
    assert main(["convert", str(timm), str(tmp_path / "d.npz")]) == 0
    assert main(["convert", str(tmp_path / "d.npz"), str(tmp_path / "from_npz.keras")]) == 0
    for name in ("from_timm.keras", "from_hf.keras", "from_npz.keras"):
        model = keras.models.load_model(tmp_path / name)
        assert model.get_layer("encoderblock_0").rope is not None
        np.testing.assert_allclose(np.asarray(model(x)), expected, atol=2e-5, err_msg=name)
