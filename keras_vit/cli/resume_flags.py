"""`train/finetune --resume` with other flags: the flags that would change the stored run.

A resumed run continues with the configuration stored in its config.json; a flag typed with
`--resume` whose value differs from the stored one (also one typed at its default value)
would be silently ignored, so it is refused instead, named with both values. Flags equal to
the stored values (the original command line with `--resume` added) and the flags of this
invocation only (`--run-dir`, `--resume`, output flags) are accepted. Imports no other
`keras_vit.cli` module.
"""

from __future__ import annotations

import json


def _flat(config) -> dict[str, object]:
    """{field: JSON value} of a `RunConfig`, the recipe's fields at the top level."""
    values = json.loads(json.dumps(config.to_dict()))
    recipe = values.pop("recipe")
    return {**recipe, **values}


INVOCATION_FLAGS = frozenset(
    {"run_dir", "resume", "quiet", "log_every", "verbose", "func", "check"}
)
"""Flags of this invocation only, never part of the stored run (accepted with --resume)."""


def resume_conflicts(args, flagged, stored, task: str) -> list[str]:
    """The flags given with --resume that it would ignore, one phrase each ("--epochs 5
    (the run has 3)").

    A flag counts as given when it was typed (`args.typed_flags`, set by `keras-vit`'s
    main from a second parse without defaults; a flag typed at its default value counts).
    A typed flag whose field equals the stored run's is accepted (the original command line
    with --resume added); the invocation's own flags (`INVOCATION_FLAGS`) too. Without
    `typed_flags` (a namespace parsed elsewhere), a flag counts as given when the
    configuration it makes differs from the default configuration of `task`.

    Args:
        args: the parsed `keras-vit <task>` arguments.
        flagged: the `RunConfig` the flags describe (`build_config(args)`).
        stored: the `RunConfig` of the run's config.json.
        task: "train" or "finetune".
    """
    new, old = _flat(flagged), _flat(stored)
    typed = getattr(args, "typed_flags", None)
    if typed is None:
        base = _flat(type(flagged)(task=task))
        typed = {field for field, value in new.items() if value != base.get(field)}
    typed = set(typed) - INVOCATION_FLAGS
    conflicts = [
        f"--{field.replace('_', '-')} {_shown(value)} (the run has {_shown(old.get(field))})"
        for field, value in new.items()
        if field in typed and value != old.get(field)
    ]
    conflicts += [f"--{dest.replace('_', '-')} (not part of a run)" for dest in typed - set(new)]
    return conflicts


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
