"""cli/resume_flags: flags given with --resume that would change the stored run are named with
both values; flags equal to the stored run and the invocation's own flags are accepted."""

import argparse

import pytest

from keras_vit.cli.resume_flags import INVOCATION_FLAGS, resume_conflicts, resume_refusal
from keras_vit.train.run_config import RunConfig
from keras_vit.train.training import TrainConfig


def config(**recipe):
    return RunConfig(task="train", recipe=TrainConfig(**recipe))


def args(typed=None, **values):
    namespace = argparse.Namespace(run_dir="runs/a", **values)
    if typed is not None:
        namespace.typed_flags = set(typed)
    return namespace


def test_a_typed_flag_that_differs_is_named_with_both_values():
    stored = config(epochs=3, learning_rate=0.003)
    flagged = config(epochs=5, learning_rate=0.003)
    assert resume_conflicts(args({"epochs", "learning_rate"}), flagged, stored, "train") == [
        "--epochs 5 (the run has 3)"
    ]


def test_a_flag_typed_at_its_default_counts():
    """`--epochs 30` typed (the default) against a run stored with 3 epochs is refused."""
    stored, flagged = config(epochs=3), config()
    assert flagged.recipe.epochs == 30
    assert resume_conflicts(args({"epochs"}), flagged, stored, "train") == [
        "--epochs 30 (the run has 3)"
    ]
    assert resume_conflicts(args(set()), flagged, stored, "train") == []


def test_the_same_command_line_with_resume_is_accepted():
    stored = config(epochs=3, stem="patch")
    typed = {"epochs", "stem", *INVOCATION_FLAGS}
    assert resume_conflicts(args(typed), config(epochs=3, stem="patch"), stored, "train") == []
    assert resume_refusal(args(typed), config(epochs=3, stem="patch"), stored, "train") is None


def test_a_flag_outside_the_run_is_named():
    stored = config()
    assert resume_conflicts(args({"output"}), config(), stored, "train") == [
        "--output (not part of a run)"
    ]


def test_without_typed_flags_differences_from_the_default_count():
    """A namespace parsed elsewhere: a field away from the task's default counts as given."""
    stored = config(epochs=3)
    assert resume_conflicts(args(), config(epochs=7), stored, "train") == [
        "--epochs 7 (the run has 3)"
    ]
    assert resume_conflicts(args(), config(), stored, "train") == []  # all defaults: none


@pytest.mark.parametrize(
    "recipe, shown",
    [
        ({"image_size": (32, 48)}, "--image-size 32x48 (the run has 28x28)"),
        ({"learning_rate": 0.5}, "--learning-rate 0.5 (the run has 0.003)"),
    ],
)
def test_values_are_shown_as_typed(recipe, shown):
    field = next(iter(recipe))
    assert resume_conflicts(args({field}), config(**recipe), config(), "train") == [shown]


def test_the_refusal_is_one_line_naming_the_run_and_every_flag():
    stored = config(epochs=3, stem="resnet")
    flagged = config(epochs=4, stem="patch")
    message = resume_refusal(args({"epochs", "stem"}), flagged, stored, "train")
    assert "\n" not in message
    assert message.startswith("--resume continues runs/a with its stored configuration")
    assert "--stem patch (the run has resnet)" in message
    assert "--epochs 4 (the run has 3)" in message
    assert message.endswith("or start a new run in another --run-dir.")
