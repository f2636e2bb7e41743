"""`train/finetune --resume` with other flags: the flags that would change the stored run.

A resumed run continues with the configuration stored in its config.json; a flag given with
`--resume` whose value differs from the stored one would be silently ignored, so it is
refused instead, named with both values. Flags equal to the stored values (the original
command line with `--resume` added) and the flags of this invocation only (`--run-dir`,
`--resume`, output flags) are accepted. Imports no other `keras_vit.cli` module.
"""

from __future__ import annotations

import json


def _flat(config) -> dict[str, object]:
    """{field: JSON value} of a `RunConfig`, the recipe's fields at the top level."""
    values = json.loads(json.dumps(config.to_dict()))
    recipe = values.pop("recipe")
    return {**recipe, **values}


def resume_conflicts(args, flagged, stored, task: str) -> list[str]:
    """The flags given with --resume that differ from the stored run, one phrase each
    ("--epochs 5 (the run has 3)").

    A flag counts as given when the configuration it makes differs from the default
    configuration of `task` (a flag set to its default value is not told apart from an
    absent one); the invocation's own flags (--run-dir, --resume, output) are no fields.

    Args:
        args: the parsed `keras-vit <task>` arguments (unused but for the message).
        flagged: the `RunConfig` the flags describe (`build_config(args)`).
        stored: the `RunConfig` of the run's config.json.
        task: "train" or "finetune".
    """
    default = type(flagged)(task=task)
    new, old, base = _flat(flagged), _flat(stored), _flat(default)
    return [
        f"--{field.replace('_', '-')} {_shown(value)} (the run has {_shown(old.get(field))})"
        for field, value in new.items()
        if value != base.get(field) and value != old.get(field)
    ]


def _shown(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if not isinstance(value, list) else "x".join(map(str, value))


def resume_refusal(args, flagged, stored, task: str) -> str | None:
    """The one-line refusal naming the flags given with --resume that differ from the
    stored run (`resume_conflicts`), or None when there are none (the caller raises it as
    its `UsageError`)."""
    conflicts = resume_conflicts(args, flagged, stored, task)
    if not conflicts:
        return None
    return (
        f"--resume continues {args.run_dir} with its stored configuration, which these "
        f"flags would change: {', '.join(conflicts)}. Drop them to resume, or start a new "
        "run in another --run-dir."
    )
