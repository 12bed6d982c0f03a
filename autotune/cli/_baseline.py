"""`tune --baseline FILE`: start a study from what the user runs today.

The script or YAML is read into options and environment (`autotune.engine.read_serve_file`);
the space's parameters take the values it sets (`SearchSpace.params_from_engine`) as trial 0,
and every other option and variable it sets is fixed for every trial, so that trials differ
from today's command only in what the space searches. Flags and the spec file win over it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.cli._common import InputError
from autotune.engine import ServeCommand, ServeImportError, read_serve_file
from autotune.space import SpaceError, load_space, option_range_problem
from autotune.spec import TuneSpec


def read_baseline(path: Path) -> ServeCommand:
    try:
        return read_serve_file(path)
    except ServeImportError as exc:
        raise InputError(f"--baseline {path}: {exc}") from None


def with_baseline(spec: TuneSpec, command: ServeCommand, path: Path) -> TuneSpec:
    """`spec` with trial 0 and the fixed options and variables taken from `command`."""
    try:
        space = load_space(spec.space)
        params, used_options, used_env = space.params_from_engine(command.options, command.env)
        space.to_engine(params)  # the values are the space's: checked once more, whole
    except SpaceError as exc:
        raise InputError(f"--baseline {path}: {exc}") from None
    options = {k: v for k, v in command.options.items() if k not in used_options}
    for name, value in options.items():  # fixed for every trial: bounded as `--option` is
        if (problem := option_range_problem(name, value)) is not None:
            raise InputError(f"--baseline {path}: {name}: {problem}")
    env = {k: v for k, v in command.env.items() if k not in used_env}
    engine = spec.engine.model_copy(
        update={"options": {**options, **spec.engine.options}, "env": {**env, **spec.engine.env}}
    )
    update: dict[str, Any] = {"engine": engine, "baseline": params}
    if spec.served_model_name is None and command.served_model_name:
        update["served_model_name"] = command.served_model_name
    return spec.model_copy(update=update)
