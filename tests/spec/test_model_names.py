"""One reader of model names (`keras_vit.spec.configs.resolve_model`): every spelling of every
named model reaches the same table row through every subcommand that takes a model name
(`train --model`, `convert --model`, `benchmark --model`), at their parsing / plan step."""

import re
import types

import pytest

import keras_vit
from keras_vit.cli import benchmark, convert
from keras_vit.cli.flags import UsageError
from keras_vit.cli.main import build_parser
from keras_vit.spec import configs
from keras_vit.train import run_config, run_plan


def _spellings(table_name: str) -> list[str]:
    """The spellings users write, built here from the table name by hand (not by the
    resolver): table, builder, release file, AugReg grammar and aliases, loose forms."""
    hybrid, _, vit = table_name.rpartition("+")
    size, patch = vit.split("/")
    builder = f"{hybrid}_{size}{patch}" if hybrid else f"ViT_{size}{patch}"
    release = f"{hybrid}+ViT-{size}_{patch}" if hybrid else f"ViT-{size}_{patch}"
    augreg = f"{hybrid}_{size}_{patch}" if hybrid else f"{size}_{patch}"
    forms = [
        table_name,
        builder,
        builder.lower(),
        release,
        augreg,
        f"{augreg}-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0",
        f"augreg/{release}-224",
        f"{release}.npz",
    ]
    if hybrid:
        forms += [f"{hybrid}+ViT-{size}/{patch}", f"{hybrid.lower()}{size.lower()}{patch}"]
    else:
        forms += [f"ViT-{vit}", f"{size.lower()}{patch}", f"vit-{size.lower()}/{patch}"]
        timm_size = TIMM_SIZES[size]
        forms += [f"vit_{timm_size}_patch{patch}", f"vit_{timm_size}_patch{patch}_224"]
    return forms


# timm's size words (timm vision_transformer.py: vit_tiny_patch16_224 ... vit_huge_patch14_224).
TIMM_SIZES = {"Ti": "tiny", "S": "small", "B": "base", "L": "large", "H": "huge"}


CASES = [(name, s) for name in configs.MODEL_CONFIGS for s in _spellings(name)]
ONE_REPLICA = types.SimpleNamespace(num_replicas_in_sync=1)


def test_the_spelling_table_is_not_empty():
    assert len(CASES) >= 10 * len(configs.MODEL_CONFIGS)
    assert ("R50+B/16", "R50_B16") in CASES and ("Ti/16", "ti16") in CASES


@pytest.mark.parametrize("table_name, spelling", CASES)
def test_every_spelling_resolves_to_its_row(table_name, spelling):
    named = configs.resolve_model(spelling)
    assert named.name == table_name
    assert named.config is configs.MODEL_CONFIGS[table_name]


@pytest.mark.parametrize("table_name, spelling", CASES)
def test_train_plans_every_spelling(table_name, spelling):
    args = build_parser().parse_args(["train", "--model", spelling, "--image-size", "224"])
    from keras_vit.cli import train

    config = train.build_config(args)
    kwargs = run_plan.train_model_kwargs(config, 10, 3, (224, 224))
    expected = configs.MODEL_CONFIGS[table_name].as_kwargs()
    assert {k: kwargs[k] for k in expected} == expected
    assert kwargs["image_size"] == [224, 224] and kwargs["num_classes"] == 10


@pytest.mark.parametrize("table_name, spelling", CASES)
def test_convert_builds_every_spelling(table_name, spelling):
    builder, pixels = convert.builder_for(spelling)
    config = configs.MODEL_CONFIGS[table_name]
    assert builder is getattr(keras_vit, configs.builder_name(table_name))
    stride = config.total_stride if table_name in configs.HYBRID_CONFIGS else 1
    assert pixels == config.patch_size * stride


@pytest.mark.parametrize("table_name, spelling", CASES)
def test_benchmark_times_every_spelling(table_name, spelling):
    """Every spelling of every row, hybrids included (keras_vit's HybridViT alone), passes
    benchmark's checks as that row at the default 224 (tests/cli/test_benchmark.py times
    them)."""
    args = build_parser().parse_args(["benchmark", "--model", spelling, "--gemm-sizes", "none"])
    benchmark.check_args(args)
    assert args.model == table_name


@pytest.mark.parametrize("table_name, spelling", CASES)
def test_every_subcommand_reads_a_spelling_as_the_same_row(table_name, spelling):
    """train, convert, and benchmark read one spelling as one table row; none of them calls
    a known spelling unknown or refuses a hybrid."""
    from keras_vit.cli import train

    rows = set()
    config = train.build_config(build_parser().parse_args(["train", "--model", spelling]))
    rows.add(run_plan.resolve_model_name(config.model).name)
    builder, _ = convert.builder_for(spelling)
    rows.add(next(n for n in configs.MODEL_CONFIGS if configs.builder_name(n) == builder.__name__))
    rows.add(benchmark.variant_name(spelling))
    assert rows == {table_name}


def test_a_hybrid_trains_through_the_whole_plan():
    config = run_config.RunConfig(
        model="R+ViT-Ti_16",
        recipe=keras_vit.train.training.TrainConfig(image_size=32, batch_size=8, epochs=1),
    )
    kwargs = run_plan.plan_run(config, ONE_REPLICA).model_kwargs
    assert kwargs["resnet_stages"] == () and kwargs["patch_size"] == 8
    assert kwargs["image_size"] == [32, 32]


@pytest.mark.parametrize("recipe", ["default", "tiny", "DEFAULT"])
def test_the_recipe_names_belong_to_train_only(recipe):
    assert run_plan.resolve_model_name(recipe).is_recipe
    with pytest.raises(ValueError, match="Unknown model"):
        configs.resolve_model(recipe)
    with pytest.raises(UsageError):
        convert.builder_for(recipe)


@pytest.mark.parametrize("bad", ["Q/7", "R50+Ti/16", "B/17", "", "vit"])
def test_an_unknown_name_lists_the_valid_ones(bad):
    valid = re.escape(str(configs.valid_names()))
    with pytest.raises(ValueError, match=rf"Unknown model {re.escape(repr(bad))}.*{valid}"):
        configs.resolve_model(bad)
    with pytest.raises(run_config.ConfigError, match=re.escape("'default', 'tiny', 'Ti/16'")):
        run_plan.resolve_model_name(bad)
    with pytest.raises(UsageError, match="R50\\+B/16"):
        convert.builder_for(bad)
    with pytest.raises(UsageError, match="Ti/16"):
        benchmark.variant_name(bad)


def test_a_new_row_is_a_new_shortcut_and_a_new_counted_model():
    """Every row has its generated public shortcut and a parameter count in the tests."""
    from tests.model.test_hybrid import PUBLISHED
    from tests.model.test_vit import RELEASE_PARAMS

    builders = {configs.builder_name(name) for name in configs.MODEL_CONFIGS}
    assert builders == set(RELEASE_PARAMS) | set(PUBLISHED)
    for builder in builders:
        assert builder in keras_vit.__all__
        assert getattr(keras_vit, builder).__name__ == builder
        assert "paper" in getattr(keras_vit, builder).__doc__


@pytest.mark.parametrize(
    "spelling, size",
    [
        ("B/16-384", 384),
        ("ViT-B_16-384", 384),
        ("augreg/ViT-S_16-224", 224),
        ("B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k"
         "-lr_0.01-res_384", 384),
        ("vit_base_patch16_384", 384),
        ("VIT_SMALL_PATCH16_224", 224),
        ("vit_base_patch16", None),
        ("B/16", None),
        ("S_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", None),
    ],
)  # fmt: skip
def test_an_image_side_after_the_name_is_kept_not_dropped(spelling, size):
    assert configs.resolve_model(spelling).image_size == size


def test_train_builds_at_the_size_the_name_gives():
    from keras_vit.cli import train
    from keras_vit.cli.main import UsageError, build_parser

    args = build_parser().parse_args(["train", "--model", "Ti/16-64"])
    assert tuple(train.build_config(args).recipe.image_size) == (64, 64)
    args = build_parser().parse_args(["train", "--model", "Ti/16-64", "--image-size", "32"])
    with pytest.raises(UsageError, match="names image size 64"):
        train.build_config(args)
