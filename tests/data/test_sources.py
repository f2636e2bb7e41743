"""`DataSource` carries what callers need (counts, split sizes, slicing, help text): a new
source is one entry of `SOURCES`, and nothing outside sources.py branches on its kind."""

import ast
import pathlib

import pytest

import keras_vit
from keras_vit.data import pipeline, sources
from keras_vit.evaluate import transfer_suite

PACKAGE = pathlib.Path(keras_vit.__file__).parent


def _fake_source(**overrides):
    fields = dict(
        kind="fake",
        accepts=lambda source: source == "fake!",
        describe=lambda source, data_dir, shots, seed: None,
        examples=lambda source, split, options: None,
        class_counts=lambda source, split, data_dir, shots, seed: {"a": 2, "b": 3},
        help="the fake source of this test",
    )
    return sources.DataSource(**{**fields, **overrides})


def test_a_new_source_is_one_entry(monkeypatch):
    monkeypatch.setattr(sources, "SOURCES", (_fake_source(), *sources.SOURCES))
    assert pipeline.class_counts("fake!", "train") == {"a": 2, "b": 3}
    assert pipeline.split_size("fake!", "train") == 5  # the sum of its class counts
    assert transfer_suite.vtab_splits("fake!", 2) == ("train[:400]", "train[400:500]")


def test_a_source_that_records_sizes_and_slices_in_stored_order(monkeypatch):
    fake = _fake_source(
        class_counts=lambda *args: None,
        split_size=lambda source, split, data_dir: 1234,
        per_class_slices=False,
    )
    monkeypatch.setattr(sources, "SOURCES", (fake,))
    assert pipeline.split_size("fake!", "train") == 1234
    assert pipeline.class_counts("fake!", "train") is None
    assert transfer_suite.vtab_splits("fake!", 2) == ("train[:800]", "train[800:1000]")


def test_an_unknown_source_is_an_error_naming_every_source():
    for source in ("no-such-set", 3.5, None):
        with pytest.raises(ValueError, match="Unknown data source") as raised:
            pipeline.class_counts(source, "train")
        for entry in sources.SOURCES:
            assert entry.help in str(raised.value)


def test_the_tfds_source_slices_in_stored_order_and_the_others_per_class():
    by_kind = {entry.kind: entry for entry in sources.SOURCES}
    assert {k for k, e in by_kind.items() if not e.per_class_slices} == {"tfds"}
    assert by_kind["tfds"].split_size is not None
    assert all(e.split_size is None for k, e in by_kind.items() if k != "tfds")


def test_no_branch_on_a_source_kind_outside_the_sources_module():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "sources.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "source_kind":
                offenders.append(f"{path.name}: source_kind(...) call")
            if isinstance(node, ast.Attribute) and node.attr == "kind":
                base = node.value
                name = getattr(base, "id", getattr(base, "attr", ""))
                if "source" in name or name in ("kind", "entry", "candidate"):
                    offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
