"""The former home of the CLI's shared helpers, kept so that `keras_vit.cli.common.X` still
works: flags and `UsageError` are in `keras_vit.cli.flags`, RUN_OR_MODEL loading in
`keras_vit.cli.model_files`, the train/finetune driver in `keras_vit.cli.run_driver`."""

from __future__ import annotations

from keras_vit.cli.flags import (  # noqa: F401
    JIT_WORDS,
    PRECISION_CHOICES,
    DeprecatedAlias,
    HelpFormatter,
    ImageSize,
    UsageError,
    ValueRequired,
    add_allow_test_selection_argument,
    add_bad_images_argument,
    add_data_arguments,
    add_deprecated_precision_aliases,
    add_image_size_argument,
    add_precision_arguments,
    add_run_arguments,
    jit_compile_value,
    positive_float,
    positive_int,
    recipe_overrides,
    usage_errors,
)
from keras_vit.cli.model_files import (  # noqa: F401
    MODEL_SUFFIXES,
    RUN_CONFIG_FILE,
    RUN_MODEL_FILE,
    choose_precision,
    class_names_from_run,
    load_model,
    model_image_shape,
    model_with_precision,
    outputs_logits,
    read_run_config,
    resolve_model_path,
)
from keras_vit.cli.run_driver import (  # noqa: F401
    check_jit_compile,
    default_run_dir,
    print_summary,
    resolve_strategy,
    run_training,
)
