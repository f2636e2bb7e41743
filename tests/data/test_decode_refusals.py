"""`decode_file` names a format it recognises but does not decode (TIFF, ICO) in a
ValueError, as `image_check` does; unknown bytes keep TensorFlow's error."""

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit.data import image_check
from keras_vit.data.decode import decode_file
from keras_vit.spec.image_formats import FORMATS_TEXT


@pytest.mark.parametrize("suffix, name", [(".tiff", "TIFF"), (".ico", "ICO")])
def test_a_recognised_format_it_does_not_decode_is_a_value_error(tmp_path, suffix, name):
    path = tmp_path / f"photo{suffix}"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(path)
    with pytest.raises(ValueError, match=f"photo{suffix}: {name} data; keras_vit decodes"):
        decode_file(path)
    assert image_check.image_problem(path) == f"{name} data; keras_vit decodes {FORMATS_TEXT}"


def test_unknown_bytes_keep_tensorflows_error(tmp_path):
    path = tmp_path / "x.png"
    path.write_bytes(b"hello, no image")
    with pytest.raises(tf.errors.InvalidArgumentError):
        decode_file(path)


def test_predict_help_lists_the_decoded_formats(capsys):
    from keras_vit.cli.main import build_parser

    for command in ("predict", "explain"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        assert FORMATS_TEXT in " ".join(capsys.readouterr().out.split()), command
    assert "WebP" in FORMATS_TEXT
