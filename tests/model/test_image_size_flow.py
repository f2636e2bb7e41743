"""`image_size` is parsed once where it enters (the `--image-size` flag, or `RunConfig`'s
recipe) and reaches `PatchEmbed` as that (height, width) pair."""

import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keras_vit.cli.main import build_parser, main
from keras_vit.train import run_config, run_plan, training

ONE_REPLICA = types.SimpleNamespace(num_replicas_in_sync=1)
SIDES = st.integers(1, 4096)


@given(sides=st.lists(SIDES, min_size=1, max_size=2))
def test_the_flag_gives_the_pair(sides):
    argv = ["--image-size", *map(str, sides)]
    for command in (["train"], ["finetune"], ["convert", "a.npz", "b.keras"]):
        args = build_parser().parse_args([*command, *argv])
        assert args.image_size == (sides[0], sides[-1])


@pytest.mark.parametrize("bad", [["0"], ["-3"], ["x"], ["8", "8", "8"], ["8", "0"]])
@pytest.mark.parametrize("command", [["train"], ["convert", "a.npz", "b.keras"]])
def test_a_bad_flag_is_refused_where_it_enters(capsys, command, bad):
    with pytest.raises(SystemExit) as exited:  # argparse's exit, before any work
        main([*command, "--image-size", *bad])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument --image-size" in err.strip().splitlines()[-1], err


@given(value=st.one_of(SIDES, st.tuples(SIDES, SIDES), st.lists(SIDES, min_size=2, max_size=2)))
def test_run_config_holds_the_checked_pair(value):
    config = run_config.RunConfig(recipe=training.TrainConfig(image_size=value))
    expected = (value, value) if isinstance(value, int) else tuple(value)
    assert config.recipe.image_size == expected
    again = run_config.RunConfig.from_dict(config.to_dict())  # config.json stores a list
    assert again.recipe.image_size == expected


@pytest.mark.parametrize("bad", [0, -1, (8,), (8, 8, 8), "32", 2.5, (8, 0)])
def test_run_config_refuses_a_bad_size_at_once(bad):
    """Refused where the recipe is made: a ValueError from the recipe itself, a ConfigError
    (what the CLI reports in one line) from `recipe_from`, which the CLI and config.json use."""
    with pytest.raises(ValueError, match="image_size"):
        training.TrainConfig(image_size=bad)
    with pytest.raises(run_config.ConfigError, match="image_size"):
        run_config.recipe_from("train", {"image_size": bad})


def test_the_pair_reaches_patch_embed():
    recipe = training.TrainConfig(
        image_size=(16, 24), hidden_dim=16, num_heads=2, mlp_dim=16, num_layers=1, stem="patch"
    )
    args = build_parser().parse_args(["train", "--image-size", "16", "24"])
    assert args.image_size == (16, 24)
    plan = run_plan.plan_run(run_config.RunConfig(recipe=recipe), ONE_REPLICA)
    assert plan.image_size == (16, 24)
    model = training.build_model(plan.model_kwargs)
    assert tuple(model.get_layer("embedding").image_size) == (16, 24)
    assert tuple(model.input.shape[1:3]) == (16, 24)


@given(
    side=st.integers(8, 200_000),
    batch=st.integers(1, 512),
    memory_gib=st.integers(1, 1024),
)
def test_a_size_that_cannot_fit_is_refused_before_work(side, batch, memory_gib):
    """Refused exactly when one batch of decoded images (1 byte a value) plus the float32
    position table exceed physical memory: both certainly sit in memory during a step."""
    side -= side % 8
    memory = memory_gib * 2**30
    kwargs = {"hidden_dim": 64, "patch_size": 8, "pooling": "token"}
    tokens = (side // 8) ** 2 + 1
    need = batch * side * side * 3 + tokens * 64 * 4
    original = run_plan.physical_memory_bytes
    run_plan.physical_memory_bytes = lambda: memory
    try:
        if need > memory:
            with pytest.raises(run_config.ConfigError, match=f"image_size {side}x{side} cannot"):
                run_plan.check_fits_in_memory(kwargs, (side, side), 3, batch)
        else:
            run_plan.check_fits_in_memory(kwargs, (side, side), 3, batch)
    finally:
        run_plan.physical_memory_bytes = original


def test_train_at_a_size_that_cannot_fit_exits_2_and_writes_nothing(tmp_path, capsys):
    """`--image-size 100000` was an out-of-memory crash that left a run directory."""
    run_dir = tmp_path / "run"
    code = main(["train", "--image-size", "100000", "--run-dir", str(run_dir), "--quiet"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "image_size 100000x100000 cannot fit" in err and len(err.splitlines()) == 1, err
    assert not run_dir.exists()
