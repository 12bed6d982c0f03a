"""TuneSpec validation errors as one line for the user, naming the flag or the field.

A value from a flag is named by the flag the user typed (`--rate 0: expected a number > 0`);
a value from a spec file by its field path (`tune.yaml: load.rate: expected a number > 0
(got 0)`), with "did you mean" for a misspelt field. The words are `autotune.inputs.wording`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from autotune.inputs.wording import did_you_mean, plain_message, shown


class SpecError(Exception):
    """A tuning spec is invalid; the message is one line meant for the user."""


def describe_spec_error(
    exc: ValidationError,
    path: Path | None,
    flags: Mapping[str, Any],
    parts: Mapping[str, type[BaseModel]],
) -> str:
    """The first error of `exc` in plain words: named by its flag when `flags` (the flag
    values, as spec fields) gave the value (`--rate 0: expected a number > 0`), else by its
    field (`tune.yaml: load.rate: ...`). `parts`: the model of each part of the spec by its
    path (`""`, `"load"`, ...), whose field names a misspelt field is matched against."""
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    message = plain_message(err)
    if err["type"] == "string_pattern_mismatch":
        message = _PATTERN_WORDS.get(".".join(loc), message)
    value = err.get("input")
    scalar = isinstance(value, str | int | float | Path) and err["type"] != "missing"
    if err["type"] == "missing" and len(loc) == 1:
        return f"--{loc[0].replace('_', '-')} is required (or `{loc[0]}:` in the --spec file)"
    flag = _flag(loc, flags)
    if flag is not None:  # the value as typed, where the flag gave it whole
        whole = len(loc) == (2 if loc[0] in ("load", "engine") else 1)
        typed = f" {shown(value)}" if scalar and whole else ""
        return f"{flag}{typed}: {message}{more}"
    if err["type"] == "extra_forbidden":
        model = parts.get(".".join(loc[:-1]))
        message += did_you_mean(loc[-1], list(model.model_fields) if model else [])
    got = f" (got {shown(value)})" if scalar and err["type"] != "extra_forbidden" else ""
    prefix = f"{path}: " if path else ""
    return f"{prefix}{'.'.join(loc) or 'spec'}: {message}{got}{more}"


# Spec fields a flag of another name sets (the others: `--` and the field's name, dashed).
_FLAG_NAMES = {
    "load.rate": "--rate",
    "load.concurrency": "--concurrency",
    "slos": "--slo",
    "relative_slos": "--slo",
    "objectives": "--objective",
    "engine.command": "--engine-command",
    "engine.options": "--option",
    "capacity": "--load",
}
# Fields that `tune` sets from a flag of their own name (`--confirm-rounds`); the others, when
# a caller passes them as values (a stored spec read back by `worker` or `confirm`), are named
# by their field, never by a flag that does not exist (`--max-error-rate`).
_SAME_NAME_FLAGS = frozenset(
    {
        *("study", "model", "space", "workload", "scenario", "trials", "storage", "root"),
        *("search", "sampler", "remeasure", "screen", "seed", "repair", "parallel", "devices"),
        *("warm_start", "reingest", "device_cost_per_hour", "repeats", "min_agreement"),
        *("load_client", "prune", "confirm", "confirm_rounds", "served_model_name"),
    }
)
_PATTERN_WORDS = {
    "study": "expected letters, digits, '_', '.' and '-', starting with a letter or digit",
}


def _flag(loc: list[str], flags: Mapping[str, Any]) -> str | None:
    """The flag that gave the value at `loc`, if a flag did."""
    if not loc or flags.get(loc[0]) is None:
        return None
    if loc[0] in ("load", "engine"):
        given = flags[loc[0]]
        if len(loc) < 2 or not isinstance(given, dict) or given.get(loc[1]) is None:
            return None
        return _FLAG_NAMES.get(".".join(loc[:2]))
    if loc[0] in _SAME_NAME_FLAGS:
        return "--" + loc[0].replace("_", "-")
    return _FLAG_NAMES.get(loc[0])
