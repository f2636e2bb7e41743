"""`train/finetune --resume` with other flags: the flags that would change the stored run.

A resumed run continues with the configuration stored in its config.json; a flag given with
`--resume` whose value differs from the stored one would be silently ignored, so it is
refused instead, named with both values. Flags equal to the stored values (the original
command line with `--resume` added) and the flags of this invocation only (`--run-dir`,
`--resume`, output flags) are accepted.
"""

from __future__ import annotations

import json

# argparse dests that belong to this invocation, not to the run's stored configuration
INVOCATION_DESTS = frozenset(
    {"command", "func", "run_dir", "resume", "quiet", "log_every", "verbose", "output"}
)


def given_flags(args, task: str) -> dict[str, object]:
    """{argparse dest: value} of the flags of `args` whose value is not the parser default
    of `keras-vit <task>` (that is, the flags given), without `INVOCATION_DESTS`."""
    from keras_vit.cli.main import build_parser

    defaults = vars(build_parser().parse_args([task]))
    return {
        dest: value
        for dest, value in vars(args).items()
        if dest not in INVOCATION_DESTS and dest in defaults and value != defaults[dest]
    }


def _flat(config) -> dict[str, object]:
    """{field: JSON value} of a `RunConfig`, the recipe's fields at the top level."""
    values = json.loads(json.dumps(config.to_dict()))
    recipe = values.pop("recipe")
    return {**recipe, **values}


def resume_conflicts(args, flagged, stored, task: str) -> list[str]:
    """The flags given with --resume that differ from the stored run, one phrase each
    ("--epochs 5 (the run has 3)").

    Args:
        args: the parsed `keras-vit <task>` arguments.
        flagged: the `RunConfig` the flags describe (`build_config(args)`).
        stored: the `RunConfig` of the run's config.json.
    """
    given = given_flags(args, task)
    new, old = _flat(flagged), _flat(stored)
    return [
        f"--{dest.replace('_', '-')} {_shown(new[dest])} (the run has {_shown(old.get(dest))})"
        for dest in given
        if dest in new and new[dest] != old.get(dest)
    ]


def _shown(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if not isinstance(value, list) else "x".join(map(str, value))


def check_resume_flags(args, flagged, stored, task: str) -> None:
    """UsageError naming the flags given with --resume that differ from the stored run."""
    from keras_vit.cli.flags import UsageError

    conflicts = resume_conflicts(args, flagged, stored, task)
    if conflicts:
        raise UsageError(
            f"--resume continues {args.run_dir} with its stored configuration, which these "
            f"flags would change: {', '.join(conflicts)}. Drop them to resume, or start a new "
            "run in another --run-dir."
        )
