"""spec/kept_model: the two selections (the paper's final model, appendix B.1, and Keras'
best-on-validation), the default, and that each place taking `select` takes exactly them."""

import argparse

import pytest

from keras_vit.spec.kept_model import DEFAULT_SELECTION, SELECTIONS


def test_the_choices_and_the_default():
    assert SELECTIONS == ("last", "best")
    assert DEFAULT_SELECTION == "last"


def test_the_select_flag_offers_exactly_them():
    from keras_vit.cli.flags import add_select_argument

    parser = argparse.ArgumentParser()
    add_select_argument(parser)
    assert parser.parse_args([]).select == "last"
    assert parser.parse_args(["--select", "best"]).select == "best"
    with pytest.raises(SystemExit):
        parser.parse_args(["--select", "first"])


@pytest.mark.parametrize("select", ["first", "Best", ""])
def test_other_values_are_refused(select, tmp_path):
    from keras_vit.train.callbacks import ModelSnapshots
    from keras_vit.train.run_config import ConfigError, RunConfig

    assert ModelSnapshots(tmp_path).select == "last"
    with pytest.raises(ValueError, match=rf"select.*{select!r}|{select!r}.*select"):
        ModelSnapshots(tmp_path, select=select)
    with pytest.raises(ConfigError, match=rf"Unknown select {select!r}.*'last', 'best'"):
        RunConfig(select=select)
